/**
 * A store opened read-only, typically by another process serving the same
 * directory (a read replica behind the same load balancer). It never writes.
 *
 * What the writer has published is exactly what its watermark covers: a log's
 * durable prefix for that watermark (see `recovery.ts`). The writer announces
 * each watermark after making it durable (in `watermark.live`, or by replacing
 * the watermark file when it keeps no journal), so re-reading those and
 * extending each log's known prefix from where it stood is enough to follow the
 * writer, without locks and without ever seeing a partial transaction.
 *
 * This rests on the writer never leaving a record at or below a published
 * watermark unsynced in shapes/, which holds for new logs too, whose
 * transactions can lie below the watermark: the writer renames one into
 * shapes/ only with all of those synced, and refuses more afterwards. So a
 * follower never sees a finishing log's unsynced tail, even in the page cache.
 *
 * It does not hold for a log the writer deleted: its tail was never written
 * back, and its records in the journal leave the follower's view at its
 * tombstone (or with a segment checkpointed away). A log held open here (its
 * descriptors still read the files, wherever they went) would then serve a
 * head the watermark has passed, or bytes its files never got. So whenever the
 * view may have lost a deleted log's records (journal-overlay.ts: `epoch`,
 * `onTombstone`), a log checks, before its next catch-up, that its directory
 * is still the one it opened, and otherwise throws `shape_deleted`, as the
 * writer's own handle of a deleted log does. A directory still there after
 * the journal was read means the log was not deleted before it, so what the
 * new watermark covers is in its files or in the view. That check is one
 * `stat`, only on those rare events, never per read.
 */
import type { LogOffset } from '@sluice/protocol'
import type { FlushResult, LogHead, LogRead, ShapeLog, ShapeLogStore, SnapshotWriter } from '../contract.js'
import { StorageError, fromSystemError } from '../errors.js'
import { FdCache, FileRef } from './fd-cache.js'
import { checkShapeId } from '../defaults.js'
import { DEFAULT_MAX_OPEN_FILES, LOG_FILES } from '../defaults.js'
import { WATERMARK_BYTES, decodeMeta, decodeWatermark } from '../format.js'
import type { FsPort } from '../fs-port.js'
import { nodeFs, readFully } from '../fs-port.js'
import { FILE_DATA } from './journal-format.js'
import { JournalOverlay, overlayFs } from './journal-overlay.js'
import type { ChunkInfo, HeadState } from './log-state.js'
import { readRange } from './log-reader.js'
import { scanLog } from './recovery.js'
import { flatShapeDir, listLogs, shapeDir } from './shape-dirs.js'
import { LIVE_WATERMARK_FILE, WATERMARK_FILE, readWatermark } from './watermark.js'

export interface ReadOnlyStoreOptions {
  readonly dir: string
  readonly maxOpenFiles?: number
  /**
   * How often `onFlush` listeners are polled for a new watermark; 0: never by
   * a timer of the store's own, the caller calls `poll()` when it learns the
   * writer published (a filesystem watch, say).
   */
  readonly pollIntervalMs?: number
  readonly fs?: FsPort
}

class ReadOnlyShapeLog implements ShapeLog {
  readonly data: FileRef
  readonly entries: FileRef
  readonly chunkFile: FileRef
  private chunks: ChunkInfo[] = []
  private state: HeadState | undefined
  private seenLsn = -1n
  /**
   * The journal view's epoch when the directory was last found in place; -1
   * after a tombstone of this id (see the top of this file).
   */
  checkedEpoch: number
  /** Found deleted: every read throws, as the writer's handle does. */
  deleted = false
  /** Entries as last reported to `onFlush` listeners. */
  reportedEntries = -1
  /** Its files held records past the durable head at its last scan: a later watermark may cover them with no new record. */
  behind = false

  constructor(
    readonly id: string,
    readonly dir: string,
    /** Inode of the shape directory: a re-created shape under the same id has another. */
    readonly dirIno: number,
    readonly meta: Uint8Array,
    private readonly store: ReadOnlyFileLogStore,
  ) {
    this.data = new FileRef(dir, 'r', LOG_FILES.data)
    this.entries = new FileRef(dir, 'r', LOG_FILES.entries)
    this.chunkFile = new FileRef(dir, 'r', LOG_FILES.chunks)
    // The caller found the directory after the journal's last reading.
    this.checkedEpoch = store.journal.epoch
  }

