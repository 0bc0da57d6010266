import type { AppendOptions } from '@sluice/storage'
import type pg from 'pg'
import type { SubqueryView, WhereClause } from '../../where/index.js'
import type { ShapeDefinition } from '../definition/index.js'
import type { RouteSpec, ShapeTarget } from '../route-contracts.js'
import type { ShapeRouter } from '../router.js'
import { type PgSnapshot, encodeSnapshotEnd, isVisibleInSnapshot } from '../snapshot/index.js'
import type { TableInfo } from '../table-catalog.js'
import { type DependencyState, type TableLookup, type ViewMoves, allStates, applyInnerChanges, dependencyStates } from './dependency-state.js'
import { MOVE_IN_MESSAGE_PREFIX, type MoveInQuery, type MoveInResult, runMoveIn } from './move-in.js'
import { type IntakeChange, readIntake } from './intake.js'
import { type LineContext, type MovePattern, moveEventLine, outerChangeLines } from './shape-lines.js'
import { tagHash } from './tags.js'
import type { ViewBudget } from './view-budget.js'
import { ShapeViewRouting } from './view-routing.js'
import { ShapeError } from '../shape-error.js'

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
 * one transaction. A nested subquery's view follows its own table and its
 * subqueries' moves (candidate-rows.ts), so a change two levels down moves
 * the outer shape like any other. A change it cannot apply exactly (a NULL
 * entering a NOT IN set, too many transactions during a move-in) invalidates
 * the shape instead: clients get 409 and start over, never wrong rows.
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
  /** Connections for move-in queries (their own pool: a move-in never waits behind snapshots). */
  readonly pool: pg.Pool
  /** For the move-in query: selected columns and params. */
  readonly definition: ShapeDefinition
  /** Past these, transactions routed during one move-in drop the shape (defaults.ts DEFAULT_SUBQUERY_MAX_HELD_*). */
  readonly maxHeld: { readonly transactions: number; readonly changes: number }
  /** The shape can no longer be kept exact. Called once. */
  readonly invalidate: (detail: string) => void
  /** Where the views' entries are counted (`--max-subquery-view-entries`); none: unbounded. */
  readonly budget?: ViewBudget
}

interface PendingTxn {
  readonly lsn: bigint
  readonly xid: number
  readonly outer: IntakeChange[]
  readonly inner: Map<number, IntakeChange[]>
  /** The first op its own lines take (after lines spliced in at its LSN). */
  op?: number
}

interface MovingIn {
  /** Names the move-in; each run of its query emits `<id>/<attempt>` as its logical message. */
  readonly id: string
  readonly query: MoveInQuery
  /** Runs of the query so far (see `acceptRun`). */
  attempt: number
  /**
   * The message of the run under way (`<id>/<attempt>`), none while a rejected
   * run waits to be tried again: that run's message may still arrive then, and
   * must not be taken for the next run's.
   */
  marker: string | undefined
  /**
   * The xids of the transactions routed before it started, and of the one that
   * started it: the query's snapshot must see every one of them, since their
   * changes were judged before the move.
   */
  readonly routedBefore: readonly number[]
  /** The views the held transactions the query saw are judged against. */
  readonly before: SubqueryView[]
  readonly patterns: MovePattern[]
  readonly xids: number[]
  result: MoveInResult | undefined
  /** Transactions routed since it started, in order. */
  readonly held: PendingTxn[]
  /** The changes of every transaction held since it started. */
  heldChanges: number
  /** Held transactions already written, whose inner changes wait for the splice. */
  readonly deferred: PendingTxn[]
  /** Where the stream delivered the query's message: every transaction it saw has been routed. */
  markerLsn: bigint | undefined
  readonly abort: AbortController
  readonly release: (wroteAt?: bigint) => void
}

const encoder = new TextEncoder()

/**
 * Runs of one move-in's query before the shape is made anew instead (see
 * `acceptRun`), the first retry this long after the rejected run, doubling:
 * the last run starts about 5 s after the first.
 */
const MAX_MOVE_IN_RUNS = 10
const MOVE_IN_RETRY_MS = 10

