// One concern, kept in one file past 500 lines: taking a committed transaction
// to the shapes it touches. The whole, the batched (spilled) and the routed-ahead
// (streamed) paths and invalidation all share one per-transaction state (`TxnRouting`)
// and the router's reusable scratch arrays, and must agree on one order of
// joins, leaves and promises to the store; split by path, each file would reach
// into the others' private state. What stands alone lives beside it:
// route-contracts.ts, table-route.ts, txn-routing.ts, shape-index.ts,
// recent-xids.ts, invalidation.ts, router-hooks.ts (what subquery shapes hook in).
import type {
  Awaitable,
  BufferedTransaction,
  Change,
  DeleteChange,
  InsertChange,
  LogicalMessage,
  Relation,
  StreamedChange,
  Transaction,
  TransactionSink,
  UpdateChange,
} from '../replication/index.js'
import { schemaChanged, tableReplaced, truncated, unroutable } from './invalidation.js'
import { RecentXids } from './recent-xids.js'
import { RouterHooks } from './router-hooks.js'
import {
  type Invalidation,
  MARK_WRAP,
  MORE_PARTS,
  type RegistrationTicket,
  type RouteSpec,
  type ShapeRouterOptions,
  type ShapeTarget,
} from './route-contracts.js'
import { matchesRelation } from './table-catalog.js'
import { type RoutedShape, type TableRoute, followRelation, joinRoute, leaveRoute, movedOut, newTableRoute, oldRowOf } from './table-route.js'
import { Item, NO_ITEMS, type RouteInvalidation, TxnRouting } from './txn-routing.js'

export { MARK_WRAP, MORE_PARTS } from './route-contracts.js'
export type {
  Invalidation,
  InvalidationKind,
  RegistrationTicket,
  RouteSpec,
  ShapeRouterOptions,
  ShapeTarget,
  TransactionPart,
} from './route-contracts.js'

const NO_LINE = new Uint8Array(0)

/** One shape's lines of a transaction routed ahead (see `routeAhead`), now with their commit LSN. */
export interface AheadPart {
  readonly shape: RoutedShape
  readonly ops: readonly number[]
  readonly jsons: readonly Uint8Array[]
  readonly count: number
  /** More of this shape's lines follow in a later batch. */
  readonly more: boolean
}

/** Hears every shape that joins a table (by oid), as it joins. */
export type JoinListener = (oid: number) => void

/**
 * The shape router (docs/architecture.md §2): the TransactionSink that turns committed
 * transactions into shape-log appends.
 *
 * For each change it finds the affected shapes through one `ShapeIndex` per
 * table (table-route.ts), decides per shape whether an update is an update, an
 * insert (the row moved in) or a delete (it moved out), encodes each distinct
 * (change, variant, projection, last) line once and hands the same bytes to
 * every shape that takes it, then gives each shape its part of the transaction
 * in one append.
 *
 * Where the parts go is the shape's `ShapeTarget`: its log (appends are
 * positional writes into the page cache, never a wait on disk), the snapshot
 * writer while its snapshot is finishing, or a queue while the snapshot runs.
 * So a shape that is slow to become ready never stalls routing for the others.
 *
 * Ordering: shapes join and leave only between transactions. A shape registered
 * while a transaction is being routed (a buffered one is read back between
 * awaits) starts with the next one, so no shape ever sees part of a
 * transaction.
 *
 * A small transaction arrives whole and is routed in one synchronous walk of
 * its array. A big one arrives as a sequence of batches read back from its
 * stream buffer; the `last: true` header is per shape, so each shape's latest
 * line is held back until the next batch shows whether it was the last.
 */
export class ShapeRouter implements TransactionSink {
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
  private readonly recent: RecentXids
  private busy = 0
  /** Work waiting for no routing to be under way (`retargetBetween`, `boundary`), run by `release`. */
  private boundaryTasks: Array<() => void> = []
  private lastLsn = 0n
  private routedTransactions = 0
  /** Routing states not in use (one per transaction being routed; normally exactly one). */
  private readonly idle: TxnRouting[] = []
  private readonly joinListeners = new Set<JoinListener>()
  private routedAheadCount = 0
  private readonly hooks: RouterHooks

  constructor(private readonly options: ShapeRouterOptions) {
    this.recent = new RecentXids(Math.max(0, options.recentXids ?? 256))
    this.markWrap = options.markWrap ?? MARK_WRAP
    this.hooks = new RouterHooks(options.advance)
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
    return this.recent.inOrder()
  }

  /** Commit LSN of the last transaction routed. */
  get lastRoutedLsn(): bigint {
    return this.lastLsn
  }

