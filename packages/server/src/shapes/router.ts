import type { ReplicaMode, RowValues } from '@sluice/protocol'
import type { AppendOptions } from '@sluice/storage'
import type {
  Awaitable,
  Change,
  ChangeSink,
  DeleteChange,
  InsertChange,
  Relation,
  StreamAbort,
  StreamCommit,
  StreamedChange,
  Transaction,
  UpdateChange,
} from '../replication/index.js'
import type { WhereClause } from '../where/index.js'
import { ChangeEncoder, type EncodedLine } from './change-encoder.js'
import { LineScratch } from './line-scratch.js'
import { type RowMaker, rowMaker } from './row-maker.js'
import { ShapeIndex } from './shape-index.js'
import { type TableInfo, matchesRelation, tableDescription } from './table-catalog.js'

/**
 * The shape router (DESIGN.md §2, issue 3 items 6–8): the ChangeSink that
 * turns committed transactions into shape-log appends.
 *
 * For each change it finds the affected shapes through one `ShapeIndex` per
 * table, decides per shape whether an update is an update, an insert (the row
 * moved in) or a delete (it moved out), encodes each distinct (change, variant,
 * projection, last) line once and hands the same bytes to every shape that
 * takes it, then gives each shape its part of the transaction in one append.
 *
 * Where the parts go is the shape's `ShapeTarget`: its log (appends are
 * positional writes into the page cache, never a wait on disk), the snapshot
 * writer while its snapshot is finishing, or a queue while the snapshot runs.
 * So a shape that is slow to become ready never stalls routing for the others.
 *
 * Ordering: shapes join and leave only between transactions. A shape registered
 * while a transaction is being routed (a streamed one reads its changes back
 * from disk between awaits) starts with the next one, so no shape ever sees
 * part of a transaction.
 *
 * Large transactions never sit in memory: streamed changes go to a
 * `StreamStore` (the spill buffer) and are routed batch by batch at commit.
 * The `last: true` header is per shape, so each shape's latest line is held
 * back until the next batch shows whether it was the last.
 */

/**
 * One transaction's entries for one shape, or a piece of them (`more`): the
 * first `count` of `ops` and `jsons`, each entry at `<lsn>_<op>`. Parallel
 * arrays, not an object per entry: the storage engine takes them as they are
 * (`appendLines`).
 */
export interface TransactionPart {
  readonly lsn: bigint
  /** 32-bit xid from Begin: the snapshot stitching decides by it. */
  readonly xid: number
  readonly ops: readonly number[]
  readonly jsons: readonly Uint8Array[]
  readonly count: number
  /** Further parts of the same transaction follow. */
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
 * wrapper between the router and the log was one more memory round trip per
 * change (and a part object per append).
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
}

export type InvalidationKind = 'truncate' | 'schema_change' | 'table_replaced' | 'unroutable_change'

export interface Invalidation {
  readonly kind: InvalidationKind
  readonly schema: string
  readonly table: string
  /** Why, for logs and for the client-facing error. */
  readonly detail: string
  /** Commit LSN of the transaction that caused it, when one did. */
  readonly lsn?: bigint
}

/** The disk-backed buffer streamed transactions wait in until they commit (see the spill module). */
export interface StreamStore {
  append(xid: number, changes: readonly StreamedChange[]): Promise<void>
  abort(abort: StreamAbort): Promise<void>
  commit(xid: number): AsyncIterable<readonly Change[]>
}

export interface ShapeRouterOptions {
  /** The storage engine's `advance`: every transaction routed is promised to the store, kept or not. */
  readonly advance: (lsn: bigint) => void
  readonly streams: StreamStore
  /**
   * Shapes that can no longer follow their table (TRUNCATE, DDL, a table
   * replaced, a change that cannot be encoded). The router has already stopped
   * routing to them; the transaction is not promised to the store until this
   * resolves, so a crash before their removal is durable replays it.
   */
  readonly invalidate: (handles: readonly string[], reason: Invalidation) => Promise<void>
  /** How many recently routed xids to remember for the snapshot race check (see `RegistrationTicket`). */
  readonly recentXids?: number
  /** Where transaction and change numbers start again at 1 (MARK_WRAP; smaller only in tests). */
  readonly markWrap?: number
}

