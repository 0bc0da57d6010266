/**
 * A log's two heads and the queue between them (the first layer of a
 * `FileShapeLog`; see file-log.ts for the layers). `appended` is what the log
 * holds; `published` is what readers see: it moves only to a transaction
 * boundary that a flush has made durable and the watermark covers. Between
 * them sits a queue of boundaries, the transaction ends appended since the
 * last publish. No I/O here.
 *
 * The heads are kept field by field, not as objects. With 100k logs a log's
 * head lives for seconds, until that log's next append or publish: a head
 * object per append would outlive the young generation, be copied by
 * scavenges and promoted, and set off full collections of the whole heap.
 * Objects are made only for readers and the rare paths (`appended`,
 * `published`); an append allocates at most a queued `Boundary` behind the
 * oldest unpublished end, which a flush publishes (and drops) within
 * milliseconds.
 *
 * LSNs are kept as 32-bit halves in number fields, not as BigInts. Every
 * transaction's LSN is a new BigInt and a log is an old object: storing one in
 * it on every append gave each young-generation collection another old page
 * to scan, and promoted the BigInt itself.
 */
import type { LogOffset } from '@sluice/protocol'
import { HEADER_BYTES, joinU64, splitU64 } from '../format.js'
import { DOUBLE_FIELD, TAGGED_FIELD } from './number-fields.js'
import type { ChunkInfo, HeadState } from './log-state.js'

/**
 * A head as an object: for readers and the heads file, and for a transaction
 * end queued (`next`) behind the log's oldest unpublished one (see
 * `LogHeads.endSeq`) until a publish moves past it. The last offset is kept as
 * numbers and made a `LogOffset` only when a reader asks, instead of holding
 * the router's offset object and its BigInt per append; the queue is a link
 * per boundary, not an array per log refilled after every publish.
 */
export class Boundary implements HeadState {
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

/**
 * The last LSN split into halves (`splitLsn`). One transaction's parts for
 * many logs share it, so the split is done once per transaction, not per log.
 * Read `hi` and `lo` right after the call: the next split replaces them.
 *
 * `lo` is the low 32 bits as a signed integer (the same bits; `>>> 0` gives
 * the unsigned half back, and `compareU64` and `joinU64` read it so): a small
 * integer whatever the LSN, so the log fields that keep it need no heap
 * number of their own (number-fields.ts) and an append stores none into them.
 */
export const lsnHalves = { of: -1n, hi: 0, lo: 0 }

/** Sets `lsnHalves` to `tx`'s halves. */
export function splitLsn(tx: bigint): void {
  if (tx === lsnHalves.of) return
  const { hi, lo } = splitU64(tx)
  lsnHalves.of = tx
  lsnHalves.hi = hi
  lsnHalves.lo = lo | 0
}

/** Compares two u64s given as 32-bit halves (the low ones signed or not, as `lsnHalves` keeps them): negative, zero or positive. */
export function compareU64(aHi: number, aLo: number, bHi: number, bLo: number): number {
  return aHi !== bHi ? aHi - bHi : (aLo >>> 0) - (bLo >>> 0)
}

export abstract class LogHeads {
  protected appendedEntries = 0
  protected appendedDataEnd = TAGGED_FIELD
  protected appendedTxHi = 0
  protected appendedTxLo = TAGGED_FIELD
  protected appendedOp = -1
  protected appendedClosed = 0
  protected appendedSnapshotChunks = 0
  /** Where the open chunk starts in log.dat (the last closed chunk's end): read by every append, kept to spare it a cold chunk record. */
  protected openChunkPos = TAGGED_FIELD
  /** The store's append sequence number of the appended head (0 after an open or a cut to an earlier head). */
  protected appendedSeq = DOUBLE_FIELD
  protected publishedEntries = 0
  protected publishedDataEnd = TAGGED_FIELD
  private publishedTxHi = 0
  private publishedTxLo = TAGGED_FIELD
  private publishedOp = -1
  private publishedClosed = 0
  private publishedSnapshotChunks = 0
  /**
   * Transaction ends appended since the last publish, oldest first. The
   * oldest is these number fields (`endSeq` 0: none); later ones are
   * Boundary objects linked by `next`. With many logs nearly every log holds
   * one end between two flushes, and an object for it would live through a
   * scavenge or two and then be promoted.
   */
  private endEntries = 0
  private endDataEnd = TAGGED_FIELD
  private endTxHi = 0
  private endTxLo = TAGGED_FIELD
  private endOp = -1
  private endClosed = 0
  private endSnapshotChunks = 0
  protected endSeq = DOUBLE_FIELD
  private firstLater: Boundary | undefined = undefined
  private lastLater: Boundary | undefined = undefined
  /** The last append said `more`: its transaction is open. */
  protected open = false

  constructor(
    /** Closed chunks, oldest first (the appended head's `closedChunks` of them count). */
    protected chunks: ChunkInfo[],
    head: HeadState,
  ) {
    // The start values of the number fields (number-fields.ts) that the heads below leave alone.
    this.setEnd(0, 0, 0, 0, -1, 0, 0, 0)
    this.setAppended(head)
    this.setPublished(head)
  }

  /** Sequence number of the last append (0 for none since the log was opened). */
  lastSeq(): number {
    return this.appendedSeq
  }