  get transactionsRouted(): number {
    return this.routedTransactions
  }

  /** Of `transactionsRouted`, those delivered from lines routed while they streamed in (`onAheadTransaction`). */
  get transactionsRoutedAhead(): number {
    return this.routedAheadCount
  }

  /** `listener` hears each shape that joins from now on; returns the unsubscribe. */
  onJoin(listener: JoinListener): () => void {
    this.joinListeners.add(listener)
    return () => this.joinListeners.delete(listener)
  }

  has(handle: string): boolean {
    return this.shapes.has(handle)
  }

  /**
   * Adds a shape. It takes effect between transactions: the promise resolves
   * once it has, and from then on every routed transaction reaches `target`.
   */
  async register(spec: RouteSpec, target: ShapeTarget, companions: readonly { readonly spec: RouteSpec; readonly target: ShapeTarget }[] = []): Promise<RegistrationTicket> {
    if (this.shapes.has(spec.handle)) throw new Error(`shape ${spec.handle} is already routed`)
    await this.boundary()
    if (this.shapes.has(spec.handle)) throw new Error(`shape ${spec.handle} is already routed`)
    this.add(spec, target)
    // A subquery shape's inner tables join in the same instant as its outer one: no transaction sees half of them.
    for (const companion of companions) this.add(companion.spec, companion.target)
    return { recentXids: this.recent.inOrder(), lastRoutedLsn: this.lastLsn }
  }

  /** Stops promising routed transactions to the store until the returned release (router-hooks.ts). */
  holdAdvance(): (wroteAt?: bigint) => void {
    return this.hooks.hold()
  }

  /** Whether a hold (`holdAdvance`) keeps routed transactions from the store. */
  get advanceHeld(): boolean {
    return this.hooks.held
  }

  /** `listener` hears every logical decoding message (pg_logical_emit_message), in stream order; returns the unsubscribe. */
  onMessage(listener: (message: LogicalMessage) => void): () => void {
    return this.hooks.onMessage(listener)
  }

  onLogicalMessage(message: LogicalMessage): Awaitable {
    this.hooks.message(message)
    return undefined
  }

  /** Runs `fn` once the transaction being routed has reached every target, before it is promised to the store. */
  atCommit(fn: (lsn: bigint, xid: number) => void): void {
    this.hooks.atCommit(fn)
  }

  /** Adds a shape at once (restoring at startup, before replication runs). */
  add(spec: RouteSpec, target: ShapeTarget): void {
    this.shapes.set(spec.handle, joinRoute(this.routeFor(spec.table), spec, target))
    for (const listener of this.joinListeners) listener(spec.table.oid)
  }

  /** Sends the shape's next parts elsewhere (queue → snapshot writer → log). Synchronous, so no part falls between. */
  retarget(handle: string, target: ShapeTarget): void {
    const shape = this.shapes.get(handle)
    if (shape === undefined) throw new Error(`shape ${handle} is not routed`)
    shape.target = target
  }

  /** Where the shape's parts go now. */
  targetOf(handle: string): ShapeTarget | undefined {
    return this.shapes.get(handle)?.target
  }

  /**
   * Retargets between transactions (no transaction being routed, so every one
   * routed so far went whole to the old target and has been advanced): `make`
   * gets the current target and returns the next, or undefined to leave it.
   * False when the shape is not routed (any more).
   */
  retargetBetween(handle: string, make: (current: ShapeTarget) => ShapeTarget | undefined): Promise<boolean> {
    return new Promise((resolve, reject) => {
      const run = (): void => {
        try {
          const shape = this.shapes.get(handle)
          const next = shape === undefined ? undefined : make(shape.target)
          if (next !== undefined) shape!.target = next
          resolve(next !== undefined)
        } catch (error) {
          reject(error)
        }
      }
      // Run by `release` in the step that ends the routing under way: awaiting a boundary and checking again could starve behind back-to-back asynchronous transactions.
      if (this.busy === 0) run()
      else this.boundaryTasks.push(run)
    })
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
    if (leaveRoute(shape)) {
      const info = shape.route.info
      this.tables.delete(info.oid)
      const name = nameKey(info.schema, info.name)
      if (this.byName.get(name) === info.oid) this.byName.delete(name)
    }
    return true
  }

  /** Handles of the shapes on a table (by oid). */
  handlesOf(oid: number): string[] {
    const route = this.tables.get(oid)
    return route === undefined ? [] : [...route.shapes].map((s) => s.spec.handle)
  }

