import type { RowValues } from '@sluice/protocol'
import type { SubqueryDependency, SubqueryPlan } from '../../where/index.js'
import { SubqueryView, withViews } from '../../where/index.js'
import type { TableInfo } from '../table-catalog.js'
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
}

export type TableLookup = (schema: string, name: string) => TableInfo

export function dependencyStates(plan: SubqueryPlan, table: TableLookup, depth = 1): DependencyState[] {
  return plan.dependencies.map((dep) => ({
    dep,
    table: table(dep.schema, dep.table),
    view: new SubqueryView(dep.types),
    children: dep.where?.subqueries === undefined ? [] : dependencyStates(dep.where.subqueries, table, depth + 1),
    depth,
  }))
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
 * Applies one transaction's changes of the state's table to its view; what
 * entered and left, net over the transaction (a value in and out again moves
 * nothing).
 */
export function applyInnerChanges(state: DependencyState, changes: readonly IntakeChange[]): ViewMoves {
  const { view } = state
  const before = new Map<string, { values: readonly unknown[]; was: boolean }>()
  const touch = (values: readonly unknown[]): void => {
    const key = view.keyOf(values)
    if (!before.has(key)) before.set(key, { values, was: view.has(values) })
  }
  const selected = (row: RowValues): unknown[] => view.parse(state.dep.select.map((c) => row[c] ?? null))
  for (const change of changes) {
    const oldRow = change.operation === 'update' ? change.old : change.operation === 'delete' ? change.row : undefined
    const newRow = change.operation === 'delete' ? undefined : change.row
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
  const entered: (readonly unknown[])[] = []
  const left: (readonly unknown[])[] = []
  for (const { values, was } of before.values()) {
    const now = view.has(values)
    if (now && !was) entered.push(values)
    else if (!now && was) left.push(values)
  }
  return { entered, left }
}
