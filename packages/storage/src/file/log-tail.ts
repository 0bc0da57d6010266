/**
 * The second layer of a `FileShapeLog` (see file-log.ts): the log's files and
 * what of them is still in memory, and the writes that take staged index
 * records to the files or the journal.
 *
 * Write-behind. A registered log of a store with a journal does not write its
 * appends into its own files: the journal makes them durable (one sync for
 * every log), and until a checkpoint needs the files synced, the bytes wait in
 * the log's tail (a block of the store's arena) and readers are served from
 * memory. With many logs each append would otherwise cost a descriptor open
 * and close (the LRU cannot hold them all) and a write; a write-back
 * (log-write-back.ts) writes everything a log gathered with one write per
 * file. Other logs write through, and `pendLen` stays 0.
 *
 * `pendBuf[pendBase, pendBase + pendLen)` is log.dat from `dataOnDisk` to the
 * appended end; the staged records from `recordsOnDisk` on are the entry
 * records not yet in entries.idx, of which those below `recordsJournaled` are
 * in the journal.
 */
import { StorageError } from '../errors.js'
import { CHUNK_RECORD_BYTES, ENTRY_RECORD_BYTES, HEADER_BYTES, readEntryRecord, writeChunkRecord } from '../format.js'
import { readFully, writeFully } from '../fs-port.js'
import { LOG_FILES } from '../defaults.js'
import { DOUBLE_FIELD, TAGGED_FIELD } from './number-fields.js'
import { FileRef } from './fd-cache.js'
import type { Journal, JournalOwner } from './journal.js'
import { FILE_CHUNKS, FILE_DATA, FILE_ENTRIES } from './journal-format.js'
import type { LogHost } from './log-host.js'
import { LogHeads } from './log-heads.js'
import type { MemoryTail } from './log-reader.js'
import type { ChunkInfo, HeadState } from './log-state.js'
import { RecordStage } from './record-stage.js'
import { NO_BLOCK } from './tail-arena.js'

/**
 * Without the journal, appends are staged in shared buffers and written in
 * pieces of at most this size, so a transaction of any size needs bounded
 * memory (with it, lines go straight into the log's tail).
 */
export const STAGE_BYTES = 4 * 1024 * 1024
export const NO_BYTES = Buffer.alloc(0)
let chunkStage: Buffer = Buffer.allocUnsafe(16 * CHUNK_RECORD_BYTES)

function grow(buf: Buffer, need: number): Buffer {
  if (buf.length >= need) return buf
  return Buffer.allocUnsafe(Math.max(need, Math.min(buf.length * 2, STAGE_BYTES)))
}

export abstract class LogTail extends LogHeads implements JournalOwner {
  /** The journal's marks (see JournalOwner). */
  journalGroup = 0
  journalSegment = 0
  /**
   * The three files' refs, made on first use (`data`, `entries`,
   * `chunkFile`): an open of 100k logs uses few of them, and three objects
   * per log were a good part of what its collections copied. Until then the
   * inodes the open found wait in the number fields below.
   */
  private dataRef: FileRef | undefined = undefined
  private entriesRef: FileRef | undefined = undefined
  private chunksRef: FileRef | undefined = undefined
  private dataIno = TAGGED_FIELD
  private entriesIno = TAGGED_FIELD
  private chunksIno = TAGGED_FIELD
  /** `retire` was called: a ref made after it is born retired (never opens a file). */
  private filesRetired = false
  /**
   * Entry records are staged here. With the journal, they also go into the
   * journal (`journalRecords`: at a log's first append in a group, else at the
   * flush's `writeIndex`), and a write-back takes them to entries.idx. Writing
   * through, `writeIndex()` writes them to the file when a flush syncs this
   * log, just before the sync. Readers only ever see published entries, and
   * publishing follows the flush, so every record a reader can ask for is
   * durable by then. Made when first used (`staged`): an open of 100k logs
   * would otherwise make one per log before any of them takes an append.
   */
  private stage: RecordStage | undefined = undefined
  /** Entry records and chunk records already in their files. */
  protected recordsOnDisk: number
  protected chunksOnDisk: number
  protected recordsJournaled: number
  protected dataOnDisk = TAGGED_FIELD
  /** The tail's arena block (a handle; NO_BLOCK for none), the Buffer it lies in, where it starts there and its size. */
  protected pend = DOUBLE_FIELD
  protected pendBuf: Buffer = NO_BYTES
  protected pendBase = TAGGED_FIELD
  protected pendCap = TAGGED_FIELD
  protected pendLen = TAGGED_FIELD
  /** The write-back in flight, if any (log-write-back.ts). */
  protected flight: Promise<void> | undefined
  /** Tail blocks given up while a write-back read them: back to the arena when it ends. */
  private retired: number[] | undefined
  /** Chunk records were written since the last successful sync. */
  chunksDirty = false
  /**
   * The store serves this log (it is in `shapes/`, opened or finished). A log
   * still being built is synced and published by the flush that finishes it,
   * not by the store's dirty and unpublished sets.
   */
  registered = false
  deleted = false

  constructor(
    readonly id: string,
    public dir: string,
    protected readonly host: LogHost,
    chunks: ChunkInfo[],
    head: HeadState,
  ) {
    super(chunks, head)
    this.dataIno = -1
    this.entriesIno = -1
    this.chunksIno = -1
    this.pend = NO_BLOCK
    this.pendBase = 0
    this.pendCap = 0
    this.pendLen = 0
    this.recordsOnDisk = head.entries
    this.recordsJournaled = head.entries
    this.dataOnDisk = head.dataEnd
    this.chunksOnDisk = head.closedChunks
  }

