import type pg from 'pg'
import type { SubqueryPlan, SubqueryView } from '../../where/index.js'
import type { ShapeDefinition } from '../definition/index.js'
import { type PgSnapshot, runSnapshot } from '../snapshot/index.js'
import { buildSnapshotQuery } from '../snapshot/snapshot-query.js'
import { renumberParams } from '../snapshot/renumber-params.js'
import type { TableInfo } from '../table-catalog.js'
import { tagHeadersSql } from './snapshot-sql.js'

/*
 * The move-in query (docs/protocol.md, "Subquery shapes"): the outer rows in
 * the shape after a move that were not before, i.e.
 *
 *   <clause with the new views> AND NOT COALESCE(<clause with the old views>, false)
 *
 * where each subquery becomes a typed `= ANY(array)` over the view's values
 * (the views in memory, not the inner tables as Postgres now has them: the
 * move is the one the replication stream has reached). Rows carry their tags,
 * `active_conditions` against the new views, and `is_move_in`. Run like a
 * snapshot (REPEATABLE READ, rows' JSON built in Postgres); right after its
 * snapshot is fixed it emits a non-transactional logical message: once the
 * stream delivers that message, every transaction the query saw has been
 * routed, which is what the splice waits for.
 */

/** The prefix of the messages move-ins emit; the content names the move-in. */
export const MOVE_IN_MESSAGE_PREFIX = 'sluice/move-in'
/** The prefix of the transactional message that makes a move-in's marker reach the stream (see `runMoveIn`). */
const MOVE_IN_FLUSH_PREFIX = 'sluice/move-in-flush'

/**
 * While a move-in runs, routed transactions are not promised to the store
 * (router.holdAdvance): a query stuck behind a lock must not hold every
 * shape's acknowledgement for long. Past this the query fails and the shape
 * is invalidated instead.
 */
const MOVE_IN_TIMEOUT_MS = 30_000

/** Parameter numbers above every clause's own (`$n` is capped by the where limits far below this). */
const VIEW_PARAM_BASE = 1_000_000

export interface MoveInQuery {
  readonly table: TableInfo
  readonly handle: string
  readonly plan: SubqueryPlan
  readonly definition: ShapeDefinition
  readonly newViews: readonly SubqueryView[]
  readonly oldViews: readonly SubqueryView[]
}

export interface MoveInResult {
  readonly lines: Uint8Array[]
  readonly snapshot: PgSnapshot
  readonly insertLsn: bigint
}

function quoteIdent(name: string): string {
  return `"${name.replaceAll('"', '""')}"`
}

function arrayLiteral(texts: readonly (string | null)[]): string {
  return `{${texts.map((t) => (t === null ? 'NULL' : `"${t.replaceAll('\\', '\\\\').replaceAll('"', '\\"')}"`)).join(',')}}`
}

export function moveInSql(query: MoveInQuery): { text: string; values: string[] } {
  const { table, plan } = query
  const arrays: string[] = []
  const column = (name: string) => {
    const found = table.columns.find((c) => c.name === name)
    if (found === undefined) throw new Error(`column ${name} is not in ${table.schema}.${table.name}`)
    return found
  }
  const atom = (views: readonly SubqueryView[], p: number): string => {
    const position = plan.positions[p]!
    if (position.dep === undefined) return position.sql
    const view = views[position.dep]!
    const members = [...view.values()].map((values) => view.texts(values))
    const params = position.left.map((name, i) => {
      arrays.push(arrayLiteral(members.map((m) => m[i] ?? null)))
      // Schema-qualified: an enum or domain outside the search_path (`app.status`) is found all the same.
      const { typeSql, typeName } = column(name)
      return `CAST($${VIEW_PARAM_BASE + arrays.length - 1} AS ${typeSql ?? quoteIdent(typeName)}[])`
    })
    if (position.left.length === 1) return `${quoteIdent(position.left[0]!)} = ANY(${params[0]})`
    // Several arrays side by side: ROWS FROM, as the parser reads an unqualified `unnest(a, b)` (a qualified one does not exist).
    return `(${position.left.map(quoteIdent).join(', ')}) IN (SELECT * FROM ROWS FROM (${params.map((p) => `pg_catalog.unnest(${p})`).join(', ')}))`
  }
  const clause = (views: readonly SubqueryView[]): string =>
    plan.disjuncts
      .map((disjunct) => `(${disjunct.map((p) => `COALESCE(${plan.positions[p]!.negated ? `NOT (${atom(views, p)})` : `(${atom(views, p)})`}, false)`).join(' AND ')})`)
      .join(' OR ')
  const where = `(${clause(query.newViews)}) AND NOT (${clause(query.oldViews)})`
  const sql = buildSnapshotQuery(table, {
    where,
    columns: query.definition.columns,
    headers: [...tagHeadersSql(table, query.handle, plan, (p) => atom(query.newViews, p)), `',"is_move_in":true'`],
  })
  const values: string[] = []
  const text = renumberParams(sql, (n) => (n >= VIEW_PARAM_BASE ? arrays[n - VIEW_PARAM_BASE] : query.definition.params[String(n)]), values)
  return { text, values }
}

/** Runs the move-in query; `marker` is the content of the message emitted once its snapshot is fixed. */
export async function runMoveIn(pool: pg.Pool, query: MoveInQuery, marker: string, signal?: AbortSignal): Promise<MoveInResult> {
  const { text, values } = moveInSql(query)
  const lines: Uint8Array[] = []
  const result = await runSnapshot(
    pool,
    {
      table: query.table,
      text,
      values,
      statementTimeoutMs: MOVE_IN_TIMEOUT_MS,
      ...(signal === undefined ? {} : { signal }),
      prepare: async (client) => {
        await client.query('SELECT pg_catalog.pg_logical_emit_message(false, $1, $2)', [MOVE_IN_MESSAGE_PREFIX, marker])
      },
    },
    { rows: (batch) => void lines.push(...batch) },
  )
  // A non-transactional message does not flush the WAL: on a database with no other commit to come, the
  // stream would not deliver the marker, and the splice would wait for it indefinitely. A committed
  // transactional message flushes everything before it (and the router ignores it).
  await pool.query('SELECT pg_catalog.pg_logical_emit_message(true, $1, $2)', [MOVE_IN_FLUSH_PREFIX, marker])
  return { lines, snapshot: result.snapshot, insertLsn: result.insertLsn }
}
