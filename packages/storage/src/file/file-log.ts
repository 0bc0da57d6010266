/**
 * One shape log in the writing process: appends, chunk closing, publishing and
 * rollback. Offset resolution is `log-reader.ts`; opening and cutting back after
 * a crash is `recovery.ts`; syncing and the watermark belong to the store.
 *
 * Two heads are kept. `appended` is what the files hold; `published` is what
 * readers see: it moves only to a transaction boundary that a flush has made
 * durable and the watermark covers. Between them sits a queue of boundaries,
 * the transaction ends appended since the last publish.
 *
 * Every write is positional at the appended end, and the appended head moves
 * only after all writes of an append succeeded. A failed append therefore leaves
 * at most garbage past the end, which is truncated at once (or before the next
 * append, if truncating failed too) and which recovery would cut anyway.
 */
import type { LogOffset } from '@sluice/protocol'
import type { LogEntryInput, LogHead, LogRead, ShapeLog } from '../contract.js'
import { StorageError, fromSystemError } from '../errors.js'
import type { FdCache } from './fd-cache.js'
import { FileRef } from './fd-cache.js'
import {
  CHUNK_LIVE,
  CHUNK_RECORD_BYTES,
  CHUNK_SNAPSHOT,
  ENTRY_RECORD_BYTES,
  ENTRY_SNAPSHOT,
  ENTRY_TXN_END,
  HEADER_BYTES,
  SEPARATOR,
  writeChunkRecord,
  splitU64,
  joinU64,
  writeEntryRecordFast,
  readEntryRecord,
} from '../format.js'
import type { FsPort } from '../fs-port.js'
import { readFully, writeFully } from '../fs-port.js'
import type { ChunkInfo, HeadState } from './log-state.js'
import { readRange } from './log-reader.js'
import type { MemoryTail } from './log-reader.js'
import { RECORDS_PER_BLOCK, RecordStage } from './record-stage.js'
import { DOUBLE_FIELD } from './double-field.js'
import { NO_BLOCK } from './tail-arena.js'
import type { TailArena } from './tail-arena.js'
import type { Journal, JournalOwner } from './journal.js'
import { FILE_CHUNKS, FILE_DATA, FILE_ENTRIES } from './journal-format.js'
import type { FileWrite, FileWriter } from './write-back.js'

/** What a log needs from its store. */
export interface LogHost {
  readonly fs: FsPort
  readonly fds: FdCache
  readonly chunkBytes: number
  /** Memory for write-behind tails and staged records. */
  readonly arena: TailArena
  /** A number that increases with every append across the store. */
  nextSeq(): number
  /** The last successful flush's watermark and sequence number (see `FileShapeLog.catchUp`). */
  readonly publishedLsn: bigint
  readonly publishedSeq: number
  markDirty(log: FileShapeLog, bytes: number): void
  /** The log has a transaction boundary waiting to be published. */
  markUnpublished(log: FileShapeLog): void
  /** An append of transaction `tx` failed: the watermark must stay below it. */
  noteFault(log: FileShapeLog, tx: bigint): void
  /** An append at or above the faulted transaction succeeded. */
  clearFault(log: FileShapeLog, tx: bigint): void
  /** Records a write to a registered log's file in the journal; undefined when the store keeps none. */
  readonly journal: Journal<FileShapeLog> | undefined
  /** A background write-back failed; the bytes stay in memory and the journal, and are tried again. */
  writeBackFailed(log: FileShapeLog, err: StorageError): void
  /** Where write-backs go (write-back.ts). */
  readonly writer: FileWriter
}

/**
 * The appended head after an append, as an object: for readers and the heads
 * file, and for a transaction end queued (`next`) behind the log's oldest
 * unpublished one (see `endSeq`) until a publish moves past it. With 100k logs a log's head lives
 * for seconds, until that log's next append, so everything it holds outlives
 * the young generation and is left for a full collection of the whole heap:
 * the last offset is therefore kept as numbers and made a `LogOffset` only
 * when a reader asks, instead of holding the router's offset object and its
 * BigInt per append; the queue is a link per boundary, not an array per log
 * refilled after every publish.
 */
class Boundary implements HeadState {
  private lastOffset: LogOffset | undefined = undefined
  /** The next transaction end appended after this one, while this one is unpublished. */
  next: Boundary | undefined = undefined
  constructor(
    readonly entries: number,
    readonly dataEnd: number,
    /** Commit LSN of the append (0 for snapshot rows): the last offset's tx. */
    readonly tx: bigint,
    /** The last offset's op. */
    readonly lastOp: number,
    readonly closedChunks: number,
    readonly snapshotChunks: number,
    readonly seq: number,
  ) {}

  get last(): LogOffset {
    return (this.lastOffset ??= { tx: this.tx, op: BigInt(this.lastOp) })
  }
}

/*
 * A log keeps the LSNs of its heads as 32-bit halves in number fields, not as
 * BigInts. Every transaction's LSN is a new BigInt, and a log is an old
 * object: storing one in it on every append gave each young-generation
 * collection another old page to scan (with 100k logs, one per append), and
 * the BigInt itself was promoted, since a log's head lives until its next
 * append. The last LSN split is kept here: one transaction's parts for many
 * logs share it.
 */
let splitOf = -1n
let splitHi = 0
let splitLo = 0

/** Sets `splitHi`/`splitLo` to `tx`'s halves. */
function split(tx: bigint): void {
  if (tx === splitOf) return
  const { hi, lo } = splitU64(tx)
  splitOf = tx
  splitHi = hi
  splitLo = lo
}

/** Compares two u64s given as 32-bit halves: negative, zero or positive. */
function compareU64(aHi: number, aLo: number, bHi: number, bLo: number): number {
  return aHi !== bHi ? aHi - bHi : aLo - bLo
}

// Without the journal, appends are staged in shared buffers and written in
// pieces of at most this size, so a transaction of any size needs bounded
// memory (with it, lines go straight into the log's tail).
const STAGE_BYTES = 4 * 1024 * 1024
let dataStage: Buffer = Buffer.allocUnsafe(64 * 1024)
// A log holding this much not yet in its files starts writing it back. Small
// enough that a busy log's tail block stays small (at most twice this; the log
// keeps its block while appends go on, so fewer fresh arena pages are touched:
// about 4.5 ms per MiB on the benchmark VM); large enough that a write-back is
// one write of many entries.
export const WRITE_BACK_BYTES = 64 * 1024
const NO_BYTES = Buffer.alloc(0)
/** Ops are numbers on the append path (see appendLines). */
const MAX_OP = BigInt(Number.MAX_SAFE_INTEGER)
let chunkStage: Buffer = Buffer.allocUnsafe(16 * CHUNK_RECORD_BYTES)

