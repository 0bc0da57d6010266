import type { LogicalMessage, OldTupleKind, Relation, TupleValue } from './pgoutput-messages.js'

/**
 * What the replication stage hands downstream: row changes grouped into
 * committed transactions, and the interface of whoever receives them.
 */

export interface InsertChange {
  readonly kind: 'insert'
  readonly relation: Relation
  readonly newTuple: readonly TupleValue[]
}

export interface UpdateChange {
  readonly kind: 'update'
  readonly relation: Relation
  /**
   * The new row. Unchanged-TOAST markers are already replaced with the old
   * value when the old row was logged (REPLICA IDENTITY FULL); any left are
   * listed in `unchangedToast`.
   */
  readonly newTuple: readonly TupleValue[]
  readonly oldTuple: readonly TupleValue[] | undefined
  readonly oldTupleKind: OldTupleKind | undefined
  /**
   * Column indexes whose new value is still `UNCHANGED_TOAST`: the table does
   * not log old rows, so the value is unknown. Empty for almost every update; a
   * consumer that needs full rows raises `UnchangedToastError` (see
   * `assertNoUnchangedToast`).
   */
  readonly unchangedToast: readonly number[]
}

export interface DeleteChange {
  readonly kind: 'delete'
  readonly relation: Relation
  /** 'full': the whole old row; 'key': replica identity columns, the others null. */
  readonly oldTuple: readonly TupleValue[]
  readonly oldTupleKind: OldTupleKind
}

export interface TruncateChange {
  readonly kind: 'truncate'
  readonly relations: readonly Relation[]
  readonly cascade: boolean
  readonly restartIdentity: boolean
}

export type Change = InsertChange | UpdateChange | DeleteChange | TruncateChange

/** A committed transaction, delivered whole. */
export interface Transaction {
  /** The 32-bit top-level xid (from Begin). */
  readonly xid: number
  /** Commit LSN (Begin's final LSN): the transaction's position, unique and increasing. */
  readonly lsn: bigint
  /** End of the commit record. */
  readonly endLsn: bigint
  /** Raw commit timestamp: microseconds since 2000-01-01 UTC. */
  readonly commitTime: bigint
  /** Replication origin name when the transaction was replayed from elsewhere. */
  readonly origin: string | undefined
  readonly changes: readonly Change[]
}

/** A change of a streamed transaction, tagged with the (sub)transaction that made it. */
export interface StreamedChange {
  readonly subxid: number
  readonly change: Change
}

export interface StreamCommit {
  readonly xid: number
  readonly lsn: bigint
  readonly endLsn: bigint
  readonly commitTime: bigint
}

/**
 * Why buffered changes of `xid` are void:
 * - 'aborted': Postgres rolled back the transaction (`subxid === xid`) or one
 *   subtransaction (`subxid !== xid`: drop only that subtransaction's changes,
 *   see `ChangeSink`);
 * - 'already-durable': a redelivered transaction that the durable watermark
 *   already covers (drop it all, it is stored);
 * - 'disconnected': the connection ended mid-transaction; Postgres sends the
 *   whole transaction again after reconnecting (drop it all).
 */
export type StreamAbortReason = 'aborted' | 'already-durable' | 'disconnected'

export interface StreamAbort {
  readonly xid: number
  readonly subxid: number
  readonly reason: StreamAbortReason
}

export type Awaitable = void | Promise<void>

/**
 * The consumer of the replication stream. The client awaits every returned
 * promise before it decodes the next message, so a slow sink is backpressure,
 * not a growing queue.
 *
 * Small transactions arrive whole through `onTransaction`, in commit order.
 *
 * Large ones arrive piecewise and must not be kept in memory:
 * Postgres (protocol 2) streams a transaction that outgrows
 * `logical_decoding_work_mem` before it commits, interleaved with other
 * transactions; the assembler does the same with a non-streamed transaction
 * that outgrows `maxTransactionBytes`. For those:
 *
 *   onStreamedChanges(xid, batch)*   batches in order, for one top-level xid;
 *                                    other xids' batches and whole
 *                                    transactions may come in between
 *   then exactly one of
 *   onStreamCommit({ xid, lsn, ... }) the buffered changes, in order, form a
 *                                    transaction committed at `lsn`
 *   onStreamAbort({ xid, xid, ... })  drop everything buffered for xid
 *
 *   and any number of onStreamAbort({ xid, subxid }) with subxid !== xid
 *   before that: a subtransaction rolled back.
 *
 * A `StreamBuffer` keeps those changes until the commit or abort (see
 * stream-buffer.ts); `BufferingSink` is the ChangeSink that does this and hands
 * on only committed transactions, to a `TransactionSink`.
 */
export interface ChangeSink {
  onTransaction(transaction: Transaction): Awaitable
  onStreamedChanges(xid: number, changes: readonly StreamedChange[]): Awaitable
  onStreamCommit(commit: StreamCommit): Awaitable
  onStreamAbort(abort: StreamAbort): Awaitable
  /**
   * A Relation message: `previous` is the description it replaces in this
   * stream's cache (see `relationChanged` to compare). Called before any change
   * that uses the new description.
   */
  onRelation?(relation: Relation, previous: Relation | undefined): Awaitable
  /** A logical decoding message (only when the client asked for `messages`). */
  onLogicalMessage?(message: LogicalMessage): Awaitable
}

/**
 * A committed transaction too big to hold whole (streamed by Postgres, or
 * outgrowing the assembler's `maxTransactionBytes`), read back from its
 * `StreamBuffer` in batches, in order. Iterate `batches` once; the buffer frees
 * the transaction's memory and files when the iteration ends, fails or stops.
 */
export interface BufferedTransaction {
  readonly xid: number
  readonly lsn: bigint
  readonly endLsn: bigint
  readonly commitTime: bigint
  readonly batches: AsyncIterable<readonly Change[]>
}

/**
 * The consumer of committed transactions (the shape router), in commit order:
 * small ones whole as an array, big ones as a sequence of batches. Whoever
 * delivers awaits every returned promise before the next transaction.
 */
export interface TransactionSink {
  onTransaction(transaction: Transaction): Awaitable
  onBufferedTransaction(transaction: BufferedTransaction): Promise<void>
  /** As `ChangeSink.onRelation`. */
  onRelation?(relation: Relation, previous: Relation | undefined): Awaitable
  onLogicalMessage?(message: LogicalMessage): Awaitable
}