/**
 * Transaction and change numbers (a shape's marks) start again at 1 here, well
 * inside V8's small-integer range (below 2^30 with pointer compression). A
 * mark past it would be a heap number: every shape object's layout would
 * change on its next mark (100k migrations, and a boxed number per field from
 * then on), about 10^9 transactions into a server's life.
 */
export const MARK_WRAP = 2 ** 29

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

interface RoutedShape {
  readonly spec: RouteSpec
  readonly route: TableRoute
  readonly encoder: ChangeEncoder
  target: ShapeTarget
  /** Set while a transaction is being routed when the shape is being invalidated: take nothing more. */
  doomed: boolean
  /** The number of the last update whose old row (`oldRowMark`) or new row (`newRowMark`) the shape held (see routeChange). */
  oldRowMark: number
  newRowMark: number
  /**
   * Whether the shape took part in the transaction being routed (the one numbered `txnMark`, see
   * take), and its place in that transaction's `touched` list: where its items wait. One
   * transaction is routed at a time (the replication client awaits each).
   */
  txnMark: number
  txnSlot: number
}

interface TableRoute {
  readonly info: TableInfo
  readonly index: ShapeIndex<RoutedShape>
  readonly encoders: Map<string, { encoder: ChangeEncoder; users: number }>
  readonly shapes: Set<RoutedShape>
  /** Column names of the relation the cached `names` and `makeRow` were taken from. */
  relation: Relation | undefined
  names: readonly string[]
  makeRow: RowMaker
}

type Variant = 'insert' | 'update' | 'delete'

const NO_ITEMS: readonly Item[] = []
const NO_LINE = new Uint8Array(0)

/** Encoded lines of one change in one variant, for one encoder: [not last, last]. */
type LineSlot = [EncodedLine[] | undefined, EncodedLine[] | undefined]

/**
 * A change as its shapes take it, with its lines per encoder (column
 * projection). Most changes reach shapes of a single encoder, so the first
 * encoder's lines sit in a field and a Map is made only for a second one: a
 * Map per change was a measurable share of what routing allocates.
 */
class Item {
  private encoder: ChangeEncoder | undefined
  private slot: LineSlot | undefined
  private others: Map<ChangeEncoder, LineSlot> | undefined

  constructor(
    readonly change: InsertChange | UpdateChange | DeleteChange,
    readonly variant: Variant,
    readonly op: number,
  ) {}

  slotFor(encoder: ChangeEncoder): LineSlot {
    if (this.encoder === undefined) {
      this.encoder = encoder
      return (this.slot = [undefined, undefined])
    }
    if (this.encoder === encoder) return this.slot!
    this.others ??= new Map()
    let slot = this.others.get(encoder)
    if (slot === undefined) {
      slot = [undefined, undefined]
      this.others.set(encoder, slot)
    }
    return slot
  }
}

/**
 * Routing state of one transaction. Reused once the transaction is done
 * (`start` makes it another's): with one row per transaction, a new one with
 * its lists for each was a noticeable share of routing's garbage.
 */
class TxnRouting {
  /** Its number: what its shapes' `txnMark` says while they hold its items. */
  mark = 0
  lsn = 0n
  xid = 0
  nextIndex = 0
  /**
   * The shapes that took something, in the order they first did: the first
   * `count` entries. The three lists keep their length from transaction to
   * transaction (`clear` empties the slots): cutting a list's length to 0
   * dropped its store, so with one row per transaction each list grew a new
   * one for every transaction.
   */
  readonly touched: Array<RoutedShape | undefined> = []
  count = 0
  /**
   * Per touched shape (same index): the newest item, not yet emitted (whether it is the shape's
   * last is not known yet), and items known not to be its last, waiting for the next part.
   * Here, not on the shapes: a shape is an old object, and storing a new item in it on every
   * change gave each young-generation collection one more old page to scan (with 100k shapes,
   * a page per change); these lists are a few objects the collector finds together. And not in
   * Maps per transaction: a Map per transaction was a measurable share of routing's garbage.
   */
  readonly held: Array<Item | undefined> = []
  readonly pending: Array<Item[] | undefined> = []
  /** Tables truncated or otherwise invalidated by this transaction. */
  readonly invalidations: Array<{ route: TableRoute; reason: Invalidation }> = []
  /** Where its lines are encoded; reset once the transaction is done (no line outlives it: targets copy). */
  readonly lines = new LineScratch()

