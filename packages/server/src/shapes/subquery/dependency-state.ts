import type { RowValues } from '@sluice/protocol'
import type { SubqueryDependency, SubqueryPlan } from '../../where/index.js'
import { SubqueryView, withViews } from '../../where/index.js'
import type { TableInfo } from '../table-catalog.js'
import { CandidateRows } from './candidate-rows.js'
import type { IntakeChange } from './intake.js'

/**
 * One subquery of a shape (at any depth) with its current view and the views
 * of its own subqueries. The tree mirrors the clause: a shape's roots are its
 * clause's dependencies in order, each with its inner clause's dependencies
 * as children.
 */
export interface DependencyState {
  readonly dep: SubqueryDependency
  readonly table: TableInfo
  view: SubqueryView
  readonly children: readonly DependencyState[]
  readonly depth: number
  /** A subquery with subqueries of its own: the inner rows its view is counted from (candidate-rows.ts). */
  readonly rows: CandidateRows | undefined
}

export type TableLookup = (schema: string, name: string) => TableInfo

export function dependencyStates(plan: SubqueryPlan, table: TableLookup, depth = 1): DependencyState[] {
  return plan.dependencies.map((dep) => {
    const inner = dep.where?.subqueries
    const children = inner === undefined ? [] : dependencyStates(inner, table, depth + 1)
    const state: { -readonly [K in keyof DependencyState]: DependencyState[K] } = {
      dep,
      table: table(dep.schema, dep.table),
      view: new SubqueryView(dep.types),
      children,
      depth,
      rows: undefined,
    }
    if (inner !== undefined) {
      state.rows = new CandidateRows(
        {
          table: state.table,
          select: dep.select,
          plan: inner,
          childViews: () => children.map((c) => c.view),
          get view() {
            return state.view
          },
          matches: (row) => innerMatches(state, row),
        },
        dep.where!.columns,
      )
    }
    return state
  })
}

/** Every state of the tree, parents before children. */
export function allStates(roots: readonly DependencyState[]): DependencyState[] {
  const out: DependencyState[] = []
  const walk = (states: readonly DependencyState[]): void => {
    for (const state of states) {
      out.push(state)
      walk(state.children)
    }
  }
  walk(roots)
  return out
}

/** Whether an inner row belongs to the subquery's result (its clause, with its own subqueries' views). */
export function innerMatches(state: DependencyState, row: RowValues): boolean {
  const where = state.dep.where
  if (where === undefined) return true
  return where.matches(state.children.length === 0 ? row : withViews(row, state.children.map((c) => c.view)))
}

export interface ViewMoves {
  /** Tuples that entered and left the view, as parsed values. */
  readonly entered: (readonly unknown[])[]
  readonly left: (readonly unknown[])[]
}

/**
 * Applies one transaction's changes of the state's table to its view, and,
 * for a nested subquery, its subqueries' moves (`childMoves`, applied to
 * their views already); what entered and left, net over the transaction (a
 * value in and out again moves nothing).
 */
export function applyInnerChanges(state: DependencyState, changes: readonly IntakeChange[], childMoves?: ReadonlyMap<DependencyState, ViewMoves>): ViewMoves {
  const { view } = state
  const before = new Map<string, { values: readonly unknown[]; was: boolean }>()
  const touch = (values: readonly unknown[]): void => {
    const key = view.keyOf(values)
    if (!before.has(key)) before.set(key, { values, was: view.has(values) })
  }
  const selected = (row: RowValues): unknown[] => view.parse(state.dep.select.map((c) => row[c] ?? null))
  const rows = state.rows
  for (const change of changes) {
    const oldRow = change.operation === 'update' ? change.old : change.operation === 'delete' ? change.row : undefined
    const newRow = change.operation === 'delete' ? undefined : change.row
    if (rows !== undefined) {
      if (oldRow !== undefined) rows.remove(oldRow, touch)
      if (newRow !== undefined) rows.add(newRow, touch)
      continue
    }
    if (oldRow !== undefined && innerMatches(state, oldRow)) {
      const values = selected(oldRow)
      touch(values)
      view.remove(values)
    }
    if (newRow !== undefined && innerMatches(state, newRow)) {
      const values = selected(newRow)
      touch(values)
      view.add(values)
    }
  }
  if (rows !== undefined && childMoves !== undefined) {
    const moved = new Map<number, (readonly unknown[])[]>()
    let all = false
    state.children.forEach((child, dep) => {
      const m = childMoves.get(child)
      if (m === undefined) return
      const tuples = [...m.entered, ...m.left]
      if (tuples.length === 0) return
      moved.set(dep, tuples)
      // A NULL moving changes every miss (FALSE or NULL); a set becoming empty or not changes a NULL left side.
      const size = child.view.size
      const sizeBefore = size - m.entered.length + m.left.length
      if (tuples.some((values) => values.includes(null)) || (size === 0) !== (sizeBefore === 0)) all = true
    })
    if (moved.size > 0) rows.rejudge(moved, all, touch)
  }
  const entered: (readonly unknown[])[] = []
  const left: (readonly unknown[])[] = []
  for (const { values, was } of before.values()) {
    const now = view.has(values)
    if (now && !was) entered.push(values)
    else if (!now && was) left.push(values)
  }
  return { entered, left }
}