  /** Extends the known prefix to the current watermark (`lsn`: one the caller has just read). */
  catchUp(lsn: bigint = this.store.durableLsn): HeadState {
    if (this.deleted) throw this.deletedError()
    const epoch = this.store.journal.epoch
    if (this.state && lsn === this.seenLsn && this.checkedEpoch === epoch) return this.state
    // After the journal was read (durableLsn above), so a directory still in place covers all it said.
    if (this.checkedEpoch !== epoch) this.checkInPlace(epoch)
    const known = this.state ? { head: this.state, chunks: this.chunks } : undefined
    const found = scanLog(this.store.fs, this.store.fds, this.id, { data: this.data, entries: this.entries, chunks: this.chunkFile }, lsn, known)
    if (!this.state) this.reportedEntries = found.head.entries
    // Records past the durable head: a later watermark may cover them with no new record of this log. Only a
    // poll takes a log off that list (a read's catch-up must not: the poll would then not report its advance).
    this.behind = found.cut
    if (found.cut) this.store.noteBehind(this.id)
    this.state = found.head
    this.chunks = found.chunks
    this.seenLsn = lsn
    return found.head
  }

  /** Throws `shape_deleted` unless the log's directory is still the one it opened. */
  private checkInPlace(epoch: number): void {
    let ino: number | undefined
    try {
      ino = this.store.baseFs.statSync(this.dir).ino
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code
      if (code !== 'ENOENT' && code !== 'ENOTDIR') throw fromSystemError(err, `stat ${this.dir}`)
    }
    if (ino !== this.dirIno) {
      this.deleted = true
      // Its descriptors hold the deleted files' space: closed once no read pins them.
      this.store.drop(this)
      throw this.deletedError()
    }
    this.checkedEpoch = epoch
  }

  private deletedError(): StorageError {
    return new StorageError('shape_deleted', `shape ${this.id} was deleted`)
  }

  head(): LogHead {
    const h = this.catchUp()
    return { lastOffset: h.last, entryCount: h.entries, closedChunks: h.closedChunks, snapshotChunks: h.snapshotChunks }
  }

  appendTransaction(): number {
    throw new StorageError('read_only')
  }

  appendLines(): number {
    throw new StorageError('read_only')
  }

  read(after: LogOffset): LogRead {
    const head = this.catchUp()
    const { fs, fds } = this.store
    const read = readRange({ id: this.id, fs, fds, data: this.data, entries: this.entries, chunks: this.chunks, head }, after)
    const view = this.store.journal.view(this.id, FILE_DATA)
    const span = read.spans[0]
    if (!view || span?.kind !== 'file') return read
    // Bytes the journal holds and the file may not: served from memory.
    const end = span.position + span.length
    let touched: boolean
    try {
      touched = view.touches(span.position, end, this.store.baseFs.fstatSync(span.fd).size)
    } catch (err) {
      read.release()
      throw fromSystemError(err, `read shape ${this.id}`)
    }
    if (!touched) return read
    try {
      const bytes = Buffer.allocUnsafe(span.length)
      const n = readFully(fs, span.fd, bytes, 0, span.length, span.position)
      if (n !== span.length) throw new StorageError('corrupt_log', `shape ${this.id}: ${n} of ${span.length} bytes at ${span.position}`)
      return { ...read, spans: [{ kind: 'bytes', bytes }], release() {} }
    } catch (err) {
      throw fromSystemError(err, `read shape ${this.id}`)
    } finally {
      read.release()
    }
  }

  retire(): void {
    this.store.fds.retire(this.data)
    this.store.fds.retire(this.entries)
    this.store.fds.retire(this.chunkFile)
  }
}

export class ReadOnlyFileLogStore implements ShapeLogStore {
  readonly readOnly = true
  readonly fds: FdCache
  private readonly logs = new Map<string, ReadOnlyShapeLog>()
  private lsn = 0n
  /** The watermark last reported to `onFlush` listeners (reads refresh `lsn` too, so it cannot serve). */
  private reportedLsn = -1n
  private stamp = ''
  private liveFd: number | undefined
  private readonly liveBuf = Buffer.alloc(WATERMARK_BYTES)
  private poller: NodeJS.Timeout | undefined
  private readonly listeners = new Set<(r: FlushResult) => void>()
  private closed = false
  /** The journal's epoch at the last poll: a poll after it moved looks at every log. */
  private pollEpoch = -1
  /** Ids of logs a later watermark may still move (touched by the journal, or behind at their last catch-up). */
  private readonly pending = new Set<string>()

  /** The writer's journal, laid over the log files (see journal-overlay.ts). */
  readonly journal: JournalOverlay
  /** Reads through the journal. */
  readonly fs: FsPort

  private constructor(
    readonly baseFs: FsPort,
    readonly root: string,
    maxOpenFiles: number,
    private readonly pollIntervalMs: number,
  ) {
    // The view lost the records of a deleted log: a log held here under that id checks it is still there.
    this.journal = new JournalOverlay(baseFs, root, (id) => {
      const log = this.logs.get(id)
      if (log) log.checkedEpoch = -1
    })
    this.fs = overlayFs(baseFs, root, this.journal)
    this.fds = new FdCache(this.fs, maxOpenFiles)
  }

