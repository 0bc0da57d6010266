import { formatRelation, quoteIdentifier } from '@sluice/protocol'
import { parseSync } from 'libpg-query'
import { loadWhereParser } from '../../where/index.js'
import type { TableInfo } from '../table-catalog.js'
import { SubsetError } from './subset-error.js'

/**
 * A subset's `order_by` (docs/protocol.md §6). The text goes to Postgres's own
 * parser as `SELECT 1 ORDER BY <text>`, and only a statement of exactly that
 * shape is accepted, whose sort keys are bare names of the table's columns with
 * an optional direction and NULLS placement. Everything else is refused with a
 * 400: functions, operators, subqueries, `USING`, `COLLATE`, qualified names,
 * numbers (output positions), `;` and trailing clauses. The SQL that reaches
 * Postgres is printed back from the checked keys (each name re-quoted and
 * qualified with the table), never taken from the request text.
 *
 * Why nothing more: this is what the official client produces
 * (`"col" [DESC] [NULLS FIRST|LAST]`, comma-separated), and every extra form
 * is either a way to run code per row (functions) or a new way to fail at
 * query time (a missing collation). Electric itself accepts any expression
 * whose column references exist; a client relying on that gets a clear 400.
 */

export interface OrderByKey {
  readonly column: string
  readonly direction: 'asc' | 'desc'
  /** Absent: Postgres's default (NULLS LAST for ASC, NULLS FIRST for DESC). */
  readonly nulls?: 'first' | 'last'
}

/** An order_by longer than this is refused before parsing: a real one names a few columns. */
export const MAX_ORDER_BY_LENGTH = 8 * 1024
/** More sort keys than this is refused: Postgres would sort by them all, each costing comparisons. */
export const MAX_ORDER_BY_KEYS = 64

const PREFIX = 'SELECT 1 ORDER BY '
const ALLOWED_SELECT_KEYS: ReadonlySet<string> = new Set(['targetList', 'sortClause', 'limitOption', 'op'])

type Raw = Readonly<Record<string, unknown>>

/** Parses and checks an order_by against the table's columns. Throws {@link SubsetError}. */
export async function parseOrderBy(text: string, table: TableInfo): Promise<OrderByKey[]> {
  await loadWhereParser()
  return parseOrderBySync(text, table)
}

