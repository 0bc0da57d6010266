#!/usr/bin/env node
// The `sluice` command. Runs the compiled CLI (dist/main.js) when this package
// was built or installed from a tarball; in a workspace checkout, where nothing
// is built, it runs the TypeScript sources through tsx, resolving the other
// @sluice packages to their sources too (the `sluice-source` export condition).
import { existsSync } from 'node:fs'
import { createRequire, register } from 'node:module'

const source = new URL('../src/main.ts', import.meta.url)
const compiled = new URL('../dist/main.js', import.meta.url)

function tsxAvailable() {
  try {
    createRequire(import.meta.url).resolve('tsx/esm/api')
    return true
  } catch {
    return false
  }
}

let entry
if (existsSync(source) && tsxAvailable()) {
  const { register: registerTsx } = await import('tsx/esm/api')
  registerTsx()
  // Registered after tsx, so it runs first: adds the condition, then hands over to tsx.
  register(
    'data:text/javascript,' +
      encodeURIComponent(
        'export async function resolve(s, c, next) { return next(s, { ...c, conditions: [...new Set([...(c.conditions ?? []), "sluice-source"])] }) }',
      ),
  )
  entry = source
} else if (existsSync(compiled)) {
  entry = compiled
} else {
  process.stderr.write('sluice: neither dist/main.js (run the build) nor tsx to run src/main.ts is available\n')
  process.exit(1)
}
const { main } = await import(entry.href)
await main(process.argv.slice(2), process.env)
