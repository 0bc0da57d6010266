import type {
  Awaitable,
  Change,
  ChangeSink,
  StreamedChange,
  UpdateChange,
} from './change-sink.js'
import {
  type DeleteMessage,
  type InsertMessage,
  type PgoutputMessage,
  type Relation,
  type TruncateMessage,
  type UpdateMessage,
  UNCHANGED_TOAST,
} from './pgoutput-messages.js'
import { RelationCache } from './relation-cache.js'
import { ProtocolViolationError } from './replication-errors.js'

/**
 * A non-streamed transaction bigger than this (in pgoutput bytes) is handed on
 * piecewise through the streaming callbacks instead of being held whole.
 * Postgres streams big transactions itself under protocol 2, but not under
 * protocol 1 (Postgres < 14) and not when it cannot (e.g. a transaction with
 * speculative inserts); this keeps our memory bounded in those cases too.
 */
export const DEFAULT_MAX_TRANSACTION_BYTES = 16 * 1024 * 1024

/** Changes per `onStreamedChanges` call: large enough to amortise a spill write, small enough to bound memory. */
export const DEFAULT_STREAM_BATCH_SIZE = 1024

const NO_COLUMNS: readonly number[] = Object.freeze([])
/** A transaction's batch until it spills (then it gets arrays of its own): nothing is ever added to this one. */
const NO_BATCH: StreamedChange[] = []

export interface TransactionAssemblerOptions {
  /** Shared with whoever else needs relation metadata; a new cache by default. */
  readonly relations?: RelationCache
  /**
   * The durable watermark: a transaction whose commit LSN is at or below it is
   * already stored, so a redelivery of it (after a reconnect or restart) is
   * dropped here. Defaults to "nothing is durable".
   */
  readonly durableLsn?: () => bigint
  readonly maxTransactionBytes?: number
  readonly streamBatchSize?: number
  /**
   * Pgoutput bytes after which a batch is handed on even if it has fewer than
   * `streamBatchSize` changes: 1,024 rows of megabyte documents must not all be
   * held at once. Default: a quarter of `maxTransactionBytes`, at least 64 KiB.
   */
  readonly streamBatchBytes?: number
}

interface OpenTransaction {
  readonly xid: number
  readonly lsn: bigint
  readonly commitTime: bigint
  origin: string | undefined
  /** Whole mode: every change so far. */
  changes: Change[]
  /** Spilled mode: changes not yet handed to `onStreamedChanges`. */
  batch: StreamedChange[]
  /** Pgoutput bytes of `batch`. */
  batchBytes: number
  bytes: number
  /** Already covered by the durable watermark (or delivered before): decoded, not delivered. */
  readonly skip: boolean
  /** Outgrew maxTransactionBytes: now delivered through the streaming callbacks. */
  spilled: boolean
}

/**
 * Turns decoded pgoutput messages into transactions for a `ChangeSink`.
 *
 * Pure: it does no I/O and keeps no clock; the only outside input is the
 * `durableLsn` function. Feed it every message of one replication connection
 * in order with `push`, awaiting what `push` returns; call `reset` when the
 * connection ends.
 *
 * Invariants it checks (a violation is a `ProtocolViolationError`):
 * - Begin/Commit pairs do not nest and do not overlap stream segments;
 * - a data message inside a segment carries an xid, outside one it does not;
 * - a stream commit or abort names a transaction with streamed changes.
 *
 * Delivery is at most once per assembler: a transaction at or below
 * max(durable watermark, last transaction the sink accepted) is dropped, so
 * the consumer sees every committed transaction exactly once across
 * reconnects, in increasing LSN order.
 */
export class TransactionAssembler {
  readonly relations: RelationCache
  private readonly durableLsn: () => bigint
  private readonly maxTransactionBytes: number
  private readonly streamBatchSize: number
  private readonly streamBatchBytes: number

  private current: OpenTransaction | undefined
  /** Top-level xid of the segment between Stream Start and Stream Stop. */
  private segmentXid: number | undefined
  private segmentBatch: StreamedChange[] = []
  private segmentBatchBytes = 0
  /** Top-level xids with streamed changes and no commit or abort yet. */
  private readonly openStreams = new Set<number>()
  private lastCommit = 0n
  private lastDelivered = 0n