/** As {@link parseOrderBy}, once the parser is loaded (any where-clause compilation loads it). */
export function parseOrderBySync(text: string, table: TableInfo): OrderByKey[] {
  const fail = (reason: ConstructorParameters<typeof SubsetError>[0], message: string): never => {
    throw new SubsetError(reason, message, { field: 'order_by' })
  }
  if (text.length > MAX_ORDER_BY_LENGTH) {
    fail('limit_exceeded', `order_by is too long (${text.length} characters; the limit is ${MAX_ORDER_BY_LENGTH})`)
  }
  // libpg_query reads a C string: it would stop at a NUL and never see what follows.
  if (text.includes('\u0000')) fail('syntax_error', 'order_by must not contain a NUL character')
  let parsed: { stmts?: readonly { stmt?: Raw; stmt_len?: number }[] }
  try {
    parsed = parseSync(PREFIX + text) as typeof parsed
  } catch (error) {
    const details = (error as { sqlDetails?: { message: string; cursorPosition: number } }).sqlDetails
    if (details !== undefined) fail('syntax_error', `At location ${details.cursorPosition}: ${details.message}`)
    if (error instanceof RangeError) fail('limit_exceeded', 'order_by is nested too deeply')
    fail('syntax_error', `Invalid order_by: ${(error as Error).message}`)
  }
  const statements = parsed!.stmts ?? []
  // `a; DROP TABLE x` parses as two statements; `a;` as one with a length.
  if (statements.length !== 1 || (statements[0]?.stmt_len ?? 0) !== 0) fail('not_an_order_by', 'Unexpected `;` in order by')
  const select = statements[0]?.stmt?.['SelectStmt'] as Raw | undefined
  if (select === undefined) fail('not_an_order_by', 'order_by must be a list of columns')
  const extra = Object.keys(select!).filter((key) => !ALLOWED_SELECT_KEYS.has(key))
  if (select!['op'] !== 'SETOP_NONE' || select!['limitOption'] !== 'LIMIT_OPTION_DEFAULT' || extra.length > 0) {
    fail('not_an_order_by', 'malformed order_by ending with SQL clauses')
  }
  const sorts = (select!['sortClause'] as readonly Raw[] | undefined) ?? []
  if (sorts.length === 0) fail('not_an_order_by', 'order_by must name at least one column')
  if (sorts.length > MAX_ORDER_BY_KEYS) fail('limit_exceeded', `order_by has too many keys (${sorts.length}; the limit is ${MAX_ORDER_BY_KEYS})`)

  const columns = new Set(table.columns.map((column) => column.name))
  return sorts.map((raw): OrderByKey => {
    const sortBy = raw['SortBy'] as Raw | undefined
    if (sortBy === undefined) return fail('unsupported', 'order_by must be a list of columns')
    const [tag, node] = unwrap(sortBy['node'])
    const at = `At location ${locationOf(node, sortBy)}: `
    if (tag !== 'ColumnRef') return fail('unsupported', `${at}only column names, with ASC or DESC and NULLS FIRST or LAST, may be used in order_by (found ${describe(tag)})`)
    const fields = (node['fields'] as readonly Raw[] | undefined) ?? []
    const names = fields.map((field) => (field['String'] as { sval?: string } | undefined)?.sval)
    if (names.length !== 1 || names[0] === undefined) {
      const shown = names.map((name) => (name === undefined ? '*' : quoteIdentifier(name))).join('.')
      return fail('unknown_column', `${at}unknown reference ${shown}: use a bare column name of the table`)
    }
    const column = names[0]
    if (!columns.has(column)) return fail('unknown_column', `${at}unknown reference ${quoteIdentifier(column)}`)
    const dir = sortBy['sortby_dir']
    if (dir === 'SORTBY_USING') return fail('unsupported', `${at}USING operators are not allowed in order_by`)
    const nulls = sortBy['sortby_nulls']
    return {
      column,
      direction: dir === 'SORTBY_DESC' ? 'desc' : 'asc',
      ...(nulls === 'SORTBY_NULLS_FIRST' ? { nulls: 'first' as const } : nulls === 'SORTBY_NULLS_LAST' ? { nulls: 'last' as const } : {}),
    }
  })
}

/**
 * The ORDER BY list as SQL, every column qualified with the table: a bare name
 * in ORDER BY would first match an output column of the snapshot query (its
 * one column is called `line`), so a table column named `line` would sort by
 * the JSON text instead.
 */
export function orderBySql(keys: readonly OrderByKey[], table: TableInfo): string {
  const relation = formatRelation({ schema: table.schema, name: table.name })
  return keys
    .map((key) => {
      const nulls = key.nulls === undefined ? '' : key.nulls === 'first' ? ' NULLS FIRST' : ' NULLS LAST'
      return `${relation}.${quoteIdentifier(key.column)} ${key.direction === 'desc' ? 'DESC' : 'ASC'}${nulls}`
    })
    .join(', ')
}

function unwrap(raw: unknown): [string, Raw] {
  const entry = raw !== null && typeof raw === 'object' ? Object.entries(raw as Raw)[0] : undefined
  return entry === undefined ? ['nothing', {}] : [entry[0], (entry[1] ?? {}) as Raw]
}

/** Offsets are of the whole `SELECT 1 ORDER BY …` statement, as Electric reports them. */
function locationOf(node: Raw, sortBy: Raw): number {
  const own = node['location']
  if (typeof own === 'number' && own >= 0) return own
  const fallback = sortBy['location']
  return typeof fallback === 'number' && fallback >= 0 ? fallback : PREFIX.length
}

const NODE_WORDS: Readonly<Record<string, string>> = {
  FuncCall: 'a function call',
  SubLink: 'a subquery',
  A_Expr: 'an operator',
  A_Const: 'a constant',
  TypeCast: 'a cast',
  CollateClause: 'COLLATE',
  BoolExpr: 'a boolean expression',
  ParamRef: 'a parameter',
  CaseExpr: 'CASE',
}

function describe(tag: string): string {
  return NODE_WORDS[tag] ?? `an expression (${tag})`
}