/** A new sequential string with `id`'s characters (built from bytes, so never a view of another string). */
function flatCopy(id: string): string {
  return Buffer.from(id, 'latin1').toString('latin1')
}

function grow(buf: Buffer, need: number): Buffer {
  if (buf.length >= need) return buf
  return Buffer.allocUnsafe(Math.max(need, Math.min(buf.length * 2, STAGE_BYTES)))
}

export const LOG_FILES = { data: 'log.dat', entries: 'entries.idx', chunks: 'chunks.idx', meta: 'meta.bin' } as const

interface WriteBackPlan {
  /** The log's cut epoch when planned: a cut since makes the write void. */
  readonly epoch: number
  readonly dataFrom: number
  readonly data: Buffer
  readonly recordsFrom: number
  /** File position of the first record. */
  readonly recordsAt: number
  readonly recordCount: number
  readonly records: Buffer
}

export class FileShapeLog implements ShapeLog, JournalOwner {
  /** The journal's marks (see JournalOwner). */
  journalGroup = 0
  journalSegment = 0
  readonly data: FileRef
  readonly entries: FileRef
  readonly chunkFile: FileRef
  // The appended and published heads, field by field. At 100k logs a log's
  // head lives for seconds, until that log's next append or publish: a head
  // object per append would outlive the young generation, be copied by
  // scavenges and promoted, and set off full collections of the whole heap.
  // Objects are made only for readers and the rare paths (`appended`,
  // `published`); an append allocates only its queued boundary, which a
  // flush publishes (and drops) within milliseconds.
  private appendedEntries = 0
  private appendedDataEnd = DOUBLE_FIELD
  private appendedTxHi = 0
  private appendedTxLo = DOUBLE_FIELD
  private appendedOp = -1
  private appendedClosed = 0
  private appendedSnapshotChunks = 0
  /** Where the open chunk starts in log.dat (the last closed chunk's end): read by every append, kept to spare it a cold chunk record. */
  private openChunkPos = DOUBLE_FIELD
  /** The store's append sequence number of the appended head (0 after an open or a cut to an earlier head). */
  private appendedSeq = DOUBLE_FIELD
  private publishedEntries = 0
  private publishedDataEnd = DOUBLE_FIELD
  private publishedTxHi = 0
  private publishedTxLo = DOUBLE_FIELD
  private publishedOp = -1
  private publishedClosed = 0
  private publishedSnapshotChunks = 0
  /**
   * Transaction ends appended since the last publish, oldest first. The
   * oldest is these number fields (`endSeq` 0: none); later ones are
   * Boundary objects linked by `next`. With many logs nearly every log holds
   * one end between two flushes, and an object for it lived through a
   * scavenge or two and was then promoted: the largest share of what the
   * append path promoted at 100k shapes.
   */
  private endEntries = 0
  private endDataEnd = DOUBLE_FIELD
  private endTxHi = 0
  private endTxLo = DOUBLE_FIELD
  private endOp = -1
  private endClosed = 0
  private endSnapshotChunks = 0
  private endSeq = DOUBLE_FIELD
  private firstLater: Boundary | undefined = undefined
  private lastLater: Boundary | undefined = undefined
  /** Sizes to cut the files back to before the next append, after a failed truncate. */
  private pendingCut: HeadState | undefined
  /**
   * Entry records are staged here. With the journal, they also go into the
   * journal (`journalRecords`: at a log's first append in a group, else at the
   * flush's `writeIndex`), and a write-back takes them to entries.idx. Writing
   * through, `writeIndex()` writes them to the file when a flush syncs this
   * log, just before the sync. Readers only ever see published entries, and
   * publishing follows the flush, so every record a reader can ask for is
   * durable by then.
   */
  private readonly staged: RecordStage
  /** Entry records and chunk records already in their files. */
  private recordsOnDisk: number
  private chunksOnDisk: number
  /**
   * Write-behind. A registered log of a store with a journal does not write
   * its appends into its own files: the journal makes them durable (one sync
   * for every log), and until a checkpoint needs the files synced, the bytes
   * wait here and readers are served from memory. At 100k logs each append
   * would otherwise cost a descriptor open and close (the LRU cannot hold
   * them all) and a write; a write-back writes everything a log gathered
   * with one write per file (through the store's writer, write-back.ts: when
   * the log's tail reaches WRITE_BACK_BYTES, and at a checkpoint). Other logs write through,
   * and `pendLen` stays 0.
   *
   * `pendBuf[pendBase, pendBase + pendLen)` (the tail's arena block, `pend`) is log.dat from `dataOnDisk` to the appended end; the
   * staged records from `recordsOnDisk` on are the entry records not yet in
   * entries.idx, of which those below `recordsJournaled` are in the journal.
   */
  private dataOnDisk = DOUBLE_FIELD
  /** The tail's arena block (a handle; NO_BLOCK for none), the Buffer it lies in, where it starts there and its size. */
  private pend = DOUBLE_FIELD
  private pendBuf: Buffer = NO_BYTES
  private pendBase = DOUBLE_FIELD
  private pendCap = DOUBLE_FIELD
  private pendLen = DOUBLE_FIELD
  private recordsJournaled: number
  /** Bumped by every cut: a write-back that raced one must not count as done. */
  private epoch = 0
  private flight: Promise<void> | undefined
  /** Tail blocks given up while a write-back read them: back to the arena when it ends. */
  private retired: number[] | undefined
  /** Chunk records were written since the last successful sync. */
  chunksDirty = false
  /** Set by the store while this log is in its dirty list (membership, so the list holds each log once). */
  dirtyMark = false
  /** The store's index of this log in its list of logs waiting to publish; -1 when not in it. */
  unpublishedSlot = -1
  /**
   * The store serves this log (it is in `shapes/`, opened or finished). A log
   * still being built is synced and published by the flush that finishes it,
   * not by the store's dirty and unpublished sets.
   */
  registered = false
  /**
   * New transactions at or below this are refused: set to the watermark the
   * finishing flush publishes when it renames a new log into place, since a
   * transaction appended after that could not be synced before the watermark
   * covering it was published (recovery's premise).
   */
  floor = 0n
  /** The last append said `more`: its transaction is open. */
  private open = false
  /** The appended head right after the snapshot-end line. */
  private snapshotHead: HeadState | undefined
  deleted = false
  /**
   * The id as journal records carry it: a flat copy of `id` (which may be a
   * concatenation or a slice of a longer string, one more object to reach its
   * characters through).
   */
  readonly journalId: string