  constructor(
    private readonly sink: ChangeSink,
    options: TransactionAssemblerOptions = {},
  ) {
    this.relations = options.relations ?? new RelationCache()
    this.durableLsn = options.durableLsn ?? (() => 0n)
    this.maxTransactionBytes = options.maxTransactionBytes ?? DEFAULT_MAX_TRANSACTION_BYTES
    this.streamBatchSize = options.streamBatchSize ?? DEFAULT_STREAM_BATCH_SIZE
    this.streamBatchBytes = options.streamBatchBytes ?? Math.max(64 * 1024, Math.floor(this.maxTransactionBytes / 4))
  }

  /**
   * Whether anything is in flight: a transaction between Begin and Commit, a
   * stream segment, or a streamed transaction not yet committed or aborted.
   */
  get busy(): boolean {
    return this.current !== undefined || this.segmentXid !== undefined || this.openStreams.size > 0
  }

  /** The highest commit LSN seen (delivered or dropped as already durable). */
  get lastCommitLsn(): bigint {
    return this.lastCommit
  }

  /** The highest commit LSN the sink accepted. */
  get lastDeliveredLsn(): bigint {
    return this.lastDelivered
  }

  /** Top-level xids with streamed changes awaiting commit or abort. */
  get openStreamXids(): readonly number[] {
    return [...this.openStreams]
  }

  push(message: PgoutputMessage): Awaitable {
    switch (message.tag) {
      case 'begin':
        return this.begin(message.xid, message.finalLsn, message.commitTime)
      case 'commit':
        return this.commit(message.commitLsn, message.endLsn, message.commitTime)
      case 'origin':
        if (this.current !== undefined) this.current.origin = message.name
        return undefined
      case 'relation': {
        this.checkXid(message.xid, 'Relation')
        const previous = this.relations.set(message.relation)
        return this.sink.onRelation?.(message.relation, previous)
      }
      case 'type':
        this.checkXid(message.xid, 'Type')
        this.relations.setType(message)
        return undefined
      case 'insert':
      case 'update':
      case 'delete':
      case 'truncate':
        return this.change(message)
      case 'message':
        this.checkXid(message.xid, 'Message')
        return this.sink.onLogicalMessage?.(message)
      case 'stream-start':
        return this.streamStart(message.xid, message.firstSegment)
      case 'stream-stop':
        return this.streamStop()
      case 'stream-commit':
        return this.streamCommit(message.xid, message.commitLsn, message.endLsn, message.commitTime)
      case 'stream-abort':
        return this.streamAbort(message.xid, message.subxid)
    }
  }

  /**
   * Forgets which transactions the sink accepted, so that after the next
   * reconnect everything above the durable watermark is delivered again. For a
   * sink that lost accepted data it had not yet made durable (a failed flush
   * rolled it back).
   */
  forgetDelivered(): void {
    this.lastDelivered = 0n
  }

  /**
   * Forgets everything in flight (the connection ended). Every transaction the
   * sink holds partially is aborted with reason 'disconnected'; Postgres sends
   * those again from the slot's position after a reconnect.
   */
  async reset(): Promise<void> {
    const voided = new Set(this.openStreams)
    if (this.current?.spilled === true) voided.add(this.current.xid)
    this.current = undefined
    this.segmentXid = undefined
    this.segmentBatch = []
    this.segmentBatchBytes = 0
    this.openStreams.clear()
    for (const xid of voided) await this.sink.onStreamAbort({ xid, subxid: xid, reason: 'disconnected' })
  }

  private begin(xid: number, lsn: bigint, commitTime: bigint): Awaitable {
    if (this.current !== undefined) throw new ProtocolViolationError(`Begin of xid ${xid} inside transaction ${this.current.xid}`)
    if (this.segmentXid !== undefined) throw new ProtocolViolationError(`Begin of xid ${xid} inside a stream segment of xid ${this.segmentXid}`)
    this.current = { xid, lsn, commitTime, origin: undefined, changes: [], batch: NO_BATCH, batchBytes: 0, bytes: 0, skip: this.alreadyDelivered(lsn), spilled: false }
    return undefined
  }

