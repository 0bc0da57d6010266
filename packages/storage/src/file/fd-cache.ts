/**
 * The one owner of file descriptors in the engine.
 *
 * A store may hold 100k shape logs of three files each, far more than a process
 * may keep open, so descriptors live in an LRU bounded by `maxOpen`. A file in
 * use (a read whose spans a caller still holds, or a sync in flight) is pinned
 * and never closed under its user; pinned files may push the count above the
 * bound for as long as they stay pinned.
 *
 * Files are named by `FileRef`, not by path, because a finished snapshot's
 * directory is renamed into place while its descriptors stay valid.
 */
import type { FsPort } from '../fs-port.js'
import { TAGGED_FIELD } from './number-fields.js'
import { StorageError, fromSystemError } from '../errors.js'

export class FileRef {
  fd = -1
  pins = 0
  /** Close as soon as unpinned, and never reopen (the log was deleted or closed). */
  retired = false
  /**
   * Inode of the file first opened under this ref. A reopen that finds another
   * file at the path (the log was deleted and a new one created under the same
   * id) must fail rather than mix the old index with the new bytes. A tagged
   * field from the start (number-fields.ts; set to -1 in the constructor): an
   * open sets it from a batched stat's Float64Array, a small integer on the
   * file systems we know, and a small-integer field taking a larger inode
   * would migrate every ref made before (300k with 100k logs).
   */
  ino: number = TAGGED_FIELD
  /** Neighbours in the cache's LRU list while open (older, newer). */
  older: FileRef | undefined = undefined
  newer: FileRef | undefined = undefined
  /** The path, or with `name` the directory the file is in. */
  private at: string
  private readonly name: string | undefined

  /**
   * `name`: the ref is `path/name`, its path built when used. A store keeps
   * three refs for each of its 100k logs and opens few of them: one string
   * per log (its directory) instead of four.
   */
  constructor(
    path: string,
    readonly flags: 'r' | 'r+',
    name?: string,
  ) {
    this.at = path
    this.name = name
    this.ino = -1
  }

  get path(): string {
    return this.name === undefined ? this.at : `${this.at}/${this.name}`
  }

  /** The ref's file now lives in `dir` (its directory was renamed); only for refs made with a name. */
  moveTo(dir: string): void {
    if (this.name === undefined) throw new Error('moveTo: a ref made with a whole path')
    this.at = dir
  }
}

export class FdCache {
  /*
   * Open refs in an intrusive doubly-linked list, least recently used first.
   * (A Map in insertion order was used before; evicting from its front left
   * deleted slots that every later eviction walked over again until the next
   * rehash, which made each open cost O(open files) under thrashing.)
   */
  private lru: FileRef | undefined
  private mruEnd: FileRef | undefined
  private count = 0
  // Appends hit the same file over and over; skip the LRU reshuffle then.
  private mru: FileRef | undefined

  constructor(
    private readonly fs: FsPort,
    readonly maxOpen: number,
  ) {}

  get size(): number {
    return this.count
  }

  private link(ref: FileRef): void {
    ref.older = this.mruEnd
    ref.newer = undefined
    if (this.mruEnd !== undefined) this.mruEnd.newer = ref
    else this.lru = ref
    this.mruEnd = ref
    this.count++
  }

  private unlink(ref: FileRef): void {
    if (ref.older !== undefined) ref.older.newer = ref.newer
    else this.lru = ref.newer
    if (ref.newer !== undefined) ref.newer.older = ref.older
    else this.mruEnd = ref.older
    ref.older = undefined
    ref.newer = undefined
    this.count--
  }

  /** The descriptor of `ref`, opened if needed, pinned until `release(ref)`. */
  acquire(ref: FileRef): number {
    if (ref === this.mru && ref.fd >= 0) {
      ref.pins++
      return ref.fd
    }
    if (ref.retired) throw new Error(`file retired: ${ref.path}`)
    if (ref.fd >= 0) {
      if (ref !== this.mruEnd) {
        this.unlink(ref)
        this.link(ref)
      }
    } else {
      this.evict(1)
      let fd: number
      let ino: number
      try {
        fd = this.fs.openSync(ref.path, ref.flags)
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code === 'ENOENT' && ref.ino >= 0) {
          throw new StorageError('shape_deleted', `${ref.path} is gone`)
        }
        throw fromSystemError(err, `open ${ref.path}`)
      }
      try {
        ino = this.fs.fstatSync(fd).ino
      } catch (err) {
        this.fs.closeSync(fd)
        throw fromSystemError(err, `stat ${ref.path}`)
      }
      if (ref.ino >= 0 && ino !== ref.ino) {
        this.fs.closeSync(fd)
        throw new StorageError('shape_deleted', `${ref.path} was replaced by another file`)
      }
      ref.ino = ino
      ref.fd = fd
      this.link(ref)
    }
    this.mru = ref
    ref.pins++
    return ref.fd
  }

  release(ref: FileRef): void {
    ref.pins--
    if (ref.pins > 0) return
    if (ref.retired) this.closeNow(ref)
    else if (this.count > this.maxOpen) this.evict(0)
  }

  /** Runs `fn` with the descriptor pinned for its duration. */
  use<T>(ref: FileRef, fn: (fd: number) => T): T {
    const fd = this.acquire(ref)
    try {
      return fn(fd)
    } finally {
      this.release(ref)
    }
  }

  async useAsync<T>(ref: FileRef, fn: (fd: number) => Promise<T>): Promise<T> {
    const fd = this.acquire(ref)
    try {
      return await fn(fd)
    } finally {
      this.release(ref)
    }
  }

  /** Closes `ref` now, or when its last pin is released. */
  retire(ref: FileRef): void {
    ref.retired = true
    if (ref.pins === 0) this.closeNow(ref)
  }

  /** Closes the descriptor without retiring the ref (it reopens on next use). */
  forget(ref: FileRef): void {
    if (ref.pins === 0) this.closeNow(ref)
  }

  private closeNow(ref: FileRef): void {
    if (ref === this.mru) this.mru = undefined
    if (ref.fd < 0) return
    this.unlink(ref)
    const fd = ref.fd
    ref.fd = -1
    try {
      this.fs.closeSync(fd)
    } catch {
      // A close error has no one to report to: data safety rests on the syncs, not on close.
    }
  }

  private evict(room: number): void {
    let ref = this.lru
    while (ref !== undefined && this.count + room > this.maxOpen) {
      const next = ref.newer
      if (ref.pins === 0) this.closeNow(ref)
      ref = next
    }
  }
}
