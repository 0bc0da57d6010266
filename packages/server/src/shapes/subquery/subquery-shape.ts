import type { AppendOptions } from '@sluice/storage'
import type { WhereClause } from '../../where/index.js'
import type { RouteSpec, ShapeTarget } from '../route-contracts.js'
import type { ShapeRouter } from '../router.js'
import { type PgSnapshot, isVisibleInSnapshot } from '../snapshot/index.js'
import type { TableInfo } from '../table-catalog.js'
import { type DependencyState, type TableLookup, allStates, applyInnerChanges, dependencyStates } from './dependency-state.js'
import { type IntakeChange, readIntake } from './intake.js'
import { type ChangeLine, type LineContext, type MovePattern, changeLine, moveEventLine } from './shape-lines.js'
import { rowTags, tagHash } from './tags.js'

/*
 * A shape whose where clause has subqueries, between the router and its log
 * (docs/architecture.md, "Subquery shapes"). The router sends it every change
 * of its outer table and of each inner table (members registered with every
 * column and REPLICA FULL, so both rows of an update are known); at each
 * commit that touched them it
 *   1. applies the inner tables' changes to the views (value counts), net
 *      over the transaction, and finds which values entered and left;
 *   2. writes a `move-out` event for the values whose rows leave the shape;
 *   3. judges the outer table's changes against the views and writes them
 *      with their tags;
 * and hands the lines to the shape's target (queue, snapshot writer, log) as
 * one transaction. A change it cannot apply exactly (a value entering a view,
 * which needs the move-in query; a change of a nested subquery's view)
 * invalidates the shape instead: clients get 409 and start over, never wrong rows.
 *
 * Until the snapshot is taken the transactions are held; then those the
 * snapshot saw (the views were loaded in it) are dropped and the rest applied.
 */

export interface SubqueryShapeOptions {
  readonly handle: string
  readonly table: TableInfo
  readonly where: WhereClause
  /** Selected columns; undefined for all. */
  readonly columns: readonly string[] | undefined
  readonly replica: 'default' | 'full'
  readonly tables: TableLookup
  readonly router: ShapeRouter
  /** The shape can no longer be kept exact. Called once. */
  readonly invalidate: (detail: string) => void
}

interface PendingTxn {
  readonly lsn: bigint
  readonly xid: number
  readonly outer: IntakeChange[]
  readonly inner: Map<number, IntakeChange[]>
}

/** The handle under which the shape's member on an inner table is routed. */
export function memberHandle(handle: string, table: TableInfo): string {
  return `${handle}\u0000${table.oid}`
}

export class SubqueryShape {
  readonly roots: DependencyState[]
  readonly states: DependencyState[]
  /** Inner tables by oid. */
  readonly innerTables: ReadonlyMap<number, TableInfo>
  private target: ShapeTarget | undefined
  private pending: PendingTxn | undefined
  /** Transactions that arrived before the snapshot was known; undefined once live. */
  private held: PendingTxn[] | undefined = []
  private dead = false
  /** The snapshot the views were read in: transactions it saw are never applied again. */
  private seen: { snapshot: PgSnapshot; insertLsn: bigint } | undefined
  private readonly columns: readonly string[]

  constructor(private readonly options: SubqueryShapeOptions) {
    const plan = options.where.subqueries
    if (plan === undefined) throw new TypeError('SubqueryShape needs a clause with subqueries')
    this.roots = dependencyStates(plan, options.tables)
    this.states = allStates(this.roots)
    const tables = new Map<number, TableInfo>()
    for (const state of this.states) tables.set(state.table.oid, state.table)
    this.innerTables = tables
    const wanted = options.columns === undefined ? undefined : new Set(options.columns)
    this.columns = options.table.columns.map((c) => c.name).filter((name) => wanted === undefined || wanted.has(name))
  }

  get handle(): string {
    return this.options.handle
  }

  get where(): WhereClause {
    return this.options.where
  }

  /** How the router knows the outer member: every column, REPLICA FULL, every row. */
  outerSpec(): RouteSpec {
    return { handle: this.options.handle, table: this.options.table, where: undefined, columns: undefined, replica: 'full' }
  }

  /** The outer member's target, writing to `target` (the builder's queue and stitching). */
  attach(target: ShapeTarget): ShapeTarget {
    this.target = target
    return { appendLines: (lsn, ops, jsons, count, _options, xid) => this.take(undefined, lsn, ops, jsons, count, xid) }
  }

  /** The inner tables' members, routed with the outer one. */
  companions(): { spec: RouteSpec; target: ShapeTarget }[] {
    return [...this.innerTables.values()].map((table) => ({
      spec: { handle: memberHandle(this.options.handle, table), table, where: undefined, columns: undefined, replica: 'full' as const },
      target: {
        appendLines: (lsn: bigint, ops: readonly number[], jsons: readonly Uint8Array[], count: number, _options: AppendOptions | undefined, xid: number) =>
          this.take(table.oid, lsn, ops, jsons, count, xid),
      },
    }))
  }

  /** Handles of the inner members. */
  memberHandles(): string[] {
    return [...this.innerTables.values()].map((table) => memberHandle(this.options.handle, table))
  }