  private commit(commitLsn: bigint, endLsn: bigint, commitTime: bigint): Awaitable {
    const tx = this.current
    if (tx === undefined) throw new ProtocolViolationError('Commit without Begin')
    if (commitLsn !== tx.lsn) throw new ProtocolViolationError(`Commit LSN ${commitLsn} differs from Begin's final LSN ${tx.lsn}`)
    this.current = undefined
    if (commitLsn > this.lastCommit) this.lastCommit = commitLsn
    if (tx.skip) return undefined
    if (tx.spilled) return this.commitSpilled(tx, endLsn, commitTime)
    const transaction = { xid: tx.xid, lsn: tx.lsn, endLsn, commitTime: tx.commitTime, origin: tx.origin, changes: tx.changes }
    return this.delivered(this.sink.onTransaction(transaction), tx.lsn)
  }

  /*
   * The rare paths' closures live in methods of their own: a closure in
   * `commit`, `change` or `delivered` would make every call allocate a
   * context for what it captures, taken or not.
   */

  private commitSpilled(tx: OpenTransaction, endLsn: bigint, commitTime: bigint): Awaitable {
    const commit = { xid: tx.xid, lsn: tx.lsn, endLsn, commitTime }
    if (tx.batch.length === 0) return this.delivered(this.sink.onStreamCommit(commit), tx.lsn)
    return chain(this.sink.onStreamedChanges(tx.xid, tx.batch), () => this.delivered(this.sink.onStreamCommit(commit), tx.lsn))
  }

  /** From now on the transaction travels like a streamed one: what it holds becomes its first batch. */
  private spill(tx: OpenTransaction): void {
    tx.spilled = true
    tx.batch = tx.changes.map((c) => ({ subxid: tx.xid, change: c }))
    tx.batchBytes = tx.bytes
    tx.changes = []
  }

  private change(message: InsertMessage | UpdateMessage | DeleteMessage | TruncateMessage): Awaitable {
    if (message.xid !== undefined) {
      // Inside a stream segment: the xid is the subtransaction that made the change.
      const xid = this.segmentXid
      if (xid === undefined) throw new ProtocolViolationError(`${message.tag} with a stream xid outside a stream segment`)
      this.segmentBatch.push({ subxid: message.xid, change: this.toChange(message) })
      if (message.tag !== 'truncate') this.segmentBatchBytes += message.byteLength
      if (this.segmentBatch.length < this.streamBatchSize && this.segmentBatchBytes < this.streamBatchBytes) return undefined
      return this.flushSegment(xid)
    }
    const tx = this.current
    if (tx === undefined) {
      throw new ProtocolViolationError(this.segmentXid === undefined ? `${message.tag} outside a transaction` : `${message.tag} without an xid inside a stream segment`)
    }
    if (tx.skip) return undefined
    const change = this.toChange(message)
    const bytes = message.tag === 'truncate' ? 0 : message.byteLength
    tx.bytes += bytes
    if (!tx.spilled) {
      tx.changes.push(change)
      if (tx.bytes <= this.maxTransactionBytes) return undefined
      // Too big to hold: from here on it travels like a streamed transaction.
      this.spill(tx)
    } else {
      tx.batch.push({ subxid: tx.xid, change })
      tx.batchBytes += bytes
    }
    if (tx.batch.length < this.streamBatchSize && tx.batchBytes < this.streamBatchBytes) return undefined
    const batch = tx.batch
    tx.batch = []
    tx.batchBytes = 0
    return this.sink.onStreamedChanges(tx.xid, batch)
  }

  private toChange(message: InsertMessage | UpdateMessage | DeleteMessage | TruncateMessage): Change {
    switch (message.tag) {
      case 'insert':
        return { kind: 'insert', relation: this.relations.require(message.relationId), newTuple: message.newTuple }
      case 'update':
        return toUpdate(this.relations.require(message.relationId), message)
      case 'delete':
        return {
          kind: 'delete',
          relation: this.relations.require(message.relationId),
          oldTuple: message.oldTuple,
          oldTupleKind: message.oldTupleKind,
        }
      case 'truncate':
        return {
          kind: 'truncate',
          relations: message.relationIds.map((id) => this.relations.require(id)),
          cascade: message.cascade,
          restartIdentity: message.restartIdentity,
        }
    }
  }

  private streamStart(xid: number, firstSegment: boolean): Awaitable {
    if (this.current !== undefined) throw new ProtocolViolationError(`Stream Start of xid ${xid} inside transaction ${this.current.xid}`)
    if (this.segmentXid !== undefined) throw new ProtocolViolationError(`Stream Start of xid ${xid} inside a segment of xid ${this.segmentXid}`)
    if (firstSegment === this.openStreams.has(xid)) {
      throw new ProtocolViolationError(
        firstSegment ? `first Stream Start of xid ${xid}, which is already streaming` : `Stream Start of xid ${xid} continues a stream never started`,
      )
    }
    this.segmentXid = xid
    this.openStreams.add(xid)
    return undefined
  }

