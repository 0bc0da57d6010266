// The loader hook of record-modules.mjs (it runs on Node's loader thread). Registered before anything
// else, it sees what every later hook (tsx's, say) passes on, and every module tsx itself is made of.
import { appendFileSync } from 'node:fs'

let file

export function initialize(data) {
  file = data.file
}

export async function resolve(specifier, context, next) {
  const resolved = await next(specifier, context)
  appendFileSync(file, `${resolved.url}\n`)
  return resolved
}