  static open(options: ReadOnlyStoreOptions): ReadOnlyFileLogStore {
    const fs = options.fs ?? nodeFs
    const store = new ReadOnlyFileLogStore(fs, options.dir, options.maxOpenFiles ?? DEFAULT_MAX_OPEN_FILES, options.pollIntervalMs ?? 20)
    if (!fs.existsSync(`${options.dir}/${WATERMARK_FILE}`)) {
      throw new StorageError('io_error', `${options.dir} is not a Sluice store (no watermark file)`)
    }
    store.refresh()
    return store
  }

  /**
   * Re-reads the watermark: the writer's live notice (`watermark.live`, one
   * pread of a descriptor kept open) and, when its stat changed, the watermark
   * file; a writer without a journal moves only the file. Then, if it moved,
   * the journal, which then holds at least what it covers.
   */
  refresh(): void {
    let stat: { mtimeMs: number; ino: number; size: number }
    try {
      stat = this.fs.statSync(`${this.root}/${WATERMARK_FILE}`)
    } catch (err) {
      throw fromSystemError(err, `stat ${this.root}/${WATERMARK_FILE}`)
    }
    let next = this.lsn
    const stamp = `${stat.ino}:${stat.mtimeMs}:${stat.size}`
    if (stamp !== this.stamp) {
      const w = readWatermark(this.fs, this.root)
      if (w && w.lsn > next) next = w.lsn
    }
    const live = this.readLive()
    if (live !== undefined && live > next) next = live
    if (next !== this.lsn || stamp !== this.stamp) this.journal.update()
    this.lsn = next
    this.stamp = stamp
  }

  private readLive(): bigint | undefined {
    try {
      this.liveFd ??= this.baseFs.openSync(`${this.root}/${LIVE_WATERMARK_FILE}`, 'r')
      const n = readFully(this.baseFs, this.liveFd, this.liveBuf, 0, WATERMARK_BYTES, 0)
      // Torn (the writer is overwriting it) or short: the next poll reads it again.
      const w = n === WATERMARK_BYTES ? decodeWatermark(this.liveBuf) : undefined
      return typeof w === 'object' ? w.lsn : undefined
    } catch {
      return undefined // not there (yet, or a writer without a journal)
    }
  }

  get durableLsn(): bigint {
    this.refresh()
    return this.lsn
  }

  get(id: string): ShapeLog | undefined {
    this.ensureOpen()
    try {
      checkShapeId(id)
    } catch {
      return undefined
    }
    // Its bucket, else the flat layout's place (a writer that has not moved it
    // yet), else its bucket again: moves go only that way, so a log moved
    // between the first two looks is found by the third.
    const bucketed = shapeDir(this.root, id)
    for (const dir of [bucketed, flatShapeDir(this.root, id), bucketed]) {
      const found = this.openAt(id, dir)
      if (found !== undefined) return found
    }
    // In neither place: deleted.
    const cached = this.logs.get(id)
    if (cached) cached.deleted = true
    this.forget(id)
    return undefined
  }

  /** The log at `dir` (cached while the directory is the same one), or undefined if none is there. */
  private openAt(id: string, dir: string): ReadOnlyShapeLog | undefined {
    let ino: number
    try {
      ino = this.fs.statSync(dir).ino
    } catch {
      return undefined
    }
    const cached = this.logs.get(id)
    if (cached && !cached.deleted && cached.dirIno === ino && cached.dir === dir) {
      // Found in place after the journal's last reading: as good as its own check.
      cached.checkedEpoch = this.journal.epoch
      return cached
    }
    let meta: Buffer | string
    try {
      meta = decodeMeta(this.fs.readFileSync(`${dir}/${LOG_FILES.meta}`))
    } catch {
      return undefined // deleted or moved between the stat and the read
    }
    // Another directory at the same place: the log held here was deleted (and the id created again). A handle
    // still held to it then throws `shape_deleted`, as the writer's does, not a closed descriptor's error.
    if (cached && cached.dir === dir && cached.dirIno !== ino) cached.deleted = true
    this.forget(id)
    if (typeof meta === 'string') throw new StorageError('corrupt_log', `shape ${id}: meta.bin is damaged (${meta})`)
    // A log opened anew under an id the view holds records of: they may be a deleted log's, whose tombstone
    // the view has not read (the group that carried it moved no watermark, so no poll looked). The writer
    // places a log created again only once that tombstone is durable, so one more reading of the journal
    // has it, and the new log is not read through the old one's writes.
    if (this.journal.holds(id)) this.journal.update()
    const log = new ReadOnlyShapeLog(id, dir, ino, meta, this)
    this.logs.set(id, log)
    return log
  }