  start(mark: number, lsn: bigint, xid: number): this {
    this.mark = mark
    this.lsn = lsn
    this.xid = xid
    return this
  }

  /** Forgets the transaction (and the shapes it touched, so a removed shape is not kept alive). */
  clear(): void {
    this.nextIndex = 0
    const n = this.count
    const { touched, held, pending } = this
    // A loop, not fill(): with one row per transaction n is 1, and three builtin calls per transaction were 1.6% of the main thread (eq1 profile).
    for (let i = 0; i < n; i++) {
      touched[i] = undefined
      held[i] = undefined
      pending[i] = undefined
    }
    this.count = 0
    this.invalidations.length = 0
    this.lines.reset()
  }
}

export class ShapeRouter implements ChangeSink {
  private readonly tables = new Map<number, TableRoute>()
  /**
   * The shapes a row change reaches, refilled per change (`ShapeIndex.collect`); `oldHits` for an
   * update's old row. Entries past the last count are stale: emptied when a shape is removed.
   */
  private readonly hits: RoutedShape[] = []
  private readonly oldHits: RoutedShape[] = []
  private stamp = 0
  private txnCount = 0
  private readonly markWrap: number
  /** A part's entries, refilled for every shape (see TransactionPart). */
  private readonly ops: number[] = []
  private readonly jsons: Uint8Array[] = []
  /** `schema\0name` → table oid, to notice a dropped and recreated table. */
  private readonly byName = new Map<string, number>()
  private readonly shapes = new Map<string, RoutedShape>()
  /**
   * The last `recentLimit` xids routed, a ring: `recentNext` is where the next goes. Not an
   * array trimmed with shift(): at 256 entries that moved them all on every transaction.
   */
  private readonly recent: number[] = []
  private recentNext = 0
  private readonly recentLimit: number
  private busy = 0
  private boundaryWaiters: Array<() => void> = []
  private lastLsn = 0n
  private routedTransactions = 0
  /** Routing states not in use (one per transaction being routed; normally exactly one). */
  private readonly idle: TxnRouting[] = []

  constructor(private readonly options: ShapeRouterOptions) {
    this.recentLimit = Math.max(0, options.recentXids ?? 256)
    this.markWrap = options.markWrap ?? MARK_WRAP
  }

  /** Number of shapes routed to. */
  get size(): number {
    return this.shapes.size
  }

  /**
   * The xids of the last transactions routed (see `RegistrationTicket`): a
   * snapshot taken after this call must see every one of them.
   */
  get recentXids(): readonly number[] {
    return this.recentInOrder()
  }

  /** The ring's xids, oldest first. */
  private recentInOrder(): number[] {
    const { recent, recentNext } = this
    return recent.length < this.recentLimit ? [...recent] : [...recent.slice(recentNext), ...recent.slice(0, recentNext)]
  }

  /** Commit LSN of the last transaction routed. */
  get lastRoutedLsn(): bigint {
    return this.lastLsn
  }

  get transactionsRouted(): number {
    return this.routedTransactions
  }

  has(handle: string): boolean {
    return this.shapes.has(handle)
  }

  /**
   * Adds a shape. It takes effect between transactions: the promise resolves
   * once it has, and from then on every routed transaction reaches `target`.
   */
  async register(spec: RouteSpec, target: ShapeTarget): Promise<RegistrationTicket> {
    if (this.shapes.has(spec.handle)) throw new Error(`shape ${spec.handle} is already routed`)
    await this.boundary()
    if (this.shapes.has(spec.handle)) throw new Error(`shape ${spec.handle} is already routed`)
    this.add(spec, target)
    return { recentXids: this.recentInOrder(), lastRoutedLsn: this.lastLsn }
  }

