import { ParamMessage, type SubsetRequest } from '@sluice/protocol'
import { type WhereClause, WhereClauseError, compileWhere } from '../../where/index.js'
import type { ShapeDefinition } from '../definition/index.js'
import { type TableInfo, whereColumns } from '../table-catalog.js'
import { renumberParams } from './renumber-params.js'
import { buildSnapshotQuery } from './snapshot-query.js'
import { SubsetError } from './subset-error.js'
import { type OrderByKey, orderBySql, parseOrderBy } from './subset-order-by.js'

/**
 * A subset snapshot's query (docs/protocol.md §6): the shape's snapshot query (same
 * projection, same row JSON) restricted by `(shape where) AND (subset where)`,
 * then ORDER BY / LIMIT / OFFSET. Every piece that reaches Postgres is either
 * printed by us from a checked parse tree (both where clauses are canonical
 * text from the where compiler, the order by is printed from checked column
 * names) or a number we validated; values travel as bind parameters.
 */

/** A subset request checked against the shape's table, ready to be turned into SQL. */
export interface CompiledSubset {
  readonly where: WhereClause | undefined
  readonly orderBy: readonly OrderByKey[] | undefined
  readonly limit: number | undefined
  readonly offset: number | undefined
}

export interface SubsetQuery {
  readonly text: string
  /** Values of `$1..$n` in `text`, as text. */
  readonly values: readonly string[]
}

const INTEGER_KEY = /^[+-]?[0-9]+$/

/**
 * Checks a subset against the table: its where clause through the same
 * compiler as shape where clauses (allow-list, types, `$n` bound to the
 * subset's own params), its order_by through {@link parseOrderBy}. Throws
 * {@link SubsetError}; Electric nests every where or params problem under
 * `subset.where`.
 */
export async function compileSubset(request: SubsetRequest, table: TableInfo): Promise<CompiledSubset> {
  let where: WhereClause | undefined
  if (request.where !== undefined && request.where.trim() !== '') {
    const params = orderedParams(request.params)
    try {
      where = await compileWhere(request.where, { columns: whereColumns(table), params })
    } catch (error) {
      if (error instanceof WhereClauseError) throw new SubsetError('invalid_where', error.message, { field: 'where', cause: error })
      throw error
    }
  }
  const orderBy = request.orderBy === undefined ? undefined : await parseOrderBy(request.orderBy, table)
  return { where, orderBy, limit: request.limit, offset: request.offset }
}

/** `{"1": a, "2": b}` → `[a, b]`: keys are integers 1..n without gaps, as for shape params. */
function orderedParams(params: Readonly<Record<string, string>>): string[] {
  const numbered: Array<[bigint, string]> = []
  for (const [key, value] of Object.entries(params)) {
    if (!INTEGER_KEY.test(key)) throw new SubsetError('invalid_where', ParamMessage.paramKeysNotNumbers, { field: 'where' })
    numbered.push([BigInt(key), value])
  }
  numbered.sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
  numbered.forEach(([n], i) => {
    if (n !== BigInt(i + 1)) throw new SubsetError('invalid_where', ParamMessage.paramKeysNotSequential, { field: 'where' })
  })
  return numbered.map(([, value]) => value)
}

export interface BuildSubsetQueryOptions {
  readonly table: TableInfo
  /** The shape: its where clause, params and column projection. */
  readonly definition: ShapeDefinition
  readonly subset: CompiledSubset
  /** Put in every row's headers as `snapshot_mark`. */
  readonly snapshotMark: number
  /**
   * More header fragments (SQL, with the definition's `$n`): a subquery
   * shape's `tags` and `active_conditions`, computed in the subset's snapshot.
   */
  readonly headers?: readonly string[] | undefined
}

/**
 * The one SELECT of a subset snapshot. The two clauses number their
 * parameters independently (`$1` of the subset is its own first param), so
 * each clause's `$n` are renumbered into one dense list: the lexer finds the
 * parameter tokens (never a `$1` inside a string literal or a quoted name),
 * and a param the clause does not use is dropped, since Postgres cannot type
 * an unused untyped parameter.
 */
export function buildSubsetQuery(options: BuildSubsetQueryOptions): SubsetQuery {
  const { definition, subset, table } = options
  const values: string[] = []
  const clauses: string[] = []
  if (definition.where !== undefined) {
    clauses.push(renumberParams(definition.where, (n) => definition.params[String(n)], values))
  }
  if (subset.where !== undefined) {
    const params = subset.where.params
    clauses.push(renumberParams(subset.where.canonical, (n) => params[n - 1], values))
  }
  const where = clauses.length === 0 ? undefined : clauses.map((clause) => `(${clause})`).join(' AND ')
  const headers = options.headers?.map((sql) => renumberParams(sql, (n) => definition.params[String(n)], values))
  let text = buildSnapshotQuery(table, { where, columns: definition.columns, snapshotMark: options.snapshotMark, headers })
  if (subset.orderBy !== undefined && subset.orderBy.length > 0) text += ` ORDER BY ${orderBySql(subset.orderBy, table)}`
  if (subset.limit !== undefined) text += ` LIMIT ${nonNegative(subset.limit, 'limit')}`
  if (subset.offset !== undefined) text += ` OFFSET ${nonNegative(subset.offset, 'offset')}`
  return { text, values }
}

/** The request parser checked these already; printing anything else into SQL would be a bug of ours. */
function nonNegative(value: number, name: string): string {
  if (!Number.isSafeInteger(value) || value < 0) throw new Error(`subset ${name} must be a non-negative integer, not ${value}`)
  return String(value)
}