  /**
   * Handles of the shapes a row of a table (by oid) reaches now: what the
   * index hands the router for it, before any shape judges it.
   */
  candidatesFor(oid: number, row: Readonly<Record<string, string | null>>): string[] {
    const route = this.tables.get(oid)
    if (route === undefined) return []
    return [...route.index.affected(row)].map((s) => s.spec.handle)
  }

  // ---- TransactionSink ----

  onRelation(relation: Relation): Awaitable {
    const invalidations: RouteInvalidation[] = []
    const route = this.tables.get(relation.id)
    let unchanged: TableRoute | undefined
    if (route !== undefined) {
      if (matchesRelation(route.info, relation)) unchanged = route
      else invalidations.push({ route, reason: schemaChanged(route.info) })
    }
    // Same name, another oid: the table the shapes follow was dropped and this one created in its place.
    const oid = this.byName.get(nameKey(relation.schema, relation.table))
    const replaced = oid === undefined || oid === relation.id ? undefined : this.tables.get(oid)
    if (replaced !== undefined) invalidations.push({ route: replaced, reason: tableReplaced(relation) })
    // The message matches, yet Postgres sent it again: some DDL touched the table (or the connection is new).
    const verify = this.options.verifyTable
    if (unchanged !== undefined && verify !== undefined) return this.exclusive(invalidations, { route: unchanged, verify })
    if (invalidations.length === 0) return undefined
    return this.exclusive(invalidations)
  }

  /** A small transaction, whole: one synchronous walk of its changes. */
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

  /** A big transaction, batch by batch as its stream buffer reads it back. */
  async onBufferedTransaction(transaction: BufferedTransaction): Promise<void> {
    this.busy++
    const txn = this.begin(transaction.lsn, transaction.xid)
    try {
      for await (const batch of transaction.batches) {
        const hold = this.options.holdBack?.()
        if (hold !== undefined) await hold
        this.routeBatch(txn, batch)
        this.emitAllButLast(txn)
        txn.reuseLines()
      }
      this.emitLast(txn)
      await this.settle(txn)
      this.finish(txn)
    } finally {
      this.release(txn)
    }
  }

  /**
   * Routes changes of a transaction that has not committed yet (streamed in)
   * to today's shapes, and hands each shape's encoded lines to `take`, in
   * order, with LSN 0 in place of the unknown commit LSN and none marked last
   * (routed-ahead.ts splices both in at the commit). `firstIndex` is the
   * transaction's number of changes before these (op positions count from
   * it). Nothing is appended and no shape is touched for good: a change that
   * cannot be routed this way (a truncate, a line that fails to encode) makes
   * it return undefined, and the transaction is routed at its commit as usual.
   * Otherwise it returns the index after the last change.
   */
  routeAhead(xid: number, firstIndex: number, changes: readonly StreamedChange[], take: (shape: RoutedShape, op: number, line: Uint8Array) => void): number | undefined {
    for (const { change } of changes) {
      if (change.kind === 'truncate') return undefined
      // Shapes filed by their views may narrow or broaden before this transaction commits: it is routed then.
      if (this.tables.get(change.relation.id)?.index.views.size) return undefined
    }
    this.busy++
    const txn = this.begin(0n, xid)
    txn.nextIndex = firstIndex
    try {
      this.routeBatch(txn, changes.map((streamed) => streamed.change))
      const { touched, held, pending, count } = txn
      for (let i = 0; i < count; i++) {
        const shape = touched[i]!
        if (shape.doomed) continue
        for (const item of pending[i] ?? NO_ITEMS) this.aheadLines(txn, shape, item, take)
        const last = held[i]
        if (last !== undefined) this.aheadLines(txn, shape, last, take)
      }
      return txn.nextIndex
    } catch {
      return undefined
    } finally {
      this.release(txn)
    }
  }

  private aheadLines(txn: TxnRouting, shape: RoutedShape, item: Item, take: (shape: RoutedShape, op: number, line: Uint8Array) => void): void {
    const slot = item.slotFor(shape.encoder)
    let lines = slot[0]
    if (lines === undefined) {
      lines = shape.encoder.encode(item.change, { lsn: 0n, op: item.op, txid: txn.xid, last: false }, txn.lines)
      slot[0] = lines
    }
    for (const line of lines) take(shape, line.op, line.bytes)
  }

