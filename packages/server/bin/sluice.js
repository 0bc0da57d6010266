#!/usr/bin/env node
// The `sluice` command. Runs the compiled CLI (dist/main.js) whenever this
// package and the @sluice packages it imports were built from the sources they
// have now (build-stamp.js): a published package, or a checkout after
// `npm start` / `pnpm build`. Only in a checkout with no build, or one older
// than its sources, does it run the TypeScript sources through tsx, resolving
// the other @sluice packages to their sources too (the `sluice-source` export
// condition); tsx compiles every module on each start, which costs seconds.
// SLUICE_FROM_SOURCE=1 asks for the sources whatever the build (tests of the
// workspace, and the start benchmark's baseline).
//
// Of a current build it runs the bundle, dist/sluice.mjs (bin/bundle.js: the
// same code in one module, loaded in a fraction of the time), unless a
// package in it was built again since or SLUICE_UNBUNDLED=1 asks for the
// modules of dist/ one by one (stack traces then name each module's file).
import { existsSync, readFileSync, realpathSync } from 'node:fs'
import * as nodeModule from 'node:module'
import { createRequire, register } from 'node:module'
import { dirname, join } from 'node:path'
import { fileURLToPath, pathToFileURL } from 'node:url'
import { BUNDLE, staleBundle, staleReason } from './build-stamp.js'
import { execWithArenaCap } from './malloc-arenas.js'

const packageDir = fileURLToPath(new URL('..', import.meta.url))
const source = join(packageDir, 'src', 'main.ts')
const compiled = join(packageDir, 'dist', 'main.js')
const bundle = join(packageDir, BUNDLE)

/** Where Node finds package `name` from `dir` (node_modules here or in a parent), links followed. */
function installedAt(dir, name) {
  for (let at = dir; ; at = dirname(at)) {
    const candidate = join(at, 'node_modules', name)
    if (existsSync(join(candidate, 'package.json'))) return realpathSync(candidate)
    if (dirname(at) === at) throw new Error(`${name} is not installed`)
  }
}

// First of all: what it does, it does best before the process has done anything.
execWithArenaCap(process.argv.slice(2), process.env, () => join(installedAt(packageDir, '@sluice/sendfile'), 'build', 'Release', 'sluice_sendfile.node'))

function tsxAvailable() {
  try {
    createRequire(import.meta.url).resolve('tsx/esm/api')
    return true
  } catch {
    return false
  }
}

/** This package's directory and those of the @sluice packages it depends on, directly or not, by name. */
function sluicePackages() {
  const found = new Map([['@sluice/server', packageDir]])
  const pending = [packageDir]
  while (pending.length > 0) {
    const dir = pending.pop()
    const manifest = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8'))
    for (const name of Object.keys(manifest.dependencies ?? {})) {
      if (!name.startsWith('@sluice/') || found.has(name)) continue
      const depDir = installedAt(dir, name)
      found.set(name, depDir)
      pending.push(depDir)
    }
  }
  return found
}

/**
 * Why the build cannot be run (undefined when it can): each package's dist/
 * must be the build of its src/ now. `bundled` says whether the bundle holds
 * those builds.
 */
function checkBuild() {
  if (!existsSync(compiled)) return { stale: 'nothing is built', bundled: false }
  try {
    const packages = sluicePackages()
    for (const dir of packages.values()) {
      const reason = staleReason(dir)
      if (reason !== undefined) return { stale: reason, bundled: false }
    }
    return { stale: undefined, bundled: process.env.SLUICE_UNBUNDLED !== '1' && staleBundle(packageDir, packages) === undefined }
  } catch (error) {
    return { stale: `the build could not be checked (${error.message})`, bundled: false }
  }
}

async function runSource() {
  const { register: registerTsx } = await import('tsx/esm/api')
  registerTsx()
  // Registered after tsx, so it runs first: adds the condition, then hands over to tsx.
  register(
    'data:text/javascript,' +
      encodeURIComponent(
        'export async function resolve(s, c, next) { return next(s, { ...c, conditions: [...new Set([...(c.conditions ?? []), "sluice-source"])] }) }',
      ),
  )
  return source
}

let entry
const haveSource = existsSync(source) && tsxAvailable()
if (process.env.SLUICE_FROM_SOURCE === '1') {
  if (!haveSource) {
    process.stderr.write('sluice: SLUICE_FROM_SOURCE=1 needs src/main.ts and tsx (a workspace checkout)\n')
    process.exit(1)
  }
  entry = await runSource()
} else {
  const { stale, bundled } = checkBuild()
  if (stale === undefined) {
    // Node 22.1 and later keep the compiled code of each module on disk for the next start (a no-op on Node 20).
    nodeModule.enableCompileCache?.()
    entry = bundled ? bundle : compiled
  }
  else if (haveSource) {
    process.stderr.write(`sluice: running the sources through tsx (slow to start): ${stale}; \`npm start\` or \`pnpm build\` builds it\n`)
    entry = await runSource()
  } else if (existsSync(compiled)) entry = compiled
  else {
    process.stderr.write('sluice: neither dist/main.js (run the build) nor tsx to run src/main.ts is available\n')
    process.exit(1)
  }
}
const { main } = await import(pathToFileURL(entry).href)
await main(process.argv.slice(2), process.env)
