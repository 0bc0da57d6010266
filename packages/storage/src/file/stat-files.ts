/**
 * The sizes and inodes of many files in one call: an open after a clean stop
 * checks each log's files against the heads file, and with many logs
 * the checks are a good part of the open. A native batch (the server passes
 * one from its addon: no JS object per file, each lookup relative to one open
 * directory) does it for the real file system; otherwise `statSync` per file
 * through the port.
 */
import type { FsPort } from '../fs-port.js'
import type { ListedLog } from './shape-dirs.js'

/**
 * For each directory of `dirs` (relative to `base`) and each file name of
 * `names`, writes the file's size at `out[2 * (d * names.length + n)]` and its
 * inode just after; a file that cannot be stat'ed gets size -1. Resolves once
 * `out` is filled (off the event loop: the opening thread decodes the heads
 * file meanwhile); rejects only when it cannot run at all (the caller then
 * stats file by file).
 */
export type StatFiles = (base: string, dirs: readonly string[], names: readonly string[], out: Float64Array) => Promise<void>

/** `StatFiles` through a port's `statSync`. */
export function statFilesSync(fs: FsPort, base: string, dirs: readonly string[], names: readonly string[], out: Float64Array): void {
  let at = 0
  for (const dir of dirs) {
    for (const name of names) {
      try {
        const s = fs.statSync(`${base}/${dir}/${name}`)
        out[at] = s.size
        out[at + 1] = s.ino
      } catch {
        out[at] = -1
        out[at + 1] = 0
      }
      at += 2
    }
  }
}

/**
 * A batch of many directories is cut into this many calls, which the thread
 * pool (four threads unless UV_THREADPOOL_SIZE says otherwise) runs side by
 * side: with 100k logs one call took about as long as the rest of an open.
 */
const BATCH_PARTS = 4
/** Below this many directories one call does it. */
const PART_MIN_DIRS = 2048

/** Stats every file, natively when `batch` is given (and runs), else through the port. Never rejects. */
export async function statAll(fs: FsPort, batch: StatFiles | undefined, base: string, dirs: readonly string[], names: readonly string[]): Promise<Float64Array> {
  const out = new Float64Array(dirs.length * names.length * 2)
  if (batch !== undefined) {
    try {
      const parts = dirs.length < PART_MIN_DIRS ? 1 : BATCH_PARTS
      const per = Math.ceil(dirs.length / parts)
      const calls: Promise<void>[] = []
      for (let from = 0; from < dirs.length; from += per) {
        const to = Math.min(from + per, dirs.length)
        // Each call fills its own stretch of `out` (a view: no copy back).
        calls.push(batch(base, dirs.slice(from, to), names, out.subarray(from * names.length * 2, to * names.length * 2)))
      }
      await Promise.all(calls)
      return out
    } catch {
      // Fall through: the port's statSync reports what went wrong file by file.
    }
  }
  statFilesSync(fs, base, dirs, names, out)
  return out
}

/** A listing of the store's logs and the stats of their files, under way. */
export interface ListedLogs {
  readonly logs: readonly ListedLog[]
  readonly stats: Promise<Float64Array>
}