  /**
   * The snapshot is fixed and the views hold what it saw: the held
   * transactions it did not see are applied (before the queue is drained).
   */
  snapshotTaken(snapshot: PgSnapshot, insertLsn: bigint): void {
    const held = this.held ?? []
    this.held = undefined
    this.seen = { snapshot, insertLsn }
    for (const txn of held) if (!this.inSnapshot(txn)) this.process(txn)
  }

  private inSnapshot(txn: PendingTxn): boolean {
    const seen = this.seen
    return seen !== undefined && txn.lsn < seen.insertLsn && isVisibleInSnapshot(seen.snapshot, txn.xid)
  }

  private take(oid: number | undefined, lsn: bigint, ops: readonly number[], jsons: readonly Uint8Array[], count: number, xid: number): void {
    if (this.dead) return
    let txn = this.pending
    if (txn === undefined || txn.lsn !== lsn || txn.xid !== xid) {
      txn = { lsn, xid, outer: [], inner: new Map() }
      this.pending = txn
      const mine = txn
      this.options.router.atCommit((commitLsn, commitXid) => this.commit(mine, commitLsn, commitXid))
    }
    let into = txn.outer
    if (oid !== undefined) {
      into = txn.inner.get(oid) ?? []
      txn.inner.set(oid, into)
    }
    // The router reuses the arrays and the lines' memory after this call: read them now.
    for (let i = 0; i < count; i++) into.push(readIntake(ops[i]!, jsons[i]!))
  }

  private commit(txn: PendingTxn, lsn: bigint, xid: number): void {
    if (this.pending === txn) this.pending = undefined
    // A transaction that failed half way is routed again from the start: what it left behind is dropped.
    if (txn.lsn !== lsn || txn.xid !== xid || this.dead) return
    if (this.held !== undefined) this.held.push(txn)
    else if (!this.inSnapshot(txn)) this.process(txn)
  }

  private kill(detail: string): void {
    if (this.dead) return
    this.dead = true
    this.options.invalidate(detail)
  }

  private process(txn: PendingTxn): void {
    const plan = this.options.where.subqueries!
    const { handle } = this.options
    // 1. The views, inner tables first and deepest first (a middle table's rows are judged with its children's views).
    const moves = new Map<DependencyState, ReturnType<typeof applyInnerChanges>>()
    for (const state of [...this.states].reverse()) {
      const changes = txn.inner.get(state.table.oid)
      if (changes === undefined) continue
      const moved = applyInnerChanges(state, changes)
      if (moved.entered.length === 0 && moved.left.length === 0) continue
      if (state.depth > 1) {
        this.kill(`a change to ${state.table.schema}.${state.table.name} moved a nested subquery's rows, which is not followed live`)
        return
      }
      moves.set(state, moved)
    }
    // 2. Move-outs; a move-in needs the outer rows queried, which is not done yet.
    const patterns: MovePattern[] = []
    for (const [state, moved] of moves) {
      const index = this.roots.indexOf(state)
      const ins = state.dep.negated ? moved.left : moved.entered
      const outs = state.dep.negated ? moved.entered : moved.left
      if (ins.length > 0) {
        this.kill(`a change to ${state.table.schema}.${state.table.name} moved rows into the shape (move-in is not followed live yet)`)
        return
      }
      plan.positions.forEach((position, pos) => {
        if (position.dep !== index) return
        for (const values of outs) patterns.push({ pos, value: tagHash(handle, position.left, state.view.texts(values)) })
      })
    }
    const lines: string[] = []
    if (patterns.length > 0) lines.push(moveEventLine('move-out', patterns, [txn.xid]))
    // 3. The outer table's changes, judged against the views as they now are.
    const views = this.roots.map((s) => s.view)
    const ctx: LineContext = { table: this.options.table, columns: this.columns, replica: this.options.replica, lsn: txn.lsn, txid: txn.xid }
    const changes: ChangeLine[] = []
    for (const change of txn.outer) {
      if (change.operation === 'insert' || change.operation === 'delete') {
        const tags = rowTags(handle, plan, views, change.row)
        if (tags.included) changes.push({ op: change.op, operation: change.operation, key: change.key, row: change.row, tags })
        continue
      }
      const after = rowTags(handle, plan, views, change.row)
      const before = rowTags(handle, plan, views, change.old!)
      if (after.included && before.included) {
        const removedTags = before.tags.filter((t) => !after.tags.includes(t))
        changes.push({ op: change.op, operation: 'update', key: change.key, row: change.row, old: change.old!, changed: change.changed, tags: after, removedTags })
      } else if (after.included) changes.push({ op: change.op, operation: 'insert', key: change.key, row: change.row, tags: after })
      else if (before.included) changes.push({ op: change.op, operation: 'delete', key: change.key, row: change.old!, tags: before })
    }
    changes.forEach((line, i) => lines.push(changeLine(ctx, { ...line, op: lines.length }, i === changes.length - 1)))
    if (lines.length === 0) return
    const encoder = new TextEncoder()
    this.target!.appendLines(
      txn.lsn,
      lines.map((_, i) => i),
      lines.map((line) => encoder.encode(line)),
      lines.length,
      undefined,
      txn.xid,
    )
  }
}
