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

/** Undefined when dist/ is the build of the sources there now, else why not. */
export function staleReason(packageDir) {
  const stamp = join(packageDir, STAMP)
  if (!existsSync(stamp)) return `${join(packageDir, 'dist')} is missing or was not built by its build script`
  const builtAt = statSync(stamp).mtimeMs
  if (sourceFiles(join(packageDir, 'src')).every((file) => statSync(file).mtimeMs <= builtAt)) return undefined
  return readFileSync(stamp, 'utf8').trim() === sourceDigest(packageDir) ? undefined : `${join(packageDir, 'src')} changed after the last build`
}

if (process.argv[1] !== undefined && fileURLToPath(import.meta.url) === process.argv[1]) writeStamp(process.argv[2] ?? process.cwd())