  constructor(
    readonly id: string,
    public dir: string,
    readonly meta: Uint8Array,
    private readonly host: LogHost,
    private readonly chunks: ChunkInfo[],
    head: HeadState,
  ) {
    this.data = new FileRef(`${dir}/${LOG_FILES.data}`, 'r+')
    this.entries = new FileRef(`${dir}/${LOG_FILES.entries}`, 'r+')
    this.chunkFile = new FileRef(`${dir}/${LOG_FILES.chunks}`, 'r+')
    // The start values of the fields laid out as doubles (see DOUBLE_FIELD) that the heads below leave alone.
    this.setEnd(0, 0, 0, 0, -1, 0, 0, 0)
    this.pend = NO_BLOCK
    this.pendBase = 0
    this.pendCap = 0
    this.pendLen = 0
    this.setAppended(head)
    this.setPublished(head)
    this.recordsOnDisk = head.entries
    this.recordsJournaled = head.entries
    this.dataOnDisk = head.dataEnd
    this.chunksOnDisk = head.closedChunks
    this.staged = new RecordStage(host.arena)
    this.journalId = flatCopy(id)
  }

  /** The journal, while this log's writes must be recorded in it (registered logs only). */
  private get journal(): Journal<FileShapeLog> | undefined {
    return this.registered ? this.host.journal : undefined
  }

  /** Sizes of the three files as this process wrote them (only called on a log writing through). */
  fileEnds(): { data: number; entries: number; chunks: number } {
    return {
      data: this.dataOnDisk,
      entries: HEADER_BYTES + this.recordsOnDisk * ENTRY_RECORD_BYTES,
      chunks: HEADER_BYTES + this.chunksOnDisk * CHUNK_RECORD_BYTES,
    }
  }

  /**
   * Records in the journal what this process wrote to the files past `from`
   * (read back from the page cache). A new log registers after the sync that
   * finished it; what it took after that sync was written unjournaled.
   */
  journalSince(from: { data: number; entries: number; chunks: number }): void {
    const journal = this.journal
    if (!journal) return
    const now = this.fileEnds()
    const fs = this.host.fs
    const parts: Array<[FileRef, 0 | 1 | 2, number, number]> = [
      [this.data, FILE_DATA, from.data, now.data],
      [this.entries, FILE_ENTRIES, from.entries, now.entries],
      [this.chunkFile, FILE_CHUNKS, from.chunks, now.chunks],
    ]
    for (const [ref, file, start, end] of parts) {
      if (end <= start) continue
      const buf = Buffer.allocUnsafe(end - start)
      this.host.fds.use(ref, (fd) => {
        const n = readFully(fs, fd, buf, 0, buf.length, start)
        if (n !== buf.length) throw new StorageError('io_error', `shape ${this.id}: read back ${n} of ${buf.length} bytes`)
      })
      journal.write(this, this.journalId, file, start, buf, 0, buf.length)
    }
  }

  /** Sets the state found by recovery. */
  restore(head: HeadState, chunks: readonly ChunkInfo[]): void {
    this.chunks.length = 0
    this.chunks.push(...chunks)
    this.setAppended(head)
    this.setPublished(head)
    this.dropUnpublished()
    this.recordsOnDisk = head.entries
    this.recordsJournaled = head.entries
    this.dataOnDisk = head.dataEnd
    this.dropPend()
    this.pendLen = 0
    this.chunksOnDisk = head.closedChunks
    this.staged.truncate(0)
    this.open = false
  }

  /**
   * Writes staged entry records and the records of newly closed chunks, each
   * with one positional write. Called by the store before it syncs this log.
   */
  writeIndex(): void {
    const journal = this.journal
    if (journal) this.journalRecords(journal)
    else if (this.staged.count > 0) this.writeRecordsThrough()
    if (this.chunksOnDisk < this.appendedClosed) this.writeChunkRecords()
  }

  /** With the journal: records wait for the flush's `writeIndex` (entry records of later appends in a group, chunk records). */
  get indexDue(): boolean {
    return this.chunksOnDisk < this.appendedClosed || this.recordsJournaled < this.recordsOnDisk + this.staged.count
  }

  /**
   * Write-behind: the staged entry records not yet in the journal go into it
   * (a write-back puts them in the file). A log's first append in a journal
   * group does this at once, while the log is in the CPU's caches: left to
   * the flush, it was a second visit to each log appended since the last
   * flush, which with 100k logs had left the caches by then (in a storage-only
   * loop of one-line appends to 100k logs, 9.5-9.9 µs per append before,
   * 6.8-7.7 after). Its later appends in the group leave theirs to the flush,
   * which writes them with one record head (a log taking many appends per
   * flush is in the caches anyway).
   */
  private journalRecords(journal: Journal<FileShapeLog>): void {
    const total = this.recordsOnDisk + this.staged.count
    if (this.recordsJournaled >= total) return
    // Straight from the stage's blocks (the journal copies them anyway), a run
    // per block. A loop, not a callback: a closure here cost each call a context.
    const stage = this.staged
    let at = HEADER_BYTES + this.recordsJournaled * ENTRY_RECORD_BYTES
    for (let i = this.recordsJournaled - this.recordsOnDisk; i < stage.count; ) {
      const end = stage.runEnd(i, stage.count)
      const bytes = (end - i) * ENTRY_RECORD_BYTES
      journal.write(this, this.journalId, FILE_ENTRIES, at, stage.bufferOf(i), stage.byteOf(i), bytes)
      at += bytes
      i = end
    }
    this.recordsJournaled = total
  }

  /** Write-through: the staged entry records go to log.entries at once. */
  private writeRecordsThrough(): void {
    const fs = this.host.fs
    const count = this.staged.count
    let at = HEADER_BYTES + this.recordsOnDisk * ENTRY_RECORD_BYTES
    this.host.fds.use(this.entries, (fd) =>
      this.staged.drain((buf, length) => {
        writeFully(fs, fd, buf, length, at)
        at += length
      }),
    )
    this.recordsOnDisk += count
    this.recordsJournaled = this.recordsOnDisk
  }

  /** The records of newly closed chunks: to log.chunks, and to the journal too when there is one. */
  private writeChunkRecords(): void {
    const fs = this.host.fs
    const closed = this.appendedClosed
    const count = closed - this.chunksOnDisk
    chunkStage = grow(chunkStage, count * CHUNK_RECORD_BYTES)
    for (let i = 0; i < count; i++) {
      const c = this.chunks[this.chunksOnDisk + i]!
      writeChunkRecord(chunkStage, i * CHUNK_RECORD_BYTES, {
        endTx: c.end.tx,
        endOp: c.end.op,
        endEntry: c.endEntry,
        endPos: c.endPos,
        segment: 0,
        kind: c.kind,
      })
    }
    const at = HEADER_BYTES + this.chunksOnDisk * CHUNK_RECORD_BYTES
    this.host.fds.use(this.chunkFile, (fd) => writeFully(fs, fd, chunkStage, count * CHUNK_RECORD_BYTES, at))
    this.journal?.write(this, this.journalId, FILE_CHUNKS, at, chunkStage, 0, count * CHUNK_RECORD_BYTES)
    this.chunksOnDisk = closed
    this.chunksDirty = true
  }

