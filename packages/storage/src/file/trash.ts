import { randomBytes } from 'node:crypto'
import { type StorageError, fromSystemError } from '../errors.js'
import type { FsPort } from '../fs-port.js'

/**
 * A trash/ directory at most this large is left as it is; past it, a drained
 * trash is made afresh. A few blocks: what a handful of entries needs.
 */
const SHRINK_PAST_BYTES = 16 * 4096

/**
 * The store's trash/: a deleted log's directory is renamed into it (one
 * atomic step, so a crash never leaves half a log in shapes/) and removed in
 * the background. ext4, like most file systems, never shrinks a directory, so
 * a burst of deletions (thousands of shapes expiring in one sweep) would leave
 * trash/ holding that many entries' worth of blocks for good. Once the
 * background removals have drained, an oversized trash/ is removed and made
 * again: both steps are synchronous, so no rename into it can fall between
 * them, and a crash between them is mended by the next open, which makes
 * every directory of the store.
 */
export class Trash {
  private pending = 0

  constructor(
    private readonly fs: FsPort,
    private readonly dir: string,
    private readonly emitError: (err: StorageError) => void,
  ) {}

  /** Moves `path` into the trash now and removes it in the background; throws what the rename threw. */
  discard(path: string, id: string): void {
    const target = this.pathFor(id)
    try {
      this.fs.renameSync(path, target)
    } catch (err) {
      // Made afresh while empty and its mkdir failed (a full disk, say): make it again, once.
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT' || this.fs.existsSync(this.dir)) throw err
      this.fs.mkdirSync(this.dir, { recursive: true })
      this.fs.renameSync(path, target)
    }
    this.remove(target, `remove deleted shape ${id}`)
  }

  /** A free name in the trash for `id`'s directory, for a caller that renames it there itself and keeps it. */
  pathFor(id: string): string {
    return `${this.dir}/${id}.${Date.now()}.${randomBytes(3).toString('hex')}`
  }

  /** Removes whatever an earlier run left in the trash (at open). */
  empty(): void {
    for (const name of this.fs.readdirSync(this.dir)) this.remove(`${this.dir}/${name}`, `remove ${name} from trash`)
  }

  private remove(path: string, what: string): void {
    this.pending++
    this.fs
      .rm(path, { recursive: true, force: true })
      .catch((err: unknown) => this.emitError(fromSystemError(err, what)))
      .finally(() => {
        if (--this.pending === 0) this.shrink()
      })
  }

  private shrink(): void {
    try {
      if (this.fs.statSync(this.dir).size <= SHRINK_PAST_BYTES) return
      this.fs.rmdirSync(this.dir)
    } catch {
      // Not empty (an entry the store keeps there, see `pathFor`) or already gone: left as it is.
      return
    }
    try {
      this.fs.mkdirSync(this.dir, { recursive: true })
    } catch (err) {
      this.emitError(fromSystemError(err, 'make trash/ again'))
    }
  }
}