  /** Adds a shape at once (restoring at startup, before replication runs). */
  add(spec: RouteSpec, target: ShapeTarget): void {
    const route = this.routeFor(spec.table)
    const encoderKey = `${spec.replica}\u0000${spec.columns === undefined ? '*' : spec.columns.join('\u0000')}`
    let shared = route.encoders.get(encoderKey)
    if (shared === undefined) {
      const encoder = new ChangeEncoder({ table: tableDescription(spec.table), columns: spec.columns, replica: spec.replica })
      shared = { encoder, users: 0 }
      route.encoders.set(encoderKey, shared)
    }
    shared.users++
    const shape: RoutedShape = {
      spec,
      route,
      encoder: shared.encoder,
      target,
      doomed: false,
      oldRowMark: 0,
      newRowMark: 0,
      txnMark: 0,
      txnSlot: 0,
    }
    this.shapes.set(spec.handle, shape)
    route.shapes.add(shape)
    route.index.add(shape, spec.where)
  }

  /** Sends the shape's next parts elsewhere (queue → snapshot writer → log). Synchronous, so no part falls between. */
  retarget(handle: string, target: ShapeTarget): void {
    const shape = this.shapes.get(handle)
    if (shape === undefined) throw new Error(`shape ${handle} is not routed`)
    shape.target = target
  }

  /** Stops routing to a shape at once. */
  remove(handle: string): boolean {
    const shape = this.shapes.get(handle)
    if (shape === undefined) return false
    // The reused hit lists may still name it (and so keep its target and log alive).
    this.hits.length = 0
    this.oldHits.length = 0
    shape.doomed = true
    this.shapes.delete(handle)
    const route = shape.route
    route.shapes.delete(shape)
    route.index.remove(shape)
    for (const [key, shared] of route.encoders) {
      if (shared.encoder === shape.encoder && --shared.users === 0) route.encoders.delete(key)
    }
    if (route.shapes.size === 0) {
      this.tables.delete(route.info.oid)
      const name = nameKey(route.info.schema, route.info.name)
      if (this.byName.get(name) === route.info.oid) this.byName.delete(name)
    }
    return true
  }

  /** Handles of the shapes on a table (by oid). */
  handlesOf(oid: number): string[] {
    const route = this.tables.get(oid)
    return route === undefined ? [] : [...route.shapes].map((s) => s.spec.handle)
  }

  // ---- ChangeSink ----

  onRelation(relation: Relation): Awaitable {
    const invalidations: Array<{ route: TableRoute; reason: Invalidation }> = []
    const route = this.tables.get(relation.id)
    if (route !== undefined && !matchesRelation(route.info, relation)) {
      invalidations.push({
        route,
        reason: {
          kind: 'schema_change',
          schema: route.info.schema,
          table: route.info.name,
          detail: `the schema of ${qualified(route.info.schema, route.info.name)} changed`,
        },
      })
    }
    // Same name, another oid: the table the shapes follow was dropped and this one created in its place.
    const oid = this.byName.get(nameKey(relation.schema, relation.table))
    const replaced = oid === undefined || oid === relation.id ? undefined : this.tables.get(oid)
    if (replaced !== undefined) {
      invalidations.push({
        route: replaced,
        reason: {
          kind: 'table_replaced',
          schema: relation.schema,
          table: relation.table,
          detail: `${qualified(relation.schema, relation.table)} was dropped and created again`,
        },
      })
    }
    if (invalidations.length === 0) return undefined
    return this.exclusive(async () => {
      for (const { route: r, reason } of invalidations) await this.invalidateRoute(r, reason)
    })
  }

  onTransaction(transaction: Transaction): Awaitable {
    this.busy++
    let sync = true
    const txn = this.begin(transaction.lsn, transaction.xid)
    try {
      this.routeBatch(txn, transaction.changes)
      this.emitLast(txn)
      if (txn.invalidations.length > 0) {
        sync = false
        return this.finishAsync(txn)
      }
      this.finish(txn)
      return undefined
    } finally {
      if (sync) this.release(txn)
    }
  }

  onStreamedChanges(xid: number, changes: readonly StreamedChange[]): Awaitable {
    return this.options.streams.append(xid, changes)
  }

  onStreamAbort(abort: StreamAbort): Awaitable {
    return this.options.streams.abort(abort)
  }

