import type pg from 'pg'
import { SubqueryView } from '../../where/index.js'
import type { ShapeDefinition } from '../definition/index.js'
import { buildSnapshotQuery, columnText } from '../snapshot/snapshot-query.js'
import { renumberParams } from '../snapshot/renumber-params.js'
import type { DependencyState } from './dependency-state.js'
import { tagHeadersSql } from './snapshot-sql.js'
import type { SubqueryShape } from './subquery-shape.js'

/*
 * A subquery shape's initial snapshot: in the one REPEATABLE READ transaction
 * of runSnapshot, first every subquery's view (its selected values, counted
 * per inner row), then the outer rows with their tags, computed by the very
 * subqueries the views were read with. So the views and the rows are of the
 * same instant, and later changes are applied to both from there.
 */

function quoteIdent(name: string): string {
  return `"${name.replaceAll('"', '""')}"`
}

function viewQuery(state: DependencyState): string {
  const { table, dep } = state
  const select = dep.select.map((name) => {
    const column = table.columns.find((c) => c.name === name)
    if (column === undefined) throw new Error(`column ${name} is not in ${table.schema}.${table.name}`)
    return columnText(column)
  })
  const from = `${table.kind === 'table' ? 'ONLY ' : ''}${quoteIdent(table.schema)}.${quoteIdent(table.name)}`
  return `SELECT ${select.join(', ')} FROM ${from}${dep.where === undefined ? '' : ` WHERE (${dep.where.canonical})`}`
}

/**
 * A nested subquery's rows (candidate-rows.ts), the columns they keep, in the
 * snapshot's transaction. Every row is read: the clause is judged by the
 * evaluator against the deeper views (read in the same transaction), as later
 * changes will be, and rows no value of those views could bring in are
 * dropped as they arrive.
 */
function rowsQuery(state: DependencyState, columns: readonly string[]): string {
  const { table } = state
  const select = columns.map((name) => {
    const column = table.columns.find((c) => c.name === name)
    if (column === undefined) throw new Error(`column ${name} is not in ${table.schema}.${table.name}`)
    return columnText(column)
  })
  const from = `${table.kind === 'table' ? 'ONLY ' : ''}${quoteIdent(table.schema)}.${quoteIdent(table.name)}`
  return `SELECT ${select.join(', ')} FROM ${from}`
}

export interface SubquerySnapshotRequest {
  readonly text: string
  readonly values: string[]
  readonly prepare: (client: pg.ClientBase) => Promise<void>
}

export function subquerySnapshotRequest(shape: SubqueryShape, def: ShapeDefinition, table: Parameters<typeof buildSnapshotQuery>[0], where: string): SubquerySnapshotRequest {
  const plan = shape.where.subqueries!
  const valueOf = (n: number): string | undefined => def.params[String(n)]
  const query = buildSnapshotQuery(table, {
    where,
    columns: def.columns,
    headers: tagHeadersSql(table, shape.handle, plan, (p) => plan.positions[p]!.sql),
  })
  const values: string[] = []
  const text = renumberParams(query, valueOf, values)
  const prepare = async (client: pg.ClientBase): Promise<void> => {
    shape.resetLoad()
    // Deepest first: a nested subquery's rows are judged against its subqueries' views.
    for (const state of [...shape.states].reverse()) {
      const view = new SubqueryView(state.dep.types)
      state.view = view
      const params: string[] = []
      if (state.rows !== undefined) {
        const { rows } = state
        rows.clear()
        const sql = renumberParams(rowsQuery(state, rows.columns), valueOf, params)
        const result = await client.query({ text: sql, values: params, rowMode: 'array' })
        const touch = (): void => {}
        for (const texts of result.rows as (string | null)[][]) {
          const row: Record<string, string | null> = {}
          rows.columns.forEach((name, i) => (row[name] = texts[i] ?? null))
          rows.add(row, touch)
        }
        shape.chargeLoad(view.size + rows.size)
        continue
      }
      const sql = renumberParams(viewQuery(state), valueOf, params)
      const result = await client.query({ text: sql, values: params, rowMode: 'array' })
      for (const row of result.rows as (string | null)[][]) if (view.add(view.parse(row))) shape.chargeLoad(1)
    }
  }
  return { text, values, prepare }
}