  /** Points the file refs at a new directory (the snapshot was renamed into place). */
  moveTo(dir: string): void {
    this.dir = dir
    this.data.path = `${dir}/${LOG_FILES.data}`
    this.entries.path = `${dir}/${LOG_FILES.entries}`
    this.chunkFile.path = `${dir}/${LOG_FILES.chunks}`
  }

  head(): LogHead {
    this.catchUp()
    const h = this.published
    return { lastOffset: h.last, entryCount: h.entries, closedChunks: h.closedChunks, snapshotChunks: h.snapshotChunks }
  }

  /**
   * The head and chunks for the clean-close heads file (heads-file.ts), when
   * the files end exactly there: everything appended is published and written
   * back, nothing is open, staged or waiting to be cut. Undefined otherwise
   * (the next open then scans this log).
   */
  cleanState(): { head: HeadState; chunks: readonly ChunkInfo[] } | undefined {
    if (this.deleted || this.open || this.pendingCut !== undefined || this.flight !== undefined) return undefined
    this.catchUp()
    if (!this.publishedIsAppended() || this.hasUnpublished() || this.pendLen !== 0 || this.staged.count !== 0) return undefined
    const head = this.published
    if (this.dataOnDisk !== head.dataEnd || this.recordsOnDisk !== head.entries || this.chunksOnDisk !== head.closedChunks) return undefined
    return { head, chunks: this.chunks.slice(0, head.closedChunks) }
  }

  /** The appended (not necessarily durable) head: the skip point for replays. */
  appendedHead(): HeadState {
    return this.appended
  }

  /** The appended head as an object (made on each call). */
  private get appended(): Boundary {
    return new Boundary(
      this.appendedEntries,
      this.appendedDataEnd,
      joinU64(this.appendedTxHi, this.appendedTxLo),
      this.appendedOp,
      this.appendedClosed,
      this.appendedSnapshotChunks,
      this.appendedSeq,
    )
  }

  /** The published head as an object (made on each call: readers, the heads file). */
  private get published(): HeadState {
    return new Boundary(
      this.publishedEntries,
      this.publishedDataEnd,
      joinU64(this.publishedTxHi, this.publishedTxLo),
      this.publishedOp,
      this.publishedClosed,
      this.publishedSnapshotChunks,
      0,
    )
  }

  private publishedIsAppended(): boolean {
    return (
      this.publishedEntries === this.appendedEntries &&
      this.publishedDataEnd === this.appendedDataEnd &&
      this.publishedTxHi === this.appendedTxHi &&
      this.publishedTxLo === this.appendedTxLo &&
      this.publishedOp === this.appendedOp &&
      this.publishedClosed === this.appendedClosed &&
      this.publishedSnapshotChunks === this.appendedSnapshotChunks
    )
  }

  read(after: LogOffset): LogRead {
    if (this.deleted) throw new StorageError('shape_deleted', `shape ${this.id} was deleted`)
    this.catchUp()
    return readRange(
      {
        id: this.id,
        fs: this.host.fs,
        fds: this.host.fds,
        data: this.data,
        entries: this.entries,
        chunks: this.chunks,
        head: this.published,
        memory: this.publishedDataEnd > this.dataOnDisk || this.publishedEntries > this.recordsOnDisk ? this.memoryTail() : undefined,
      },
      after,
    )
  }

  private memoryTail(): MemoryTail {
    const recordsStart = this.recordsOnDisk
    const stage = this.staged
    return {
      dataStart: this.dataOnDisk,
      data: this.pend === NO_BLOCK ? NO_BYTES : this.pendBuf.subarray(this.pendBase, this.pendBase + this.pendCap),
      recordsStart,
      record: (index) => {
        const i = index - recordsStart
        const r = readEntryRecord(stage.bufferOf(i), stage.byteOf(i))
        if (!r) throw new StorageError('corrupt_log', `shape ${this.id}: staged entry record ${index} is damaged`)
        return r
      },
    }
  }

  /** Bytes and records waiting for a write-back. */
  get behind(): boolean {
    return this.pendLen > 0 || this.recordsJournaled > this.recordsOnDisk
  }

  /**
   * Writes what this log holds in memory into its files (the tail's bytes and
   * the journaled records that describe them) through the store's writer:
   * when a log gathers WRITE_BACK_BYTES, and for a checkpoint.
   * One runs at a time per log; meanwhile appends go on into memory. A cut
   * during the write wins: the write counts for nothing and the files are cut
   * to what is known good.
   */
  async writeBack(): Promise<void> {
    while (this.flight) await this.flight.catch(() => undefined)
    const plan = this.planWriteBack()
    if (plan === undefined) return
    const flight = this.host.writer.writeAll(this.writesOf(plan))
    this.flight = flight
    try {
      await flight
    } catch (err) {
      throw this.writeBackFailed(plan, err)
    } finally {
      this.endFlight()
    }
    this.landWriteBack(plan)
    // What came meanwhile may be a write-back's worth already: the next append is not to be waited for.
    this.startWriteBackIfDue()
  }