/** The tuple with NULL in place of each non-empty subset of its non-NULL values. */
function nullVariants(values: readonly unknown[]): unknown[][] {
  const out: unknown[][] = []
  for (let mask = 1; mask < 1 << values.length; mask++) {
    if (values.some((v, i) => (mask & (1 << i)) !== 0 && v === null)) continue
    out.push(values.map((v, i) => ((mask & (1 << i)) !== 0 ? null : v)))
  }
  return out
}

/** Drops repeated patterns in place (several moved tuples stand for the same all-NULL left side). */
function dedupePatterns(patterns: MovePattern[]): void {
  const seen = new Set<string>()
  let kept = 0
  for (const p of patterns) {
    const key = `${p.pos}/${p.value}`
    if (seen.has(key)) continue
    seen.add(key)
    patterns[kept++] = p
  }
  patterns.length = kept
}

/** The handle under which the shape's member on an inner table is routed. */
export function memberHandle(handle: string, table: TableInfo): string {
  return `${handle}\u0000${table.oid}`
}

/** The refusal of a subquery shape whose views would not fit the bound. */
export function viewsFull(budget: ViewBudget): ShapeError {
  return new ShapeError(
    'subquery_views_full',
    `subquery shapes' result sets hold ${budget.used} values, at the limit of ${budget.limit} (--max-subquery-view-entries)`,
  )
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
  private moving: MovingIn | undefined
  private moveCount = 0
  private unsubscribe: (() => void) | undefined
  /** The highest LSN lines were written at. */
  private wroteAt = 0n
  private lastOp = -1
  /**
   * A move-in spliced in at a transaction its query did not see, before the
   * stream reached the query: until a transaction at or past its insert LSN
   * arrives, one the query saw would be applied twice (see `acceptRun`).
   */
  private splicedEarly: { readonly snapshot: PgSnapshot; readonly insertLsn: bigint } | undefined
  /** The snapshot the views were read in: transactions it saw are never applied again. */
  private seen: { snapshot: PgSnapshot; insertLsn: bigint } | undefined
  private readonly columns: readonly string[]
  /** How the router files the outer member under the views' values (view-routing.ts). */
  private readonly routing: ShapeViewRouting
  /** Entries counted against the budget for this shape's views. */
  private charged = 0

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
    this.routing = new ShapeViewRouting(plan)
  }

  get handle(): string {
    return this.options.handle
  }

  get where(): WhereClause {
    return this.options.where
  }

  /** How the router knows the outer member: every column, REPLICA FULL, filed under the views' values. */
  outerSpec(): RouteSpec {
    return { handle: this.options.handle, table: this.options.table, where: undefined, columns: undefined, replica: 'full', views: this.routing }
  }

  /** The outer member's target, writing to `target` (the builder's queue and stitching). */
  attach(target: ShapeTarget): ShapeTarget {
    this.target = target
    return { appendLines: (lsn, ops, jsons, count, _options, xid) => this.take(undefined, lsn, ops, jsons, count, xid) }
  }

  /** The inner tables' members, routed with the outer one. */
  companions(): { spec: RouteSpec; target: ShapeTarget }[] {
    return [...this.innerTables.values()].map((table) => ({
      spec: { handle: memberHandle(this.options.handle, table), table, where: this.memberWhere(table), columns: undefined, replica: 'full' as const },
      target: {
        appendLines: (lsn: bigint, ops: readonly number[], jsons: readonly Uint8Array[], count: number, _options: AppendOptions | undefined, xid: number) =>
          this.take(table.oid, lsn, ops, jsons, count, xid),
      },
    }))
  }

  /**
   * What an inner table's member is filed under in the router's index: the
   * subquery's own clause when it is the table's only subquery and has none
   * inside (then `user_id = $1` reaches this shape's member in O(1) among
   * thousands); otherwise every change of the table. An update moving a row
   * across the clause arrives as its delete or insert, which counts the same.
   */
  private memberWhere(table: TableInfo): WhereClause | undefined {
    const states = this.states.filter((s) => s.table.oid === table.oid)
    const where = states.length === 1 ? states[0]!.dep.where : undefined
    return where?.subqueries === undefined ? where : undefined
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
    this.recount()
    this.routing.seed(this.roots)
    for (const txn of held) if (!this.inSnapshot(txn)) this.enqueue(txn)
    this.routing.setBroad(this.moving !== undefined)
  }

  /** A snapshot attempt starts loading the views anew: what an earlier attempt loaded is no longer held. */
  resetLoad(): void {
    this.options.budget?.charge(-this.charged)
    this.charged = 0
  }

  /** New view entries read by the snapshot; refused (the shape is not made) past the bound. */
  chargeLoad(entries: number): void {
    const budget = this.options.budget
    if (budget === undefined || this.dead) return
    if (!budget.fits(entries)) throw viewsFull(budget)
    budget.charge(entries)
    this.charged += entries
  }

  /** Counts the views' entries against the budget again; returns how many more there are than last counted. */
  private recount(): number {
    if (this.dead) return 0
    let total = 0
    // A nested subquery keeps its inner rows too (candidate-rows.ts): each counts as an entry.
    for (const state of this.states) total += state.view.size + (state.rows?.size ?? 0)
    const delta = total - this.charged
    this.options.budget?.charge(delta)
    this.charged = total
    return delta
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
    // A transaction that failed half way (the router's ABANDONED_LSN) is routed again from the start: what it left behind is dropped.
    if (txn.lsn !== lsn || txn.xid !== xid || this.dead) return
    try {
      if (this.held !== undefined) this.held.push(txn)
      else if (!this.inSnapshot(txn)) this.enqueue(txn)
    } catch (error) {
      // Thrown out of here, it would fail the transaction for every shape after it had reached some: this shape
      // alone can no longer be kept exact.
      this.kill(`a transaction could not be applied: ${error instanceof Error ? error.message : String(error)}`)
    }
  }

  private kill(detail: string): void {
    if (this.dead) return
    this.dead = true
    this.dispose()
    this.options.invalidate(detail)
  }

  /**
   * A failed flush rolled the store back to what was durable, and the stream
   * delivers again everything above it. The result sets and the log position
   * kept here already took those transactions and cannot be rolled back with
   * the store: the shape is invalidated (as a restart does), since a second
   * delivery would find its moves already made and write nothing for them.
   */
  storeRolledBack(): void {
    this.kill('a storage flush failed and the store rolled back to its durable state; the result sets of a subquery shape are kept in memory and cannot be rolled back with it')
  }

  /** The shape is gone: a move-in in flight stops holding the store back. */
  dispose(): void {
    this.dead = true
    this.options.budget?.charge(-this.charged)
    this.charged = 0
    const moving = this.moving
    this.moving = undefined
    moving?.abort.abort()
    moving?.release()
    this.unsubscribe?.()
    this.unsubscribe = undefined
  }

  /** A transaction, in order: applied now, or held while a move-in's query runs. */
  private enqueue(txn: PendingTxn): void {
    const early = this.splicedEarly
    if (early !== undefined) {
      if (txn.lsn >= early.insertLsn) this.splicedEarly = undefined
      else if (isVisibleInSnapshot(early.snapshot, txn.xid)) {
        this.kill(`the move-in query saw transaction ${txn.xid}, which arrived after one it did not see`)
        return
      }
    }
    const moving = this.moving
    if (moving === undefined) {
      this.process(txn, txn.op ?? 0)
      return
    }
    moving.held.push(txn)
    let changes = txn.outer.length
    for (const list of txn.inner.values()) changes += list.length
    moving.heldChanges += changes
    const max = this.options.maxHeld
    if (moving.held.length > max.transactions) {
      this.kill(`more than ${max.transactions} transactions arrived during one move-in`)
      return
    }
    if (moving.heldChanges > max.changes) {
      this.kill(`more than ${max.changes} changes arrived during one move-in`)
      return
    }
    this.advanceMove()
  }

  /**
   * Applies a transaction from `op` on: views, then move-out events, then the
   * outer changes (against the views before any move-in), then, when values
   * entered, the move-in starts (its rows are spliced in later).
   */
  private process(txn: PendingTxn, op: number): number {
    // Killed by an earlier transaction of the same batch (held ones applied in turn): its log is deleted.
    if (this.dead) return op
    const plan = this.options.where.subqueries!
    const { handle } = this.options
    const moves = new Map<DependencyState, ViewMoves>()
    // Deepest first: a nested subquery's moves re-judge its parent's rows before the parent's own moves are known.
    for (const state of [...this.states].reverse()) {
      const changes = txn.inner.get(state.table.oid)
      if (changes === undefined && !state.children.some((c) => moves.has(c))) continue
      const moved = applyInnerChanges(state, changes ?? [], moves)
      if (moved.entered.length === 0 && moved.left.length === 0) continue
      moves.set(state, moved)
      if (state.depth > 1) continue
      if (state.dep.negated && [...moved.entered, ...moved.left].some((values) => values.includes(null))) {
        // NOT IN over a set holding a NULL is NULL for every row not in it: a NULL entering takes every row
        // out, one leaving brings them back. A move event names values, not "all rows", so the shape resyncs.
        this.kill(`a NULL entered or left the set of a NOT IN subquery on ${state.table.schema}.${state.table.name}`)
        return op
      }
    }
    if (this.recount() > 0 && this.options.budget?.fits(0) === false) {
      const { budget } = this.options
      this.kill(`the result sets of subquery shapes grew to ${budget!.used} values, past --max-subquery-view-entries (${budget!.limit})`)
      return op
    }
    const outs: MovePattern[] = []
    const ins: MovePattern[] = []
    /** The views as they were before the values that move rows in entered (or, for NOT IN, left). */
    let before: SubqueryView[] | undefined
    for (const [state, moved] of moves) {
      if (state.depth > 1) continue
      const index = this.roots.indexOf(state)
      const entering = state.dep.negated ? moved.left : moved.entered
      const leaving = state.dep.negated ? moved.entered : moved.left
      if (entering.length > 0) {
        before ??= this.roots.map((s) => s.view)
        const view = state.view.clone()
        for (const values of entering) {
          if (state.dep.negated) view.add(values)
          else view.drop(values)
        }
        before[index] = view
      }
      plan.positions.forEach((position, pos) => {
        if (position.dep !== index) return
        const hash = (values: readonly unknown[]): string => tagHash(handle, position.left, state.view.texts(values))
        // A pattern sets the position of the rows with that left side to what the view now makes it. Three-
        // valued IN decides, not the tuple alone: with a NULL in the set, `v NOT IN S` stays NULL when v
        // leaves; a tuple with a NULL in it makes no left side TRUE when it enters.
        const holds = (left: readonly unknown[]): boolean => (state.dep.negated ? state.view.test(left) === false : state.view.test(left) === true)
        for (const values of leaving) if (!holds(values)) outs.push({ pos, value: hash(values) })
        for (const values of entering) if (holds(values)) ins.push({ pos, value: hash(values) })
        if (!state.dep.negated) return
        // `l NOT IN S` for a left side with NULLs is NULL once S holds a tuple equal to it where l is not NULL
        // (`NULL NOT IN S` once S is not empty), else TRUE: such rows move with those tuples, under tags of
        // their own, NULLs in place of some of the tuple's values. One that entered S makes them NULL (the
        // all-NULL one only if S was empty); one that left makes them TRUE only if no other tuple of S still
        // matches them (a scan of S).
        const wasEmpty = state.view.size - leaving.length + entering.length === 0
        for (const values of leaving) {
          for (const left of nullVariants(values)) if (wasEmpty || !left.every((v) => v === null)) outs.push({ pos, value: hash(left) })
        }
        for (const values of entering) {
          for (const left of nullVariants(values)) {
            if (left.every((v) => v === null) ? state.view.size === 0 : holds(left)) ins.push({ pos, value: hash(left) })
          }
        }
      })
    }
    dedupePatterns(outs)
    dedupePatterns(ins)
    const lines: Uint8Array[] = []
    if (outs.length > 0) lines.push(encoder.encode(moveEventLine('move-out', outs, [txn.xid])))
    this.outerLines(txn, before ?? this.roots.map((s) => s.view), lines)
    op = this.write(txn.lsn, txn.xid, op, lines)
    if (ins.length > 0) this.startMoveIn(txn, before!, ins)
    return op
  }

  /** The outer table's changes of a transaction, judged against `views`, as lines. */
  private outerLines(txn: PendingTxn, views: readonly SubqueryView[], lines: Uint8Array[]): void {
    const ctx: LineContext = { table: this.options.table, columns: this.columns, replica: this.options.replica, lsn: txn.lsn, txid: txn.xid }
    for (const line of outerChangeLines(ctx, this.options.handle, this.options.where.subqueries!, views, txn.outer)) lines.push(encoder.encode(line))
  }

  /** Appends lines as entries `<lsn>_<op>`, `<lsn>_<op+1>`…; returns the next op. */
  private write(lsn: bigint, xid: number, op: number, lines: readonly Uint8Array[]): number {
    if (lines.length === 0 || this.dead) return op
    // Logs skip entries at or below their last one (replays): an entry placed there would be lost silently.
    if (lsn < this.wroteAt || (lsn === this.wroteAt && op <= this.lastOp)) {
      this.kill(`lines at ${lsn}_${op} would not follow the log's last entry ${this.wroteAt}_${this.lastOp}`)
      return op
    }
    this.lastOp = op + lines.length - 1
    this.target!.appendLines(lsn, lines.map((_, i) => op + i), lines, lines.length, undefined, xid)
    this.wroteAt = lsn
    return op + lines.length
  }

  private startMoveIn(txn: PendingTxn, before: SubqueryView[], patterns: MovePattern[]): void {
    // A dead shape's hold would never be released (dispose has run): every shape's acknowledgement would wait.
    if (this.dead) return
    const id = `${this.options.handle}:${++this.moveCount}`
    const moving: MovingIn = {
      id,
      query: {
        table: this.options.table,
        handle: this.options.handle,
        plan: this.options.where.subqueries!,
        definition: this.options.definition,
        newViews: this.roots.map((s) => s.view),
        oldViews: before,
      },
      attempt: 0,
      marker: undefined,
      routedBefore: [...this.options.router.recentXids, txn.xid],
      before,
      patterns,
      xids: [txn.xid],
      result: undefined,
      held: [],
      heldChanges: 0,
      deferred: [],
      markerLsn: undefined,
      abort: new AbortController(),
      release: this.options.router.holdAdvance(),
    }
    this.moving = moving
    this.routing.setBroad(true)
    this.unsubscribe ??= this.options.router.onMessage((message) => {
      const current = this.moving
      if (current === undefined || message.transactional || message.prefix !== MOVE_IN_MESSAGE_PREFIX) return
      if (current.marker === undefined || message.content.toString('utf8') !== current.marker) return
      current.markerLsn = message.lsn
      this.advanceMove()
    })
    this.runMoveIn(moving)
  }

  /** One run of a move-in's query; its result and its message, once both are in, go to `advanceMove`. */
  private runMoveIn(moving: MovingIn): void {
    const run = ++moving.attempt
    moving.marker = `${moving.id}/${run}`
    runMoveIn(this.options.pool, moving.query, moving.marker, moving.abort.signal).then(
      (result) => {
        if (this.moving !== moving || moving.attempt !== run) return
        // Judged once per run: the transactions routed before the move do not change while it waits.
        const missed = moving.routedBefore.find((xid) => !isVisibleInSnapshot(result.snapshot, xid))
        if (missed !== undefined) {
          this.runAgain(moving, `transaction ${missed}, routed before the move, was not yet visible to the move-in query`)
          return
        }
        moving.result = result
        this.advanceMove()
      },
      (error: unknown) => {
        if (this.moving !== moving || moving.attempt !== run) return
        this.kill(`the move-in query failed: ${error instanceof Error ? error.message : String(error)}`)
      },
    )
  }

  /**
   * Whether a run's snapshot fits the stream, which orders transactions by
   * their commit records, while a snapshot sees those whose backends have left
   * the proc array: a transaction can be in the WAL, and so delivered, and
   * still unseen by a snapshot that sees a later one (its backend waiting for a
   * synchronous standby, or not yet scheduled again). The splice needs every
   * transaction judged before the move seen (checked once, as the run's
   * result arrives: `runMoveIn`), and the held ones it saw to come first
   * (checked here, as more are held). Otherwise the query runs again a little later, when the laggard is
   * seen; after `MAX_MOVE_IN_RUNS` the shape is made anew (a 409: its clients
   * refetch, and a new snapshot waits for the same). A transaction the query
   * saw that arrives only after the splice (`splicedEarly`) can no longer be
   * put first: the shape is made anew then too.
   */
  private acceptRun(moving: MovingIn, result: MoveInResult): boolean {
    const { snapshot, insertLsn } = result
    const seen = (txn: PendingTxn): boolean => txn.lsn < insertLsn && isVisibleInSnapshot(snapshot, txn.xid)
    const firstUnseen = moving.held.findIndex((txn) => !seen(txn))
    const late = firstUnseen < 0 ? undefined : moving.held.slice(firstUnseen + 1).find(seen)
    if (late === undefined) return true
    this.runAgain(moving, `the move-in query saw transaction ${late.xid} but not the earlier ${moving.held[firstUnseen]!.xid}`)
    return false
  }

  /** A run that does not fit the stream (`acceptRun`): the query again, backing off, or the shape made anew after the last run. */
  private runAgain(moving: MovingIn, why: string): void {
    if (moving.attempt >= MAX_MOVE_IN_RUNS) {
      this.kill(`${why} in ${moving.attempt} runs`)
      return
    }
    moving.result = undefined
    moving.markerLsn = undefined
    moving.marker = undefined
    const timer = setTimeout(() => {
      if (this.moving === moving && !this.dead) this.runMoveIn(moving)
    }, MOVE_IN_RETRY_MS * 2 ** (moving.attempt - 1))
    timer.unref?.()
  }

  /**
   * The splice (docs/protocol.md, "Subquery shapes"), once the query's result
   * is in and the run fits the stream (`acceptRun`): held transactions the
   * query saw go first, judged against the views before the move; at the
   * first it did not see, or once the stream has passed the query (its
   * message arrived), the move-in event, its rows and a `snapshot-end`; then
   * the held transactions' inner changes, then the rest as usual. A write the
   * log refuses makes the shape anew (it runs in a promise's callback, where
   * a throw would reach no one).
   */
  private advanceMove(): void {
    const moving = this.moving
    const result = moving?.result
    if (moving === undefined || result === undefined || this.dead) return
    if (!this.acceptRun(moving, result)) return
    try {
      this.splice(moving, result)
    } catch (error) {
      this.kill(`the move-in could not be written: ${error instanceof Error ? error.message : String(error)}`)
    }
  }

  private splice(moving: MovingIn, result: MoveInResult): void {
    const { snapshot, insertLsn } = result
    while (moving.held.length > 0) {
      const txn = moving.held[0]!
      if (!(txn.lsn < insertLsn && isVisibleInSnapshot(snapshot, txn.xid))) break
      moving.held.shift()
      const lines: Uint8Array[] = []
      this.outerLines(txn, moving.before, lines)
      txn.op = this.write(txn.lsn, txn.xid, txn.op ?? 0, lines)
      moving.deferred.push(txn)
    }
    const boundary = moving.held[0]
    if (boundary === undefined && moving.markerLsn === undefined) return
    // Splice at the boundary transaction's LSN, before its own lines, or at the message's, above everything routed.
    const lsn = boundary?.lsn ?? moving.markerLsn!
    const xid = boundary?.xid ?? moving.xids[0]!
    const lines: Uint8Array[] = [encoder.encode(moveEventLine('move-in', moving.patterns, moving.xids)), ...result.lines]
    if (result.lines.length > 0) lines.push(encodeSnapshotEnd(snapshot))
    let op = this.write(lsn, xid, boundary?.op ?? 0, lines)
    this.moving = undefined
    if (boundary !== undefined && boundary.lsn < insertLsn) this.splicedEarly = { snapshot, insertLsn }
    const held = moving.held
    // The held transactions' inner changes, as one transaction at the splice: their moves follow the move-in.
    const deferred: PendingTxn = { lsn, xid, outer: [], inner: new Map(), op }
    for (const txn of moving.deferred) {
      for (const [oid, changes] of txn.inner) deferred.inner.set(oid, [...(deferred.inner.get(oid) ?? []), ...changes])
    }
    if (deferred.inner.size > 0) op = this.process(deferred, op)
    if (boundary !== undefined) boundary.op = op
    for (const txn of held) this.enqueue(txn)
    // Released only now: a held transaction may have started the next move-in, whose hold must be taken
    // first, else the store would be promised transactions whose lines this shape has not written yet.
    moving.release(lsn)
    this.routing.setBroad(this.moving !== undefined)
  }
}