  async onStreamCommit(commit: StreamCommit): Promise<void> {
    this.busy++
    const txn = this.begin(commit.lsn, commit.xid)
    try {
      for await (const batch of this.options.streams.commit(commit.xid)) {
        this.routeBatch(txn, batch)
        this.emitAllButLast(txn)
      }
      this.emitLast(txn)
      await this.settle(txn)
      this.finish(txn)
    } finally {
      this.release(txn)
    }
  }

  // ---- routing ----

  private routeBatch(txn: TxnRouting, changes: readonly Change[]): void {
    for (const change of changes) {
      const index = txn.nextIndex++
      if (change.kind === 'truncate') {
        this.noteTruncate(txn, change.relations)
        continue
      }
      const route = this.tables.get(change.relation.id)
      if (route === undefined || route.shapes.size === 0) continue
      // Electric's op positions count by 2 per change of the transaction, leaving op+1 for a key change's insert half.
      const op = index * 2
      this.routeChange(txn, route, change, op)
    }
  }

  private routeChange(txn: TxnRouting, route: TableRoute, change: InsertChange | UpdateChange | DeleteChange, op: number): void {
    this.followRelation(route, change.relation)
    const { names, makeRow } = route
    const hits = this.hits
    if (change.kind === 'insert' || change.kind === 'delete') {
      const insert = change.kind === 'insert'
      const count = route.index.collect(makeRow(insert ? change.newTuple : change.oldTuple), hits)
      if (count === 0) return
      const item = new Item(change, insert ? 'insert' : 'delete', op)
      for (let i = 0; i < count; i++) this.take(txn, hits[i]!, item)
      return
    }
    const newRow = makeRow(change.newTuple)
    const oldRow = oldRowOf(names, makeRow, change, newRow)
    const inNew = route.index.collect(newRow, hits)
    if (oldRow === newRow) {
      if (inNew === 0) return
      const update = new Item(change, 'update', op)
      for (let i = 0; i < inNew; i++) this.take(txn, hits[i]!, update)
      return
    }
    const oldHits = this.oldHits
    const inOld = route.index.collect(oldRow, oldHits)
    if (inNew === 0 && inOld === 0) return
    // Membership by stamp: the shapes of both sides marked with this change's number.
    if (this.stamp >= this.markWrap) this.restartStamps()
    const stamp = ++this.stamp
    for (let i = 0; i < inOld; i++) oldHits[i]!.oldRowMark = stamp
    let update: Item | undefined
    let moveIn: Item | undefined
    let moveOut: Item | undefined
    for (let i = 0; i < inNew; i++) {
      const shape = hits[i]!
      shape.newRowMark = stamp
      if (shape.oldRowMark === stamp) {
        update ??= new Item(change, 'update', op)
        this.take(txn, shape, update)
      } else {
        moveIn ??= new Item({ kind: 'insert', relation: change.relation, newTuple: change.newTuple }, 'insert', op)
        this.take(txn, shape, moveIn)
      }
    }
    for (let i = 0; i < inOld; i++) {
      const shape = oldHits[i]!
      if (shape.newRowMark === stamp) continue
      moveOut ??= new Item(movedOut(change), 'delete', op)
      this.take(txn, shape, moveOut)
    }
  }

  /** Gives `item` to `shape`, emitting the shape's previously held item (which is now known not to be its last). */
  private take(txn: TxnRouting, shape: RoutedShape, item: Item): void {
    if (shape.doomed) return
    if (shape.txnMark !== txn.mark) {
      shape.txnMark = txn.mark
      const slot = txn.count++
      shape.txnSlot = slot
      if (slot < txn.touched.length) {
        txn.touched[slot] = shape
        txn.held[slot] = item
      } else {
        txn.touched.push(shape)
        txn.held.push(item)
        txn.pending.push(undefined)
      }
      return
    }
    const i = shape.txnSlot
    const previous = txn.held[i]
    txn.held[i] = item
    if (previous === undefined) return
    const pending = txn.pending[i]
    if (pending === undefined) txn.pending[i] = [previous]
    else pending.push(previous)
  }

  /** After a batch of a streamed transaction: everything but each shape's held item goes out as a `more` part. */
  private emitAllButLast(txn: TxnRouting): void {
    const { touched, pending, count } = txn
    for (let i = 0; i < count; i++) {
      const items = pending[i]
      if (items === undefined) continue
      pending[i] = undefined
      const shape = touched[i]!
      if (!shape.doomed) this.deliver(txn, shape, items, undefined, true)
    }
  }