  /**
   * A checkpoint's `writeBackAll` for many logs, as one job list for the
   * writer (`writeJobs`): no promise or suspended async call per log. With
   * 100k logs every checkpoint writes back nearly all of them, and under a
   * saturated Postgres on the same cores each write-back stayed in flight for
   * a second or more, so what each one kept (its promise and the async state
   * of four nested calls, ~500 bytes) outlived young-generation collections:
   * ~170 MB promoted per two checkpoints, and full collections of the whole
   * heap in the middle of the stream (bench:pipeline keep-up). A log with a
   * write-back of its own in flight, or whose write a cut made void, takes
   * the one-by-one path after the batch. Rejects with the first failure of a
   * log that still exists, once every log is settled.
   */
  static async writeBackMany(logs: readonly FileShapeLog[], writer: FileWriter): Promise<void> {
    const planned: FileShapeLog[] = []
    const plans: WriteBackPlan[] = []
    const jobs: FileWrite[][] = []
    const later: FileShapeLog[] = []
    let landed!: () => void
    // What another write-back of these logs waits on meanwhile (`writeBack`).
    const flight = new Promise<void>((resolve) => (landed = resolve))
    let first: Error | undefined
    const fail = (log: FileShapeLog, err: unknown): void => {
      if (!log.deleted) first ??= err instanceof StorageError ? err : fromSystemError(err, `write back shape ${log.id}`)
    }
    let i = 0
    try {
      for (const log of logs) {
        if (log.flight) {
          later.push(log)
          continue
        }
        const plan = log.planWriteBack()
        if (plan === undefined) continue
        log.flight = flight
        planned.push(log)
        plans.push(plan)
        jobs.push(log.writesOf(plan))
      }
      let failures: readonly (Error | undefined)[]
      try {
        failures = await writer.writeJobs(jobs)
      } catch (err) {
        failures = jobs.map(() => err as Error)
      }
      for (; i < planned.length; i++) {
        const log = planned[i]!
        const plan = plans[i]!
        log.endFlight()
        const err = failures[i]
        if (err !== undefined) {
          fail(log, log.writeBackFailed(plan, err))
          continue
        }
        try {
          if (plan.epoch !== log.epoch) later.push(log)
          log.landWriteBack(plan)
          // Its index write may fail (a full disk): that log's failure, not the run's end.
          log.startWriteBackIfDue()
        } catch (err) {
          fail(log, err)
        }
      }
    } finally {
      // Whatever threw, no log keeps the run's flight: theirs would never end.
      for (; i < planned.length; i++) planned[i]!.endFlight()
      landed()
    }
    await Promise.all(
      later.map(async (log) => {
        try {
          await log.writeBackAll()
        } catch (err) {
          fail(log, err)
        }
      }),
    )
    if (first !== undefined) throw first
  }

  /** Both files in one job (the journal, not their order, is what recovery trusts). */
  private writesOf(plan: WriteBackPlan): FileWrite[] {
    const writes: FileWrite[] = []
    if (plan.data.length > 0) writes.push({ ref: this.data, bytes: plan.data, position: plan.dataFrom })
    if (plan.records.length > 0) writes.push({ ref: this.entries, bytes: plan.records, position: plan.recordsAt })
    return writes
  }

  /** The error of a failed write-back, after cutting the files if a cut came during it. */
  private writeBackFailed(plan: WriteBackPlan, err: unknown): StorageError {
    if (plan.epoch !== this.epoch) this.cutFiles()
    return fromSystemError(err, `write back shape ${this.id}`)
  }

  /** A write-back has landed or failed: blocks given up meanwhile go back to the arena. */
  private endFlight(): void {
    this.flight = undefined
    const retired = this.retired
    this.retired = undefined
    if (retired) for (const b of retired) this.host.arena.release(b)
  }

  /** What a write-back writes: the tail's bytes and the journaled records not yet in the files. */
  private planWriteBack(): WriteBackPlan | undefined {
    if (this.deleted || !this.behind) return undefined
    if (this.pendingCut) this.cutTo(this.pendingCut)
    const recordsFrom = this.recordsOnDisk
    const recordCount = this.recordsJournaled - this.recordsOnDisk
    const records = Buffer.allocUnsafe(recordCount * ENTRY_RECORD_BYTES)
    this.staged.copyOut(0, recordCount, records, 0)
    return {
      epoch: this.epoch,
      dataFrom: this.dataOnDisk,
      data: this.pend === NO_BLOCK ? NO_BYTES : this.pendBuf.subarray(this.pendBase, this.pendBase + this.pendLen),
      recordsFrom,
      recordsAt: HEADER_BYTES + recordsFrom * ENTRY_RECORD_BYTES,
      recordCount,
      records,
    }
  }

  /** The plan's bytes are in the files: drop them from memory. */
  private landWriteBack(plan: WriteBackPlan): void {
    if (this.deleted) return
    if (plan.epoch !== this.epoch) {
      // A cut came during the write: the write counts for nothing, the files are cut to what is known good.
      this.cutFiles()
      return
    }
    this.dataOnDisk = plan.dataFrom + plan.data.length
    const rest = this.pendLen - plan.data.length
    // What came meanwhile moves to the front (readers copy what they take from
    // the tail); an idle log gives its block back.
    if (rest > 0) this.pendBuf.copyWithin(this.pendBase, this.pendBase + plan.data.length, this.pendBase + this.pendLen)
    else this.dropPend()
    this.pendLen = rest
    this.recordsOnDisk = plan.recordsFrom + plan.recordCount
    this.staged.dropFront(plan.recordCount)
  }

  /** Starts a background write-back once the tail holds WRITE_BACK_BYTES and none is in flight. */
  private startWriteBackIfDue(): void {
    if (this.pendLen < WRITE_BACK_BYTES || this.flight || this.deleted || !this.journal) return
    // Journaled first: a write-back writes only records the journal holds.
    this.writeIndex()
    this.writeBack().catch((err: unknown) => this.host.writeBackFailed(this, fromSystemError(err, `write back shape ${this.id}`)))
  }

  /** Write-back until what the journal held at the call is in the files (a checkpoint needs that). */
  async writeBackAll(): Promise<void> {
    const data = this.dataOnDisk + this.pendLen
    const records = this.recordsJournaled
    for (let tries = 0; !this.deleted && (this.dataOnDisk < Math.min(data, this.appendedDataEnd) || this.recordsOnDisk < Math.min(records, this.recordsJournaled)); tries++) {
      if (tries === 8) throw new StorageError('io_error', `shape ${this.id}: write-back kept racing cuts`)
      await this.writeBack()
    }
  }

  /**
   * The tail's block, with room for `length` more bytes after what it holds
   * (the caller writes them and moves pendLen).
   */
  private tailRoom(length: number): Buffer {
    const need = this.pendLen + length
    if (this.pend === NO_BLOCK || need > this.pendCap) {
      // Doubling, uncapped: a log appending faster than its write-backs land
      // (one busy shape) would otherwise copy its whole tail on every append.
      // A first block takes twice the first append: with many logs, most see a
      // second append before their write-back, which then needs no copy.
      const arena = this.host.arena
      const grown = arena.alloc(Math.max(need * (this.pend === NO_BLOCK ? 2 : 1), this.pendCap * 2))
      const buf = arena.bufOf(grown)
      const base = arena.baseOf(grown)
      if (this.pend !== NO_BLOCK) this.pendBuf.copy(buf, base, this.pendBase, this.pendBase + this.pendLen)
      this.dropPend()
      this.pend = grown
      this.pendBuf = buf
      this.pendBase = base
      this.pendCap = arena.sizeOf(grown)
    }
    return this.pendBuf
  }