  /** The appended head as an object (made on each call). */
  protected get appended(): Boundary {
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
  protected get published(): HeadState {
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

  /**
   * The appended head after a successful append (its chunks already pushed).
   * `openChunkPos` moves only when the append closed a chunk.
   */
  protected advanceAppended(entries: number, dataEnd: number, txHi: number, txLo: number, op: number, closed: number, snapshotChunks: number, seq: number): void {
    this.appendedEntries = entries
    this.appendedDataEnd = dataEnd
    this.appendedTxHi = txHi
    this.appendedTxLo = txLo
    this.appendedOp = op
    if (closed !== this.appendedClosed) this.openChunkPos = this.chunks[closed - 1]!.endPos
    this.appendedClosed = closed
    this.appendedSnapshotChunks = snapshotChunks
    this.appendedSeq = seq
  }

  /**
   * Queues the appended head, just moved by an append that ended transaction
   * `tx` (halves `txHi`, `txLo`), for a flush to publish: in the end fields, or
   * an object behind them.
   */
  protected queueEnd(tx: bigint, txHi: number, txLo: number): void {
    if (this.endSeq === 0) {
      this.setEnd(this.appendedEntries, this.appendedDataEnd, txHi, txLo, this.appendedOp, this.appendedClosed, this.appendedSnapshotChunks, this.appendedSeq)
    } else {
      const b = new Boundary(this.appendedEntries, this.appendedDataEnd, tx, this.appendedOp, this.appendedClosed, this.appendedSnapshotChunks, this.appendedSeq)
      if (this.lastLater === undefined) this.firstLater = b
      else this.lastLater.next = b
      this.lastLater = b
    }
  }

  /**
   * Whether the files may hold a transaction at or below `lsn` that is not yet
   * both complete and synced, given that the last sync covered appends up to
   * `seq`: one still open, or one whose last part came after that sync. While
   * this holds the log must not become durable under its id.
   */
  unsettledAtOrBelow(lsn: bigint, seq: number): boolean {
    splitLsn(lsn)
    const hi = lsnHalves.hi
    const lo = lsnHalves.lo
    if (this.open && compareU64(this.appendedTxHi, this.appendedTxLo, hi, lo) <= 0) return true
    if (this.endSeq === 0) return false
    if (this.endSeq > seq) return compareU64(this.endTxHi, this.endTxLo, hi, lo) <= 0
    for (let b = this.firstLater; b !== undefined; b = b.next) if (b.seq > seq) return b.tx <= lsn
    return false
  }

  /**
   * Moves the published head to the last boundary with `tx ≤ lsn` appended no
   * later than `seq` (that is, before the flush that covers it started).
   * Returns whether the head moved.
   */
  publish(lsn: bigint, seq: number): boolean {
    if (this.endSeq === 0 || this.endSeq > seq) return false
    splitLsn(lsn)
    // Kept: a later end's split (shiftEnd) replaces the shared halves.
    const lsnHi = lsnHalves.hi
    const lsnLo = lsnHalves.lo
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
    splitLsn(b.tx)
    this.setEnd(b.entries, b.dataEnd, lsnHalves.hi, lsnHalves.lo, b.lastOp, b.closedChunks, b.snapshotChunks, b.seq)
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

  /**
   * Whether both heads are `head` and nothing waits between them: a log built
   * from a heads-file entry and not appended to since, asked whether another
   * entry describes it as it is (`prepareLogs`, `loadLogs`).
   */
  isAt(head: HeadState): boolean {
    if (this.endSeq !== 0 || this.open) return false
    if (this.publishedEntries !== head.entries || this.publishedDataEnd !== head.dataEnd || this.publishedClosed !== head.closedChunks) return false
    if (this.publishedSnapshotChunks !== head.snapshotChunks || this.appendedEntries !== head.entries || this.appendedDataEnd !== head.dataEnd) return false
    splitLsn(head.last.tx)
    return this.publishedTxHi === lsnHalves.hi && this.publishedTxLo === lsnHalves.lo && this.publishedOp === Number(head.last.op)
  }

  hasUnpublished(): boolean {
    return this.endSeq !== 0
  }

  /** Forgets every queued transaction end. */
  protected dropUnpublished(): void {
    for (let b = this.firstLater; b !== undefined; ) {
      const next: Boundary | undefined = b.next
      b.next = undefined
      b = next
    }
    this.endSeq = 0
    this.firstLater = undefined
    this.lastLater = undefined
  }

  protected setAppended(head: HeadState): void {
    this.appendedEntries = head.entries
    this.appendedDataEnd = head.dataEnd
    this.appendedClosed = head.closedChunks
    this.openChunkPos = head.closedChunks > 0 ? this.chunks[head.closedChunks - 1]!.endPos : HEADER_BYTES
    this.appendedSnapshotChunks = head.snapshotChunks
    if (head instanceof Boundary) {
      splitLsn(head.tx)
      this.appendedOp = head.lastOp
      this.appendedSeq = head.seq
    } else {
      splitLsn(head.last.tx)
      this.appendedOp = Number(head.last.op)
      this.appendedSeq = 0
    }
    this.appendedTxHi = lsnHalves.hi
    this.appendedTxLo = lsnHalves.lo
  }

  protected setPublished(head: HeadState): void {
    this.publishedEntries = head.entries
    this.publishedDataEnd = head.dataEnd
    this.publishedClosed = head.closedChunks
    this.publishedSnapshotChunks = head.snapshotChunks
    if (head instanceof Boundary) {
      splitLsn(head.tx)
      this.publishedOp = head.lastOp
    } else {
      splitLsn(head.last.tx)
      this.publishedOp = Number(head.last.op)
    }
    this.publishedTxHi = lsnHalves.hi
    this.publishedTxLo = lsnHalves.lo
  }
}