  /** A log found deleted: no longer served, its descriptors closed (`retire` waits for pinned reads). */
  drop(log: ReadOnlyShapeLog): void {
    if (this.logs.get(log.id) === log) this.forget(log.id)
    else log.retire()
  }

  private forget(id: string): void {
    const cached = this.logs.get(id)
    if (!cached) return
    this.logs.delete(id)
    cached.retire()
  }

  /** Every log's id, in its bucket or (from a writer that has not moved it yet) at the flat layout's place. */
  ids(): string[] {
    const ids = new Set<string>()
    for (const id of listLogs(this.fs, this.root)) ids.add(id)
    return [...ids]
  }

  /** Each log of `ids()` as `get` finds it now (one gone since the listing left out; a damaged one throws as `get` does). */
  *finishedLogs(): Iterable<ShapeLog> {
    for (const id of this.ids()) {
      const log = this.get(id)
      if (log !== undefined) yield log
    }
  }

  createShape(): SnapshotWriter {
    throw new StorageError('read_only')
  }

  deleteShape(): Promise<boolean> {
    return Promise.reject(new StorageError('read_only'))
  }

  advance(): void {
    throw new StorageError('read_only')
  }

  flush(): Promise<FlushResult> {
    return Promise.reject(new StorageError('read_only'))
  }

  /** Polls the watermark while someone listens; reports logs opened here whose head moved. */
  onFlush(listener: (result: FlushResult) => void): () => void {
    this.listeners.add(listener)
    if (!this.poller && this.pollIntervalMs > 0) {
      this.poller = setInterval(() => this.poll(), this.pollIntervalMs)
      this.poller.unref()
    }
    return () => {
      this.listeners.delete(listener)
      if (this.listeners.size === 0 && this.poller) {
        clearInterval(this.poller)
        this.poller = undefined
      }
    }
  }

  /**
   * Re-reads the watermark and, if it moved, tells `onFlush` listeners which
   * logs opened here advanced. The timer calls it; so can a caller that
   * learns of the writer's flushes itself.
   */
  poll(): void {
    try {
      this.refresh()
    } catch {
      return
    }
    if (this.lsn === this.reportedLsn) return
    this.reportedLsn = this.lsn
    // A watermark moves only the logs the journal wrote since the last poll, and those whose files already held
    // records past their durable head. Every log is looked at only when that cannot be told: no journal being
    // read, or an epoch change (segments came and went unread, or another writer's replaced them: which logs
    // their records touched cannot be told). A checkpoint is not one: the view reads the rest of the segments it
    // deletes before letting them go (journal-overlay.ts).
    for (const id of this.journal.takeTouched()) this.pending.add(id)
    const epoch = this.journal.epoch
    const everyLog = !this.journal.journaled || epoch !== this.pollEpoch
    this.pollEpoch = epoch
    const advanced: string[] = []
    const look = (log: ReadOnlyShapeLog): void => {
      try {
        const { entries } = log.catchUp(this.lsn)
        if (log.behind) this.pending.add(log.id)
        else this.pending.delete(log.id)
        if (entries !== log.reportedEntries) {
          advanced.push(log.id)
          log.reportedEntries = entries
        }
      } catch {
        // A deleted log: `get` notices and drops it. Any other failure (no descriptor to spare, say): looked at again next poll.
        if (log.deleted) this.pending.delete(log.id)
      }
    }
    if (everyLog) {
      for (const log of this.logs.values()) look(log)
    } else {
      for (const id of [...this.pending]) {
        const log = this.logs.get(id)
        if (log === undefined) this.pending.delete(id)
        else look(log)
      }
    }
    // A follower's "flush" is noticing the writer's; it has no duration of its own.
    const result = { durableLsn: this.lsn, advanced, durationMs: 0 }
    for (const l of this.listeners) l(result)
  }

  /** From a log's catch-up: its files hold records its durable head does not cover yet (looked at by the next poll). */
  noteBehind(id: string): void {
    this.pending.add(id)
  }

  private ensureOpen(): void {
    if (this.closed) throw new StorageError('store_closed')
  }

  async close(): Promise<void> {
    this.closed = true
    if (this.poller) clearInterval(this.poller)
    for (const log of this.logs.values()) log.retire()
    this.logs.clear()
    this.journal.close()
    if (this.liveFd !== undefined) this.baseFs.closeSync(this.liveFd)
    this.liveFd = undefined
  }
}

export function openReadOnlyLogStore(options: ReadOnlyStoreOptions): ReadOnlyFileLogStore {
  return ReadOnlyFileLogStore.open(options)
}