  /** Gives the tail's block back to the arena, once no write-back reads it. */
  private dropPend(): void {
    const pend = this.pend
    if (pend === NO_BLOCK) return
    this.pend = NO_BLOCK
    this.pendBuf = NO_BYTES
    this.pendBase = 0
    this.pendCap = 0
    if (this.flight) (this.retired ??= []).push(pend)
    else this.host.arena.release(pend)
  }

  /*
   * BigInt comparisons and conversions cost tens of nanoseconds each on this
   * V8, more than everything else an entry needs, so the append path touches
   * BigInts once per entry (Number(op)) and does the rest on numbers. Ops stay
   * below 2^53, which no transaction comes near.
   */
  appendTransaction(input: readonly LogEntryInput[], options?: { more?: boolean }): number {
    if (this.deleted) throw new StorageError('shape_deleted', `shape ${this.id} was deleted`)
    const n = input.length
    if (n === 0) return 0
    const tx = input[0]!.offset.tx
    const jsons = new Array<Uint8Array>(n)
    const ops = new Array<number>(n)
    for (let i = 0; i < n; i++) {
      const e = input[i]!
      if (e.offset.tx !== tx) throw this.invalid(`one append holds one transaction (${tx} and ${e.offset.tx})`)
      if (e.offset.op > MAX_OP) throw this.invalid(`op ${e.offset.op} is above ${Number.MAX_SAFE_INTEGER}`)
      jsons[i] = e.json
      ops[i] = Number(e.offset.op)
    }
    return this.appendLines(tx, ops, jsons, n, options)
  }

  appendLines(tx: bigint, ops: readonly number[], jsons: readonly Uint8Array[], count: number, options?: { more?: boolean }): number {
    if (this.deleted) throw new StorageError('shape_deleted', `shape ${this.id} was deleted`)
    if (!Number.isInteger(count) || count < 0 || count > ops.length || count > jsons.length) {
      throw this.invalid(`${count} entries asked of arrays of ${ops.length} ops and ${jsons.length} lines`)
    }
    if (count === 0) return 0
    split(tx)
    const txHi = splitHi
    const txLo = splitLo
    const sinceLast = compareU64(txHi, txLo, this.appendedTxHi, this.appendedTxLo)
    // Entries at or below the last appended offset are a replay: skip them.
    let skip = 0
    if (sinceLast < 0) {
      skip = count
    } else if (sinceLast === 0) {
      const lastOp = this.appendedOp
      while (skip < count && ops[skip]! <= lastOp) skip++
    }
    if (skip === count) return 0
    if (tx <= 0n) throw this.invalid('live entries need a commit LSN above 0')
    if (tx <= this.floor) throw this.invalid(`transaction ${tx} is at or below ${this.floor}, the watermark the log was published with`)
    let prevOp = sinceLast === 0 ? this.appendedOp : -1
    for (let i = skip; i < count; i++) {
      const op = ops[i]!
      if (!(op > prevOp) || !Number.isInteger(op)) throw this.invalid('offsets must increase')
      if (op > Number.MAX_SAFE_INTEGER) throw this.invalid(`op ${op} is above ${Number.MAX_SAFE_INTEGER}`)
      prevOp = op
    }
    // A replayed head is cut off by copying: only a replay needs it.
    if (skip > 0) {
      jsons = jsons.slice(skip, count)
      ops = ops.slice(skip, count)
    }
    const more = options?.more === true
    try {
      this.write(tx, jsons, ops, count - skip, more ? 0 : ENTRY_TXN_END, false)
    } catch (err) {
      this.host.noteFault(this, tx)
      throw err
    }
    this.host.clearFault(this, tx)
    this.open = more
    // Its transaction end waits for a flush to publish it: in the end fields, or an object behind them.
    if (!more) {
      // Ends that flushes made durable since the last visit leave first: they would keep this one behind them in an object.
      this.catchUp()
      if (this.endSeq === 0) {
        this.setEnd(this.appendedEntries, this.appendedDataEnd, txHi, txLo, this.appendedOp, this.appendedClosed, this.appendedSnapshotChunks, this.appendedSeq)
      } else {
        const b = new Boundary(this.appendedEntries, this.appendedDataEnd, tx, this.appendedOp, this.appendedClosed, this.appendedSnapshotChunks, this.appendedSeq)
        if (this.lastLater === undefined) this.firstLater = b
        else this.lastLater.next = b
        this.lastLater = b
      }
      this.host.markUnpublished(this)
    }
    return count - skip
  }

  private invalid(what: string): StorageError {
    return new StorageError('invalid_append', `shape ${this.id}: ${what}`)
  }

  /** Snapshot rows: all rows of chunk n carry the virtual offset `0_n`. */
  appendSnapshot(rows: readonly Uint8Array[], end?: Uint8Array): void {
    const jsons = end ? [...rows, end] : rows
    this.write(0n, jsons, undefined, jsons.length, end ? ENTRY_TXN_END : 0, end !== undefined)
    if (end) this.snapshotHead = this.appended
  }

  /** Publishes the snapshot region (its directory became durable); transactions after it stay for `publish`. */
  publishSnapshot(): void {
    if (this.snapshotHead) this.setPublished(this.snapshotHead)
  }

  /** Sequence number of the last append (0 for none since the log was opened). */
  lastSeq(): number {
    return this.appendedSeq
  }

  /**
   * Whether the files may hold a transaction at or below `lsn` that is not yet
   * both complete and synced, given that the last sync covered appends up to
   * `seq`: one still open, or one whose last part came after that sync. While
   * this holds the log must not become durable under its id.
   */
  unsettledAtOrBelow(lsn: bigint, seq: number): boolean {
    split(lsn)
    if (this.open && compareU64(this.appendedTxHi, this.appendedTxLo, splitHi, splitLo) <= 0) return true
    if (this.endSeq === 0) return false
    if (this.endSeq > seq) return compareU64(this.endTxHi, this.endTxLo, splitHi, splitLo) <= 0
    for (let b = this.firstLater; b !== undefined; b = b.next) if (b.seq > seq) return b.tx <= lsn
    return false
  }

  /**
   * Publishes what the store's flushes made durable since one last visited
   * this log. A flush nobody asks about (see FileLogStore.publish) leaves
   * its logs alone, so every reader of the published head, and the append
   * that queues a transaction end behind the ones waiting, comes here first.
   * A log being built is published by the flush that finishes it, not here.
   */
  private catchUp(): void {
    if (this.endSeq !== 0 && this.registered) this.publish(this.host.publishedLsn, this.host.publishedSeq)
  }