  /**
   * A committed transaction routed ahead (`routeAhead`): its shapes' lines,
   * batch by batch, each line already carrying the commit LSN and each shape's
   * last line marked. Shapes that left meanwhile are skipped; shapes join only
   * after it, as with any transaction.
   */
  async onAheadTransaction(lsn: bigint, xid: number, batches: AsyncIterable<readonly AheadPart[]>): Promise<void> {
    this.busy++
    const txn = this.begin(lsn, xid)
    try {
      for await (const parts of batches) {
        const hold = this.options.holdBack?.()
        if (hold !== undefined) await hold
        for (const part of parts) {
          if (!part.shape.doomed) part.shape.target.appendLines(lsn, part.ops, part.jsons, part.count, part.more ? MORE_PARTS : undefined, xid)
        }
      }
      this.finish(txn)
      this.routedAheadCount++
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
    followRelation(route, change.relation)
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
      if (shape.oldRowMark === stamp || shape.whole) {
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
      if (shape.whole) {
        update ??= new Item(change, 'update', op)
        this.take(txn, shape, update)
        continue
      }
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

  /** After a batch of a buffered transaction: everything but each shape's held item goes out as a `more` part. */
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
      // The shape can no longer be kept exact: it is invalidated rather than stalling replication.
      txn.invalidations.push({ route: shape.route, reason: unroutable(shape.spec.table, error, txn.lsn) })
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

  // ---- invalidation ----

  private noteTruncate(txn: TxnRouting, relations: readonly Relation[]): void {
    for (const relation of relations) {
      const route = this.tables.get(relation.id)
      if (route === undefined) continue
      txn.invalidations.push({ route, reason: truncated(route.info, txn.lsn) })
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

  private async settle(txn: TxnRouting): Promise<void> {
    for (const { route, reason } of txn.invalidations) await this.invalidateRoute(route, reason)
  }

  private async invalidateRoute(route: TableRoute, reason: Invalidation): Promise<void> {
    const handles = [...route.shapes].map((s) => s.spec.handle)
    if (handles.length === 0) return
    for (const handle of handles) this.remove(handle)
    await this.options.invalidate(handles, reason)
  }

  /**
   * Invalidates as if it were a transaction: registrations wait for it. With
   * `check`, the catalog is asked first (see ShapeRouterOptions.verifyTable),
   * inside the same exclusive stretch, so no shape joins the route meanwhile.
   */
  private async exclusive(
    invalidations: RouteInvalidation[],
    check?: { readonly route: TableRoute; readonly verify: NonNullable<ShapeRouterOptions['verifyTable']> },
  ): Promise<void> {
    this.busy++
    try {
      if (check !== undefined) {
        const reason = await check.verify(check.route.info)
        if (reason !== undefined && this.tables.get(check.route.info.oid) === check.route) invalidations.push({ route: check.route, reason })
      }
      for (const { route, reason } of invalidations) await this.invalidateRoute(route, reason)
    } finally {
      this.release()
    }
  }

  // ---- transaction bookkeeping ----

  private begin(lsn: bigint, xid: number): TxnRouting {
    // Only while no other routing is under way: its shapes' marks still name it.
    if (this.txnCount >= this.markWrap && this.busy === 1) this.restartTxnMarks()
    return (this.idle.pop() ?? new TxnRouting()).start(++this.txnCount, lsn, xid)
  }

  private async finishAsync(txn: TxnRouting): Promise<void> {
    try {
      await this.settle(txn)
      this.finish(txn)
    } finally {
      this.release(txn)
    }
  }

  private finish(txn: TxnRouting): void {
    this.hooks.committed(txn.lsn, txn.xid)
    this.recent.push(txn.xid)
    if (txn.lsn > this.lastLsn) this.lastLsn = txn.lsn
    this.routedTransactions++
    this.hooks.routed(txn.lsn)
  }

  /** Ends routing work; a transaction's lines die with it. */
  private release(txn?: TxnRouting): void {
    if (txn !== undefined) {
      // Hooks still waiting belong to this transaction, which threw before `finish` ran them.
      this.hooks.abandoned()
      txn.clear()
      this.idle.push(txn)
    }
    this.busy--
    if (this.busy === 0 && this.boundaryTasks.length > 0) {
      const tasks = this.boundaryTasks
      this.boundaryTasks = []
      for (const task of tasks) task()
    }
  }

  private boundary(): Promise<void> {
    if (this.busy === 0) return Promise.resolve()
    return new Promise((resolve) => this.boundaryTasks.push(resolve))
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

  private routeFor(info: TableRoute['info']): TableRoute {
    const existing = this.tables.get(info.oid)
    if (existing !== undefined) return existing
    const route = newTableRoute(info)
    this.tables.set(info.oid, route)
    this.byName.set(nameKey(info.schema, info.name), info.oid)
    return route
  }
}

function nameKey(schema: string, name: string): string {
  return `${schema}\u0000${name}`
}