  /** End of the transaction: each shape's held item is its last line. */
  private emitLast(txn: TxnRouting): void {
    const { touched, held, pending, count } = txn
    for (let i = 0; i < count; i++) {
      const last = held[i]
      const items = pending[i] ?? NO_ITEMS
      held[i] = undefined
      pending[i] = undefined
      const shape = touched[i]!
      if (shape.doomed || last === undefined) continue
      this.deliver(txn, shape, items, last, false)
    }
  }

  private deliver(txn: TxnRouting, shape: RoutedShape, items: readonly Item[], last: Item | undefined, more: boolean): void {
    let count = 0
    try {
      for (const item of items) count = this.encodeInto(count, txn, shape, item, false)
      if (last !== undefined) count = this.encodeInto(count, txn, shape, last, true)
    } catch (error) {
      // A change this shape cannot encode (an unchanged-TOAST value without REPLICA IDENTITY FULL, a malformed
      // tuple): the shape can no longer be kept exact, so it is invalidated rather than stalling replication.
      const info = shape.spec.table
      txn.invalidations.push({
        route: shape.route,
        reason: {
          kind: 'unroutable_change',
          schema: info.schema,
          table: info.name,
          detail: error instanceof Error ? error.message : String(error),
          lsn: txn.lsn,
        },
      })
      this.doom(txn, shape.route)
      return
    }
    if (count === 0) return
    const jsons = this.jsons
    shape.target.appendLines(txn.lsn, this.ops, jsons, count, more ? MORE_PARTS : undefined, txn.xid)
    // The lines are views of the transaction's scratch memory: not kept alive by a stale slot.
    for (let i = 0; i < count; i++) jsons[i] = NO_LINE
  }

  /** Puts the item's lines for this shape's encoder into `ops`/`jsons` from `count` on; returns the new count. */
  private encodeInto(count: number, txn: TxnRouting, shape: RoutedShape, item: Item, last: boolean): number {
    const slot = item.slotFor(shape.encoder)
    const at = last ? 1 : 0
    let lines = slot[at]
    if (lines === undefined) {
      lines = shape.encoder.encode(item.change, { lsn: txn.lsn, op: item.op, txid: txn.xid, last }, txn.lines)
      slot[at] = lines
    }
    const { ops, jsons } = this
    for (const line of lines) {
      ops[count] = line.op
      jsons[count] = line.bytes
      count++
    }
    return count
  }

  private noteTruncate(txn: TxnRouting, relations: readonly Relation[]): void {
    for (const relation of relations) {
      const route = this.tables.get(relation.id)
      if (route === undefined) continue
      txn.invalidations.push({
        route,
        reason: {
          kind: 'truncate',
          schema: route.info.schema,
          table: route.info.name,
          detail: `${qualified(route.info.schema, route.info.name)} was truncated`,
          lsn: txn.lsn,
        },
      })
      this.doom(txn, route)
    }
  }

  /** Stops every shape of a table from taking more of the current transaction. */
  private doom(txn: TxnRouting, route: TableRoute): void {
    for (const shape of route.shapes) {
      shape.doomed = true
      if (shape.txnMark === txn.mark) {
        txn.held[shape.txnSlot] = undefined
        txn.pending[shape.txnSlot] = undefined
      }
    }
  }

  private async finishAsync(txn: TxnRouting): Promise<void> {
    try {
      await this.settle(txn)
      this.finish(txn)
    } finally {
      this.release(txn)
    }
  }

  private async settle(txn: TxnRouting): Promise<void> {
    for (const { route, reason } of txn.invalidations) await this.invalidateRoute(route, reason)
  }

  private finish(txn: TxnRouting): void {
    if (this.recentLimit > 0) {
      this.recent[this.recentNext] = txn.xid
      this.recentNext = this.recentNext + 1 === this.recentLimit ? 0 : this.recentNext + 1
    }
    if (txn.lsn > this.lastLsn) this.lastLsn = txn.lsn
    this.routedTransactions++
    this.options.advance(txn.lsn)
  }