  /**
   * Moves the published head to the last boundary with `tx ≤ lsn` appended no
   * later than `seq` (that is, before the flush that covers it started).
   * Returns whether the head moved.
   */
  publish(lsn: bigint, seq: number): boolean {
    if (this.endSeq === 0 || this.endSeq > seq) return false
    split(lsn)
    // Kept: a later end's split (shiftEnd) replaces the module's.
    const lsnHi = splitHi
    const lsnLo = splitLo
    if (compareU64(this.endTxHi, this.endTxLo, lsnHi, lsnLo) > 0) return false
    do {
      // Copied, not kept: the oldest end becomes the published head, and the next one the oldest.
      this.publishedEntries = this.endEntries
      this.publishedDataEnd = this.endDataEnd
      this.publishedTxHi = this.endTxHi
      this.publishedTxLo = this.endTxLo
      this.publishedOp = this.endOp
      this.publishedClosed = this.endClosed
      this.publishedSnapshotChunks = this.endSnapshotChunks
      this.shiftEnd()
    } while (this.endSeq !== 0 && compareU64(this.endTxHi, this.endTxLo, lsnHi, lsnLo) <= 0 && this.endSeq <= seq)
    return true
  }

  /** Moves the first later end (if any) into the end fields, unlinked so nothing keeps it alive. */
  private shiftEnd(): void {
    const b = this.firstLater
    if (b === undefined) {
      this.endSeq = 0
      return
    }
    split(b.tx)
    this.setEnd(b.entries, b.dataEnd, splitHi, splitLo, b.lastOp, b.closedChunks, b.snapshotChunks, b.seq)
    this.firstLater = b.next
    b.next = undefined
    if (this.firstLater === undefined) this.lastLater = undefined
  }

  /** The oldest unpublished transaction end, field by field. */
  private setEnd(entries: number, dataEnd: number, txHi: number, txLo: number, op: number, closed: number, snapshotChunks: number, seq: number): void {
    this.endEntries = entries
    this.endDataEnd = dataEnd
    this.endTxHi = txHi
    this.endTxLo = txLo
    this.endOp = op
    this.endClosed = closed
    this.endSnapshotChunks = snapshotChunks
    this.endSeq = seq
  }

  hasUnpublished(): boolean {
    return this.endSeq !== 0
  }

  private dropUnpublished(): void {
    for (let b = this.firstLater; b !== undefined; ) {
      const next: Boundary | undefined = b.next
      b.next = undefined
      b = next
    }
    this.endSeq = 0
    this.firstLater = undefined
    this.lastLater = undefined
  }

  private setAppended(head: HeadState): void {
    this.appendedEntries = head.entries
    this.appendedDataEnd = head.dataEnd
    this.appendedClosed = head.closedChunks
    this.openChunkPos = head.closedChunks > 0 ? this.chunks[head.closedChunks - 1]!.endPos : HEADER_BYTES
    this.appendedSnapshotChunks = head.snapshotChunks
    if (head instanceof Boundary) {
      split(head.tx)
      this.appendedOp = head.lastOp
      this.appendedSeq = head.seq
    } else {
      split(head.last.tx)
      this.appendedOp = Number(head.last.op)
      this.appendedSeq = 0
    }
    this.appendedTxHi = splitHi
    this.appendedTxLo = splitLo
  }

  private setPublished(head: HeadState): void {
    this.publishedEntries = head.entries
    this.publishedDataEnd = head.dataEnd
    this.publishedClosed = head.closedChunks
    this.publishedSnapshotChunks = head.snapshotChunks
    if (head instanceof Boundary) {
      split(head.tx)
      this.publishedOp = head.lastOp
    } else {
      split(head.last.tx)
      this.publishedOp = Number(head.last.op)
    }
    this.publishedTxHi = splitHi
    this.publishedTxLo = splitLo
  }

  /**
   * Forgets everything not published (a sync of this log failed, so the kernel
   * may have dropped those pages) and cuts the files back to match.
   */
  rollbackToPublished(): void {
    // What earlier flushes made durable stays: only what none covered goes.
    this.catchUp()
    this.dropUnpublished()
    this.open = false
    this.cutTo(this.published)
  }

  /**
   * Appends the first `count` entries of one transaction (`ops` given) or
   * snapshot rows (`ops` undefined: each row takes its chunk number).
   */
  private write(
    tx: bigint,
    jsons: readonly Uint8Array[],
    ops: readonly number[] | undefined,
    count: number,
    lastFlags: number,
    closeAtEnd: boolean,
  ): void {
    if (count === 0) return
    if (this.pendingCut) this.cutTo(this.pendingCut)
    // The head before this append, as numbers (an object only if the append fails and is cut back).
    const beforeEntries = this.appendedEntries
    const beforeDataEnd = this.appendedDataEnd
    const beforeTxHi = this.appendedTxHi
    const beforeTxLo = this.appendedTxLo
    const beforeOp = this.appendedOp
    const beforeSeq = this.appendedSeq
    const limit = this.host.chunkBytes
    const snapshot = ops === undefined
    const kind = snapshot ? CHUNK_SNAPSHOT : CHUNK_LIVE
    const baseFlags = snapshot ? ENTRY_SNAPSHOT : 0

    // Pass 1: chunk ends (and the ops of snapshot rows, which are chunk numbers).
    let newChunks: ChunkInfo[] | undefined
    const beforeClosed = this.appendedClosed
    const beforeSnapshotChunks = this.appendedSnapshotChunks
    let closed = beforeClosed
    let chunkFill = beforeDataEnd - this.openChunkPos
    let pos = beforeDataEnd
    const entryOps: number[] = snapshot ? new Array<number>(count) : (ops as number[])
    let snapshotChunks = beforeSnapshotChunks
    for (let i = 0; i < count; i++) {
      const size = jsons[i]!.length + 1
      pos += size
      chunkFill += size
      if (snapshot) entryOps[i] = closed
      if (chunkFill >= limit || (closeAtEnd && i === count - 1)) {
        ;(newChunks ??= []).push({ end: { tx, op: BigInt(entryOps[i]!) }, endEntry: beforeEntries + i + 1, endPos: pos, kind })
        if (snapshot) snapshotChunks++
        closed++
        chunkFill = 0
      }
    }

    try {
      // Pass 2: entry bytes. Write-behind: straight into the tail, then the
      // journal records them from there (one copy fewer than staging them).
      // Otherwise staged into pieces of at most STAGE_BYTES written to the file.
      const journal = this.journal
      const firstInGroup = journal !== undefined && !journal.inGroup(this)
      if (journal) {
        const tail = this.tailRoom(pos - beforeDataEnd)
        // Positions in `tail`, the buffer the tail's block lies in.
        const from = this.pendBase + this.pendLen
        let at = from
        for (let i = 0; i < count; i++) {
          const json = jsons[i]!
          tail.set(json, at)
          tail[at + json.length] = SEPARATOR
          at += json.length + 1
        }
        this.pendLen = at - this.pendBase
        journal.write(this, this.journalId, FILE_DATA, beforeDataEnd, tail, from, at - from)
      } else {
        this.writeThrough(jsons, count, beforeDataEnd)
        this.dataOnDisk = pos
      }

      // Pass 3: stage the records; a flush writes them after the bytes they describe.
      const stage = this.staged
      stage.reserve(count)
      const arena = stage.arena
      split(tx)
      const txLo = splitLo
      const txHi = splitHi
      let end = beforeDataEnd
      let slot = stage.count
      for (let i = 0; i < count; i++, slot++) {
        end += jsons[i]!.length + 1
        const flags = i === count - 1 ? baseFlags | lastFlags : baseFlags
        const block = stage.blockAt(slot)
        const at = arena.baseOf(block) + (slot & (RECORDS_PER_BLOCK - 1)) * ENTRY_RECORD_BYTES
        writeEntryRecordFast(arena.bufOf(block), arena.viewOf(block), at, txLo, txHi, entryOps[i]!, end, flags)
      }
      stage.count = slot
      if (newChunks) {
        for (const c of newChunks) this.chunks.push(c)
        this.openChunkPos = newChunks[newChunks.length - 1]!.endPos
      }
      this.appendedEntries = beforeEntries + count
      this.appendedDataEnd = pos
      this.appendedTxHi = txHi
      this.appendedTxLo = txLo
      this.appendedOp = entryOps[count - 1]!
      this.appendedClosed = closed
      this.appendedSnapshotChunks = snapshotChunks
      this.appendedSeq = this.host.nextSeq()
      if (journal) {
        if (firstInGroup) this.journalRecords(journal)
        this.startWriteBackIfDue()
      } else if (this.staged.count * ENTRY_RECORD_BYTES >= STAGE_BYTES) {
        // A huge transaction must not hold its whole index in memory.
        this.writeIndex()
      }
    } catch (err) {
      this.cutTo(new Boundary(beforeEntries, beforeDataEnd, joinU64(beforeTxHi, beforeTxLo), beforeOp, beforeClosed, beforeSnapshotChunks, beforeSeq))
      throw fromSystemError(err, `append to shape ${this.id}`)
    }
    this.host.markDirty(this, pos - beforeDataEnd)
  }

