import type pg from 'pg'
import Cursor from 'pg-cursor'
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
        const touch = (): void => {}
        let charged = 0
        await readInBatches(client, sql, params, (batch) => {
          for (const texts of batch) {
            const row: Record<string, string | null> = {}
            rows.columns.forEach((name, i) => (row[name] = texts[i] ?? null))
            rows.add(row, touch)
          }
          shape.chargeLoad(view.size + rows.size - charged)
          charged = view.size + rows.size
        })
        continue
      }
      const sql = renumberParams(viewQuery(state), valueOf, params)
      await readInBatches(client, sql, params, (batch) => {
        for (const row of batch) if (view.add(view.parse(row))) shape.chargeLoad(1)
      })
    }
  }
  return { text, values, prepare }
}

/** Rows a view's query reads at a time: the budget is charged as they come, so a table past it is refused before it is all in memory. */
const VIEW_BATCH_ROWS = 10_000

/** Runs `text` through a cursor, `take` given each batch of rows in turn (it throws to stop: the cursor is closed first). */
async function readInBatches(client: pg.ClientBase, text: string, values: readonly string[], take: (rows: (string | null)[][]) => void): Promise<void> {
  const cursor = client.query(new Cursor<(string | null)[]>(text, [...values], { rowMode: 'array' }))
  try {
    for (;;) {
      const batch = await cursor.read(VIEW_BATCH_ROWS)
      if (batch.length > 0) take(batch)
      if (batch.length < VIEW_BATCH_ROWS) break
    }
  } catch (error) {
    // The snapshot's transaction is rolled back next: an open portal is closed first (a failed one has sent Sync already).
    const state = (cursor as unknown as { state?: string }).state
    if (state === 'idle' || state === 'submitted') await cursor.close().catch(() => {})
    throw error
  }
  await cursor.close()
}
