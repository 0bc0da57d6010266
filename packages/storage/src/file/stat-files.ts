/**
 * The sizes and inodes of many files in one call: an open after a clean stop
 * checks each log's files against the heads file, and with many logs
 * the checks are a good part of the open. A native batch (the server passes
 * one from its addon: no JS object per file, each lookup relative to one open
 * directory) does it for the real file system; otherwise `statSync` per file
 * through the port.
 */
import type { FsPort } from '../fs-port.js'

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
 * A batch of many directories is cut into calls of this many, which the
 * thread pool (four threads unless UV_THREADPOOL_SIZE says otherwise) runs
 * side by side, in order: with 100k logs one call took about as long as the
 * rest of an open, and an open checks the first parts' logs while the later
 * ones are still stat'ed (`StatParts`).
 */
const PART_DIRS = 2048

/** Stats under way, part by part in the order of the directories. */
export interface StatParts {
  /** Sizes and inodes, as `StatFiles` lays them out; a part's stretch is filled once its `done` resolves. */
  readonly out: Float64Array
  /** Parts in order: `to` is the index of the first directory after the part. `done` never rejects. */
  readonly parts: ReadonlyArray<{ readonly to: number; readonly done: Promise<void> }>
}

/**
 * Starts the stats of every file, natively when `batch` is given, in parts of
 * PART_DIRS directories; a part the batch cannot do is done through the
 * port's statSync, which reports what went wrong file by file. Without a
 * batch, through the port at once (one part).
 */
export function statInParts(fs: FsPort, batch: StatFiles | undefined, base: string, dirs: readonly string[], names: readonly string[]): StatParts {
  if (batch === undefined) {
    const out = new Float64Array(dirs.length * names.length * 2)
    statFilesSync(fs, base, dirs, names, out)
    return { out, parts: [{ to: dirs.length, done: Promise.resolve() }] }
  }
  const stats = new StatBatches(fs, batch, base, names, dirs.length)
  for (let from = 0; from < dirs.length; from += PART_DIRS) stats.add(dirs.slice(from, Math.min(from + PART_DIRS, dirs.length)))
  return stats.finish()
}

/**
 * Natively batched stats started part by part as the directories become
 * known (an open starts them while it is still decoding the heads file that
 * names them, so the thread pool stats while the opening thread decodes), at
 * most `capacity` directories in all.
 */
export class StatBatches {
  readonly out: Float64Array
  private readonly parts: Array<{ to: number; done: Promise<void> }> = []
  private count = 0
  private pending: string[] = []

  constructor(
    private readonly fs: FsPort,
    private readonly batch: StatFiles,
    private readonly base: string,
    private readonly names: readonly string[],
    capacity: number,
  ) {
    this.out = new Float64Array(capacity * names.length * 2)
  }

  /** Directories known so far, in order. */
  get size(): number {
    return this.count + this.pending.length
  }

  /** The next directory: its part starts once PART_DIRS are waiting. */
  push(dir: string): void {
    this.pending.push(dir)
    if (this.pending.length >= PART_DIRS) this.flush()
  }

  /** Starts a part of `dirs` at once. */
  add(dirs: readonly string[]): void {
    const { fs, batch, base, names } = this
    const from = this.count
    const to = from + dirs.length
    if (to * names.length * 2 > this.out.length) throw new RangeError('StatBatches: more directories than its capacity')
    // Each call fills its own stretch of `out` (a view: no copy back).
    const stretch = this.out.subarray(from * names.length * 2, to * names.length * 2)
    let done: Promise<void>
    try {
      done = batch(base, dirs, names, stretch).catch(() => statFilesSync(fs, base, dirs, names, stretch))
    } catch {
      done = Promise.resolve().then(() => statFilesSync(fs, base, dirs, names, stretch))
    }
    this.parts.push({ to, done })
    this.count = to
  }

  private flush(): void {
    if (this.pending.length === 0) return
    const dirs = this.pending
    this.pending = []
    this.add(dirs)
  }

  /** Starts what is left; the parts of every directory given. */
  finish(): StatParts {
    this.flush()
    if (this.parts.length === 0) this.parts.push({ to: 0, done: Promise.resolve() })
    return { out: this.out, parts: this.parts }
  }
}

/** Stats every file (`statInParts`) and resolves once all are done. Never rejects. */
export async function statAll(fs: FsPort, batch: StatFiles | undefined, base: string, dirs: readonly string[], names: readonly string[]): Promise<Float64Array> {
  const { out, parts } = statInParts(fs, batch, base, dirs, names)
  await Promise.all(parts.map((p) => p.done))
  return out
}