  /**
   * Write-through (no journal): the entry bytes go to log.dat at once, staged
   * into pieces of at most STAGE_BYTES. A method of its own because its helper
   * closure would otherwise make every append allocate a context for `write`.
   */
  private writeThrough(jsons: readonly Uint8Array[], count: number, start: number): void {
    const fs = this.host.fs
    const fds = this.host.fds
    const fd = fds.acquire(this.data)
    const put = (buf: Uint8Array, length: number, position: number): void => writeFully(fs, fd, buf, length, position)
    try {
      let at = start
      let fill = 0
      for (let i = 0; i < count; i++) {
        const json = jsons[i]!
        const size = json.length + 1
        if (size > STAGE_BYTES) {
          if (fill > 0) put(dataStage, fill, at - fill)
          fill = 0
          put(json, json.length, at)
          put(COMMA, 1, at + json.length)
          at += size
          continue
        }
        if (fill + size > dataStage.length) {
          if (fill > 0 && fill + size > STAGE_BYTES) {
            put(dataStage, fill, at - fill)
            fill = 0
          }
          dataStage = growKeeping(dataStage, fill, fill + size)
        }
        dataStage.set(json, fill)
        dataStage[fill + json.length] = SEPARATOR
        fill += size
        at += size
      }
      if (fill > 0) put(dataStage, fill, at - fill)
    } finally {
      fds.release(this.data)
    }
  }

  /** Makes `head` the appended head: drops what lies past it in memory and cuts the files to it. */
  private cutTo(head: HeadState): void {
    this.epoch++
    this.chunks.length = Math.min(this.chunks.length, head.closedChunks)
    this.setAppended(head)
    // Memory holds log.dat from dataOnDisk on and records from recordsOnDisk on; keep what lies below the new head.
    if (head.dataEnd >= this.dataOnDisk) {
      this.pendLen = Math.min(this.pendLen, head.dataEnd - this.dataOnDisk)
    } else {
      this.dataOnDisk = head.dataEnd
      this.dropPend()
      this.pendLen = 0
    }
    this.recordsOnDisk = Math.min(this.recordsOnDisk, head.entries)
    this.staged.truncate(head.entries - this.recordsOnDisk)
    this.recordsJournaled = Math.min(this.recordsJournaled, head.entries)
    this.chunksOnDisk = Math.min(this.chunksOnDisk, head.closedChunks)
    // Recorded whether or not the truncates succeed: replay must never bring back bytes past the head.
    const journal = this.journal
    if (journal) {
      const sizes = [head.dataEnd, HEADER_BYTES + head.entries * ENTRY_RECORD_BYTES, HEADER_BYTES + head.closedChunks * CHUNK_RECORD_BYTES] as const
      for (let f = 0; f < 3; f++) journal.truncate(this, this.journalId, f as 0 | 1 | 2, sizes[f]!)
    }
    // A write-back in flight may still land past the cut: it cuts the files when it ends.
    if (!this.flight) this.cutFiles()
  }

  /** Truncates the files to what they hold that is known good (the rest is in memory, or gone). */
  private cutFiles(): void {
    const fs = this.host.fs
    const fds = this.host.fds
    const head = this.appended
    try {
      fds.use(this.data, (fd) => fs.ftruncateSync(fd, this.dataOnDisk))
      fds.use(this.entries, (fd) => fs.ftruncateSync(fd, HEADER_BYTES + this.recordsOnDisk * ENTRY_RECORD_BYTES))
      fds.use(this.chunkFile, (fd) => fs.ftruncateSync(fd, HEADER_BYTES + head.closedChunks * CHUNK_RECORD_BYTES))
      this.chunksDirty = true
      this.pendingCut = undefined
    } catch {
      // Retried before the next append or write-back; until then the garbage
      // lies past every head and no reader or replay can reach it.
      this.pendingCut = head
    }
  }

  /** Closes the files (when the store closes or the log is deleted). */
  retire(): void {
    this.dropPend()
    this.pendLen = 0
    this.staged.truncate(0)
    this.host.fds.retire(this.data)
    this.host.fds.retire(this.entries)
    this.host.fds.retire(this.chunkFile)
  }
}

const COMMA = Buffer.from([SEPARATOR])

function growKeeping(buf: Buffer, keep: number, need: number): Buffer {
  if (buf.length >= need) return buf
  const next = Buffer.allocUnsafe(Math.max(need, buf.length * 2))
  buf.copy(next, 0, 0, keep)
  return next
}
