import type { ReplicaMode } from '@sluice/protocol'
import type { AppendOptions } from '@sluice/storage'
import type { WhereClause } from '../where/index.js'
import type { TableInfo } from './table-catalog.js'
import type { ViewRouting } from './view-index.js'

/*
 * What the shape router promises its neighbours: what a shape's target
 * receives, how a shape is described when it joins, and what an invalidation
 * says. The router's input is the replication stage's `TransactionSink`.
 */

/**
 * One transaction's entries for one shape, or a piece of them (`more`): the
 * first `count` of `ops` and `jsons`, each entry at `<lsn>_<op>`. Parallel
 * arrays, not an object per entry: the storage engine takes them as they are
 * (`appendLines`). Queued for a shape whose snapshot is not finished
 * (`transactionPartCodec`).
 */
export interface TransactionPart {
  /** Commit LSN of the transaction: every entry sits at `<lsn>_<op>`. */
  readonly lsn: bigint
  /** 32-bit top-level xid from Begin: the snapshot stitching decides by it. */
  readonly xid: number
  /** Increasing within a part. */
  readonly ops: readonly number[]
  /** JSON lines, no separator. */
  readonly jsons: readonly Uint8Array[]
  readonly count: number
  /** Further parts of the same transaction follow (as `appendLines`' `more` option). */
  readonly more: boolean
}

/** The options of a part that further parts of the same transaction follow. */
export const MORE_PARTS: AppendOptions = Object.freeze({ more: true })

/**
 * Where a shape's routed transactions go: one `TransactionPart`, as arguments
 * (`options` carries `more`). Synchronous: it never makes routing wait. The
 * arrays are valid only during the call: the router refills them for the next
 * shape and reuses the lines' memory for the next transaction. A target that
 * keeps any of it must copy it.
 *
 * The storage engine's `ShapeLog` and `SnapshotWriter` are targets as they
 * are (their `appendLines` ignores `xid`): with 100k shapes each change
 * reaches a shape whose objects are all out of the CPU's caches, and a
 * wrapper between the router and the log would be one more memory round trip
 * per change (and a part object per append).
 */
export interface ShapeTarget {
  appendLines(lsn: bigint, ops: readonly number[], jsons: readonly Uint8Array[], count: number, options: AppendOptions | undefined, xid: number): unknown
}

export interface RouteSpec {
  /** The shape's handle: its identity here. */
  readonly handle: string
  readonly table: TableInfo
  readonly where: WhereClause | undefined
  /** Selected columns; undefined for all. */
  readonly columns: readonly string[] | undefined
  readonly replica: ReplicaMode
  /**
   * A subquery shape's outer table: filed under its views' values instead of
   * `where` (view-index.ts). The shape judges each row itself, so an update
   * reaching it on either side arrives as the update, never split.
   */
  readonly views?: ViewRouting
}

/** 'table_dropped': the table was dropped or renamed (see catalogChanged). */
export type InvalidationKind = 'truncate' | 'schema_change' | 'table_replaced' | 'table_dropped' | 'unroutable_change'

export interface Invalidation {
  readonly kind: InvalidationKind
  readonly schema: string
  readonly table: string
  /** Why, for logs and for the client-facing error. */
  readonly detail: string
  /** Commit LSN of the transaction that caused it, when one did. */
  readonly lsn?: bigint
}

/**
 * Given when a registration takes effect. `recentXids` are the last
 * transactions routed before it: a snapshot taken afterwards must see every
 * one of them, or a commit slipped between the walsender sending it and its
 * backend publishing it (Postgres flushes the commit record before it clears
 * the transaction from the proc array), and the snapshot must be retaken.
 */
export interface RegistrationTicket {
  readonly recentXids: readonly number[]
  /** Commit LSN of the last transaction routed before the shape joined. */
  readonly lastRoutedLsn: bigint
}

export interface ShapeRouterOptions {
  /** The storage engine's `advance`: every transaction routed is promised to the store, kept or not. */
  readonly advance: (lsn: bigint) => void
  /**
   * Shapes that can no longer follow their table (TRUNCATE, DDL, a table
   * replaced, a change that cannot be encoded). The router has already stopped
   * routing to them; the transaction is not promised to the store until this
   * resolves, so a crash before their removal is durable replays it.
   */
  readonly invalidate: (handles: readonly string[], reason: Invalidation) => Promise<void>
  /**
   * Asks the catalog whether a table the router routes for is still the one
   * its shapes were made for, when a Relation message for it arrives that
   * matches it (a primary-key change under REPLICA IDENTITY FULL sends the very
   * same description): an invalidation when it is not. Routing waits for the
   * answer, so the change that follows the message reaches no stale shape.
   */
  readonly verifyTable?: (info: TableInfo) => Promise<Invalidation | undefined>
  /** How many recently routed xids to remember for the snapshot race check (see `RegistrationTicket`). */
  readonly recentXids?: number
  /** Where transaction and change numbers start again at 1 (MARK_WRAP; smaller only in tests). */
  readonly markWrap?: number
  /**
   * Between two batches of a buffered transaction: a promise to wait for before
   * the next batch, or undefined to go on. The pipeline waits here while the
   * store's tails are past their budget, and while a shape's write-back or the
   * journal's flush has fallen behind the appends. Pausing the replication stream cannot
   * hold such a transaction back (it is read from its spill file, not the
   * stream), and routed faster than write-backs take its tails to the files,
   * one log's tail grew to the whole transaction.
   */
  readonly holdBack?: () => Promise<void> | undefined
}

/**
 * Transaction and change numbers (a shape's marks) start again at 1 here, well
 * inside V8's small-integer range (below 2^30 with pointer compression). A
 * mark past it would be a heap number: every shape object's layout would
 * change on its next mark (100k migrations, and a boxed number per field from
 * then on), about 10^9 transactions into a server's life.
 */
export const MARK_WRAP = 2 ** 29