  private async invalidateRoute(route: TableRoute, reason: Invalidation): Promise<void> {
    const handles = [...route.shapes].map((s) => s.spec.handle)
    if (handles.length === 0) return
    for (const handle of handles) this.remove(handle)
    await this.options.invalidate(handles, reason)
  }

  // ---- bookkeeping ----

  private routeFor(info: TableInfo): TableRoute {
    const existing = this.tables.get(info.oid)
    if (existing !== undefined) return existing
    const names = info.columns.map((c) => c.name)
    const route: TableRoute = {
      info,
      index: new ShapeIndex(),
      encoders: new Map(),
      shapes: new Set(),
      relation: undefined,
      names,
      makeRow: rowMaker(names),
    }
    this.tables.set(info.oid, route)
    this.byName.set(nameKey(info.schema, info.name), info.oid)
    return route
  }

  /** Takes the column names (and the row maker) from the relation the change names, when it is a new one. */
  private followRelation(route: TableRoute, relation: Relation): void {
    if (route.relation === relation) return
    route.relation = relation
    route.names = relation.columns.map((c) => c.name)
    route.makeRow = rowMaker(route.names)
  }

  /** Runs `work` as if it were a transaction: registrations wait for it. */
  private async exclusive(work: () => Promise<void>): Promise<void> {
    this.busy++
    try {
      await work()
    } finally {
      this.release()
    }
  }

  private begin(lsn: bigint, xid: number): TxnRouting {
    // Only while no other routing is under way: its shapes' marks still name it.
    if (this.txnCount >= this.markWrap && this.busy === 1) this.restartTxnMarks()
    return (this.idle.pop() ?? new TxnRouting()).start(++this.txnCount, lsn, xid)
  }

  private restartTxnMarks(): void {
    for (const shape of this.shapes.values()) shape.txnMark = 0
    this.txnCount = 0
  }

  /** A stamp means something only within one change: any moment between two is a safe one to restart them. */
  private restartStamps(): void {
    for (const shape of this.shapes.values()) {
      shape.oldRowMark = 0
      shape.newRowMark = 0
    }
    this.stamp = 0
  }

  /** Ends routing work; a transaction's lines die with it. */
  private release(txn?: TxnRouting): void {
    if (txn !== undefined) {
      txn.clear()
      this.idle.push(txn)
    }
    this.busy--
    if (this.busy === 0 && this.boundaryWaiters.length > 0) {
      const waiters = this.boundaryWaiters
      this.boundaryWaiters = []
      for (const wake of waiters) wake()
    }
  }

  private boundary(): Promise<void> {
    if (this.busy === 0) return Promise.resolve()
    return new Promise((resolve) => this.boundaryWaiters.push(resolve))
  }
}

function nameKey(schema: string, name: string): string {
  return `${schema}\u0000${name}`
}

function qualified(schema: string, name: string): string {
  return `${JSON.stringify(schema)}.${JSON.stringify(name)}`
}

/**
 * The row before an update, for deciding which shapes held it. With a full old
 * row (REPLICA IDENTITY FULL, which Sluice sets) that is it; with only the key
 * logged, the new row with the old key; with nothing logged (the key did not
 * change), the new row.
 */
function oldRowOf(names: readonly string[], makeRow: RowMaker, change: UpdateChange, newRow: RowValues): RowValues {
  const old = change.oldTuple
  if (old === undefined) return newRow
  if (change.oldTupleKind === 'full') return makeRow(old)
  const row: Record<string, string | null> = { ...newRow }
  change.relation.keyColumns.forEach((i) => {
    const value = old[i]
    row[names[i] as string] = typeof value === 'string' ? value : null
  })
  return row
}

/** The delete a shape gets when an update moves the row out of it. */
function movedOut(change: UpdateChange): DeleteChange {
  if (change.oldTuple !== undefined && change.oldTupleKind !== undefined) {
    return { kind: 'delete', relation: change.relation, oldTuple: change.oldTuple, oldTupleKind: change.oldTupleKind }
  }
  // Nothing logged: the key did not change, so the new row names the same row.
  return { kind: 'delete', relation: change.relation, oldTuple: change.newTuple, oldTupleKind: 'key' }
}
