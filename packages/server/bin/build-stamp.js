// Whether a package's dist/ was built from the src/ it has now. A build ends by
// writing dist/.source-digest (`node <this file> <package dir>`, in each
// package's build script): a digest of every source file's path and bytes.
// The check looks at modification times first (no source newer than the
// digest file: fresh, without reading a byte); only when some file is newer
// (a checkout touched it, or it was edited) does it read the sources and
// compare digests, so a cached build restored for the same sources counts as
// fresh and an edit after the build does not.
import { createHash } from 'node:crypto'
import { existsSync, readFileSync, readdirSync, statSync, writeFileSync } from 'node:fs'
import { join, relative } from 'node:path'
import { fileURLToPath } from 'node:url'

export const STAMP = join('dist', '.source-digest')

/** The .ts/.tsx files a build compiles (tests excluded), sorted by path. */
function sourceFiles(dir, out = []) {
  let entries
  try {
    entries = readdirSync(dir, { withFileTypes: true })
  } catch {
    return out
  }
  for (const entry of entries) {
    const path = join(dir, entry.name)
    if (entry.isDirectory()) sourceFiles(path, out)
    else if (/\.tsx?$/.test(entry.name) && !/\.test\.tsx?$/.test(entry.name)) out.push(path)
  }
  return out.sort()
}

export function sourceDigest(packageDir) {
  const hash = createHash('sha256')
  for (const file of sourceFiles(join(packageDir, 'src'))) {
    hash.update(relative(packageDir, file)).update('\0').update(readFileSync(file)).update('\0')
  }
  return hash.digest('hex')
}

export function writeStamp(packageDir) {
  writeFileSync(join(packageDir, STAMP), `${sourceDigest(packageDir)}\n`)
}

/** The digest a build wrote (`writeStamp`), if any. */
function readStamp(packageDir) {
  try {
    return readFileSync(join(packageDir, STAMP), 'utf8').trim()
  } catch {
    return undefined
  }
}

/** Undefined when dist/ is the build of the sources there now, else why not. */
export function staleReason(packageDir) {
  const stamp = join(packageDir, STAMP)
  if (!existsSync(stamp)) return `${join(packageDir, 'dist')} is missing or was not built by its build script`
  const builtAt = statSync(stamp).mtimeMs
  if (sourceFiles(join(packageDir, 'src')).every((file) => statSync(file).mtimeMs <= builtAt)) return undefined
  return readStamp(packageDir) === sourceDigest(packageDir) ? undefined : `${join(packageDir, 'src')} changed after the last build`
}

/**
 * The CLI's bundle (bin/bundle.js): dist/main.js and the @sluice packages it
 * imports, in one file, which Node loads in a fraction of the time the
 * hundreds of modules take. Beside it, the stamp of each package it holds as
 * it was when bundled.
 */
export const BUNDLE = join('dist', 'sluice.mjs')
export const BUNDLE_SOURCES = join('dist', 'sluice.sources.json')

/** Records which package builds the bundle holds: `packages` maps each bundled package's name to its directory. */
export function writeBundleSources(packageDir, packages) {
  const stamps = {}
  for (const [name, dir] of [...packages].sort((a, b) => a[0].localeCompare(b[0]))) {
    const stamp = readStamp(dir)
    if (stamp === undefined) throw new Error(`${name} (${dir}) has no build stamp: build it before bundling`)
    stamps[name] = stamp
  }
  writeFileSync(join(packageDir, BUNDLE_SOURCES), `${JSON.stringify(stamps, null, 2)}\n`)
}

/**
 * Undefined when the bundle holds the builds that each package's stamp
 * describes now, else why not (a package built again since, by its own
 * build, say). `packages` maps names to the directories installed now; the
 * stamps themselves are checked against the sources by `staleReason`.
 */
export function staleBundle(packageDir, packages) {
  if (!existsSync(join(packageDir, BUNDLE))) return `${join(packageDir, BUNDLE)} is missing`
  let recorded
  try {
    recorded = JSON.parse(readFileSync(join(packageDir, BUNDLE_SOURCES), 'utf8'))
  } catch {
    return `${join(packageDir, BUNDLE_SOURCES)} is missing or unreadable`
  }
  if (typeof recorded !== 'object' || recorded === null || Object.keys(recorded).length === 0) return `${join(packageDir, BUNDLE_SOURCES)} lists no package`
  for (const [name, stamp] of Object.entries(recorded)) {
    const dir = packages.get(name)
    if (dir === undefined) return `${name} is in the bundle but not installed`
    if (readStamp(dir) !== stamp) return `${name} was built again after the bundle`
  }
  return undefined
}

if (process.argv[1] !== undefined && fileURLToPath(import.meta.url) === process.argv[1]) writeStamp(process.argv[2] ?? process.cwd())
