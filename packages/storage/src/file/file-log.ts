/**
 * One shape log in the writing process. Offset resolution is `log-reader.ts`;
 * opening and cutting back after a crash is `recovery.ts`; syncing, group
 * commit and the watermark belong to the store (group-commit.ts).
 *
 * A log is one object built in layers, each a class in a module of its own
 * that owns its fields and extends the one before:
 *
 *   LogHeads      log-heads.ts       the appended and published heads, the queue of ends between them, publish
 *   LogTail       log-tail.ts        the files, what of them is still in memory (write-behind), index writes
 *   LogCut        log-cut.ts         cutting back to an earlier head: failed appends, failed syncs, recovery
 *   LogWriteBack  log-write-back.ts  write-back of the in-memory tail into the files
 *   FileShapeLog  this module        the append path and the reader's view
 *
 * Layers, not collaborating objects: a store holds one of these per shape
 * (100k and more), and every append touches the fields of each layer. One
 * object keeps that a field access on `this` (no pointer to follow per layer,
 * no extra object per log for the collector to trace), and every call site
 * stays monomorphic.
 */
import type { LogOffset } from '@sluice/protocol'
import type { LogEntryInput, LogHead, LogRead, ShapeLog } from '../contract.js'
import { StorageError, fromSystemError } from '../errors.js'
import { CHUNK_LIVE, CHUNK_SNAPSHOT, ENTRY_RECORD_BYTES, ENTRY_SNAPSHOT, ENTRY_TXN_END, SEPARATOR, joinU64, writeEntryRecordFast } from '../format.js'
import { writeFully } from '../fs-port.js'
import { FILE_DATA } from './journal-format.js'
import { Boundary, compareU64, lsnHalves, splitLsn } from './log-heads.js'
import type { LogHost } from './log-host.js'
import { readRange } from './log-reader.js'
import type { ChunkInfo, HeadState } from './log-state.js'
import type { HeadsEntry } from './heads-file.js'
import { STAGE_BYTES } from './log-tail.js'
import { LogWriteBack } from './log-write-back.js'
import { RECORDS_PER_BLOCK } from './record-stage.js'

let dataStage: Buffer = Buffer.allocUnsafe(64 * 1024)
/** Ops are numbers on the append path (see appendLines). */
const MAX_OP = BigInt(Number.MAX_SAFE_INTEGER)

export class FileShapeLog extends LogWriteBack implements ShapeLog {
  /** Set by the store while this log is in its dirty list (membership, so the list holds each log once). */
  dirtyMark = false
  /** The store's index of this log in its list of logs waiting to publish; -1 when not in it. */
  unpublishedSlot = -1
  /**
   * New transactions at or below this are refused: set to the watermark the
   * finishing flush publishes when it renames a new log into place, since a
   * transaction appended after that could not be synced before the watermark
   * covering it was published (recovery's premise).
   */
  floor = 0n
  /** The appended head right after the snapshot-end line. */
  private snapshotHead: HeadState | undefined

  /**
   * The meta bytes, one character per byte: a string lives in the V8 heap
   * alone, where a `Uint8Array` of its own would be a view, an `ArrayBuffer`
   * and a block of the C heap (about 270 bytes more per log, and a malloc
   * and free per shape made and retired).
   */
  readonly metaText: string

  constructor(id: string, dir: string, meta: Uint8Array | string, host: LogHost, chunks: ChunkInfo[], head: HeadState) {
    super(id, dir, host, chunks, head)
    this.metaText = typeof meta === 'string' ? meta : Buffer.from(meta.buffer, meta.byteOffset, meta.byteLength).toString('latin1')
  }

  /** A copy of the meta bytes (read at restore; nothing on the serving path asks for them). */
  get meta(): Uint8Array {
    return Buffer.from(this.metaText, 'latin1')
  }

  head(): LogHead {
    this.catchUp()
    const h = this.published
    return { lastOffset: h.last, entryCount: h.entries, closedChunks: h.closedChunks, snapshotChunks: h.snapshotChunks }
  }

  /**
   * This log's entry in the heads file (heads-file.ts): its published
   * head, durable by definition, and the inode of its data file. Undefined for
   * a deleted log and one whose data file was never opened (no inode known):
   * the next open scans those.
   */
  headsEntry(): HeadsEntry | undefined {
    const dataIno = this.dataInode
    if (this.deleted || dataIno < 0) return undefined
    this.catchUp()
    const head = this.published
    return { id: this.id, meta: this.metaText, head, chunks: this.chunks.slice(0, head.closedChunks), dataIno }
  }

  /** The appended (not necessarily durable) head: the skip point for replays. */
  appendedHead(): HeadState {
    return this.appended
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
    splitLsn(tx)
    const txHi = lsnHalves.hi
    const txLo = lsnHalves.lo
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
    // Its transaction end waits for a flush to publish it.
    if (!more) {
      // Ends that flushes made durable since the last visit leave first: they would keep this one behind them in an object.
      this.catchUp()
      this.queueEnd(tx, txHi, txLo)
      this.host.markUnpublished(this)
    }
    return count - skip
  }

  private invalid(what: string): StorageError {
    return new StorageError('invalid_append', `shape ${this.id}: ${what}`)
  }

  /** Snapshot rows: all rows of chunk n carry the virtual offset `0_n`. */
  appendSnapshot(rows: readonly Uint8Array[], end?: Uint8Array, closeChunk = false): void {
    const jsons = end ? [...rows, end] : rows
    this.write(0n, jsons, undefined, jsons.length, end ? ENTRY_TXN_END : 0, end !== undefined || closeChunk)
    if (end) this.snapshotHead = this.appended
  }

  /** Publishes the snapshot region (its directory became durable); transactions after it stay for `publish`. */
  publishSnapshot(): void {
    if (this.snapshotHead) this.setPublished(this.snapshotHead)
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
        journal.write(this, this.id, FILE_DATA, beforeDataEnd, tail, from, at - from)
      } else {
        this.writeThrough(jsons, count, beforeDataEnd)
        this.dataOnDisk = pos
      }

      // Pass 3: stage the records; a flush writes them after the bytes they describe.
      const stage = this.staged
      stage.reserve(count)
      const arena = stage.arena
      splitLsn(tx)
      const txLo = lsnHalves.lo
      const txHi = lsnHalves.hi
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
      if (newChunks !== undefined) {
        // A log's first chunks (a new shape's snapshot) get an array of their length: pushing would grow it to room for 17, kept for the life of a shape that may never close another.
        if (this.chunks.length === 0) this.chunks = newChunks.slice()
        else for (const c of newChunks) this.chunks.push(c)
      }
      this.advanceAppended(beforeEntries + count, pos, txHi, txLo, entryOps[count - 1]!, closed, snapshotChunks, this.host.nextSeq())
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

  /** Closes the files (when the store closes or the log is deleted). */
  retire(): void {
    this.dropPend()
    this.pendLen = 0
    this.truncateStaged(0)
    this.retireFiles()
  }
}

const COMMA = Buffer.from([SEPARATOR])

function growKeeping(buf: Buffer, keep: number, need: number): Buffer {
  if (buf.length >= need) return buf
  const next = Buffer.allocUnsafe(Math.max(need, buf.length * 2))
  buf.copy(next, 0, 0, keep)
  return next
}
