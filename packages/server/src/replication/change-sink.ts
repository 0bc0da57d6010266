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
 * How to buffer (the router spills to disk): keep one append-only file per
 * open xid; before appending the first change of a `subxid` not seen yet for
 * that xid, remember the file length as that subxid's start. A subtransaction
 * abort truncates the file at its start (if it has one): everything after the
 * first change of an aborted subtransaction belongs to it or to its own
 * children, because changes are streamed in WAL order and Postgres's own apply
 * worker relies on the same fact. On commit, read the file back in order as
 * one transaction at `lsn`; the transactions delivered whole before the commit
 * have smaller LSNs and those after larger ones, so commit order still holds.
 * `MemoryStreamBuffer` implements exactly this in memory, for tests and as a
 * reference.
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