  /** The journal, while this log's writes must be recorded in it (registered logs only). */
  protected get journal(): Journal<LogTail> | undefined {
    return this.registered ? this.host.journal : undefined
  }

  /**
   * Publishes what the store's flushes made durable since one last visited
   * this log. A flush nobody asks about (see GroupCommit.publish) leaves its
   * logs alone, so every reader of the published head, and the append that
   * queues a transaction end behind the ones waiting, comes here first. A log
   * being built is published by the flush that finishes it, not here.
   */
  protected catchUp(): void {
    if (this.endSeq !== 0 && this.registered) this.publish(this.host.publishedLsn, this.host.publishedSeq)
  }

  protected get staged(): RecordStage {
    return (this.stage ??= new RecordStage(this.host.arena))
  }

  /** Drops the staged records from the `keep`th on, if any were ever staged. */
  protected truncateStaged(keep: number): void {
    this.stage?.truncate(keep)
  }

  get data(): FileRef {
    return (this.dataRef ??= this.fileRef(LOG_FILES.data, this.dataIno))
  }

  get entries(): FileRef {
    return (this.entriesRef ??= this.fileRef(LOG_FILES.entries, this.entriesIno))
  }

  get chunkFile(): FileRef {
    return (this.chunksRef ??= this.fileRef(LOG_FILES.chunks, this.chunksIno))
  }

  private fileRef(name: string, ino: number): FileRef {
    const ref = new FileRef(this.dir, 'r+', name)
    ref.ino = ino
    ref.retired = this.filesRetired
    return ref
  }

  /** The inode of the data file as known (-1: not yet), without making its ref. */
  get dataInode(): number {
    return this.dataRef === undefined ? this.dataIno : this.dataRef.ino
  }

  /**
   * The inodes of the three files, as an open found them (-1: to be found
   * when first opened): no write, on the write-back thread by path, then
   * lands in another file put at the same path.
   */
  setInodes(data: number, entries: number, chunks: number): void {
    if (this.dataRef === undefined) this.dataIno = data
    else this.dataRef.ino = data
    if (this.entriesRef === undefined) this.entriesIno = entries
    else this.entriesRef.ino = entries
    if (this.chunksRef === undefined) this.chunksIno = chunks
    else this.chunksRef.ino = chunks
  }

  /** Retires the refs made (closing their files once unpinned); any made later are born retired. */
  protected retireFiles(): void {
    this.filesRetired = true
    for (const ref of [this.dataRef, this.entriesRef, this.chunksRef]) if (ref !== undefined) this.host.fds.retire(ref)
  }

  /** Points the file refs at a new directory (the snapshot was renamed into place). */
  moveTo(dir: string): void {
    this.dir = dir
    this.dataRef?.moveTo(dir)
    this.entriesRef?.moveTo(dir)
    this.chunksRef?.moveTo(dir)
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
      journal.write(this, this.id, file, start, buf, 0, buf.length)
    }
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
   * the flush, it would be a second visit to each log appended since the last
   * flush, which with many logs have left the caches by then. Its later
   * appends in the group leave theirs to the flush, which writes them with
   * one record head (a log taking many appends per flush is in the caches
   * anyway).
   */
  protected journalRecords(journal: Journal<LogTail>): void {
    const total = this.recordsOnDisk + this.staged.count
    if (this.recordsJournaled >= total) return
    // Straight from the stage's blocks (the journal copies them anyway), a run
    // per block. A loop, not a callback: a closure here cost each call a context.
    const stage = this.staged
    let at = HEADER_BYTES + this.recordsJournaled * ENTRY_RECORD_BYTES
    for (let i = this.recordsJournaled - this.recordsOnDisk; i < stage.count; ) {
      const end = stage.runEnd(i, stage.count)
      const bytes = (end - i) * ENTRY_RECORD_BYTES
      journal.write(this, this.id, FILE_ENTRIES, at, stage.bufferOf(i), stage.byteOf(i), bytes)
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
    this.journal?.write(this, this.id, FILE_CHUNKS, at, chunkStage, 0, count * CHUNK_RECORD_BYTES)
    this.chunksOnDisk = closed
    this.chunksDirty = true
  }

  /** What a reader takes from memory: log.dat past `dataOnDisk` and the staged records. */
  protected memoryTail(): MemoryTail {
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
   * The tail's block, with room for `length` more bytes after what it holds
   * (the caller writes them and moves pendLen).
   */
  protected tailRoom(length: number): Buffer {
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
  protected dropPend(): void {
    const pend = this.pend
    if (pend === NO_BLOCK) return
    this.pend = NO_BLOCK
    this.pendBuf = NO_BYTES
    this.pendBase = 0
    this.pendCap = 0
    if (this.flight) (this.retired ??= []).push(pend)
    else this.host.arena.release(pend)
  }

  /** A write-back has landed or failed: blocks given up meanwhile go back to the arena. */
  protected endFlight(): void {
    this.flight = undefined
    const retired = this.retired
    this.retired = undefined
    if (retired) for (const b of retired) this.host.arena.release(b)
  }
}