  private streamStop(): Awaitable {
    const xid = this.segmentXid
    if (xid === undefined) throw new ProtocolViolationError('Stream Stop outside a stream segment')
    this.segmentXid = undefined
    return this.segmentBatch.length === 0 ? undefined : this.flushSegment(xid)
  }

  private flushSegment(xid: number): Awaitable {
    const batch = this.segmentBatch
    this.segmentBatch = []
    this.segmentBatchBytes = 0
    return this.sink.onStreamedChanges(xid, batch)
  }

  private streamCommit(xid: number, lsn: bigint, endLsn: bigint, commitTime: bigint): Awaitable {
    this.checkOutsideSegment('Stream Commit', xid)
    if (!this.openStreams.delete(xid)) throw new ProtocolViolationError(`Stream Commit of xid ${xid}, which has no streamed changes`)
    if (lsn > this.lastCommit) this.lastCommit = lsn
    if (this.alreadyDelivered(lsn)) return this.sink.onStreamAbort({ xid, subxid: xid, reason: 'already-durable' })
    return this.delivered(this.sink.onStreamCommit({ xid, lsn, endLsn, commitTime }), lsn)
  }

  private streamAbort(xid: number, subxid: number): Awaitable {
    this.checkOutsideSegment('Stream Abort', xid)
    if (!this.openStreams.has(xid)) throw new ProtocolViolationError(`Stream Abort of xid ${xid}, which has no streamed changes`)
    if (subxid === xid) this.openStreams.delete(xid)
    return this.sink.onStreamAbort({ xid, subxid, reason: 'aborted' })
  }

  private checkOutsideSegment(what: string, xid: number): void {
    if (this.segmentXid !== undefined) throw new ProtocolViolationError(`${what} of xid ${xid} inside a segment of xid ${this.segmentXid}`)
    if (this.current !== undefined) throw new ProtocolViolationError(`${what} of xid ${xid} inside transaction ${this.current.xid}`)
  }

  private checkXid(xid: number | undefined, what: string): void {
    if (xid !== undefined && this.segmentXid === undefined) throw new ProtocolViolationError(`${what} with a stream xid outside a stream segment`)
  }

  private alreadyDelivered(lsn: bigint): boolean {
    return lsn <= this.lastDelivered || lsn <= this.durableLsn()
  }

  /** Records `lsn` as accepted once the sink's promise (if any) resolves. */
  private delivered(result: Awaitable, lsn: bigint): Awaitable {
    if (result === undefined) {
      this.markDelivered(lsn)
      return undefined
    }
    return this.deliveredLater(result, lsn)
  }

  private deliveredLater(result: Promise<void>, lsn: bigint): Promise<void> {
    return result.then(() => this.markDelivered(lsn))
  }

  private markDelivered(lsn: bigint): void {
    if (lsn > this.lastDelivered) this.lastDelivered = lsn
  }
}

function chain(first: Awaitable, next: () => Awaitable): Awaitable {
  return first === undefined ? next() : first.then(next)
}

/**
 * Fills unchanged-TOAST markers of the new tuple from the old one where the
 * old tuple has the real value: a full old row ('O', REPLICA IDENTITY FULL)
 * for every column, a key tuple ('K') only for key columns (its other columns
 * are nulls standing for "not logged"). Fills in place: the decoded message is
 * consumed by the assembler and its arrays become the change's.
 */
function toUpdate(relation: Relation, message: UpdateMessage): UpdateChange {
  const { newTuple, oldTuple, oldTupleKind } = message
  let unchanged: number[] | undefined
  for (let i = 0; i < newTuple.length; i++) {
    if (newTuple[i] !== UNCHANGED_TOAST) continue
    const old = oldTuple?.[i]
    const usable = old !== undefined && old !== UNCHANGED_TOAST && (oldTupleKind === 'full' || relation.columns[i]?.isKey === true)
    if (usable) newTuple[i] = old
    else (unchanged ??= []).push(i)
  }
  return {
    kind: 'update',
    relation,
    newTuple,
    oldTuple,
    oldTupleKind,
    unchangedToast: unchanged ?? NO_COLUMNS,
  }
}
