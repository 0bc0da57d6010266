import { formatRelation, quoteIdentifier, rowKeyPrefix } from '@sluice/protocol'
import type { TableColumn, TableInfo } from '../table-catalog.js'
import { SnapshotError } from './snapshot-error.js'

export interface SnapshotQueryOptions {
  /**
   * The where clause's canonical text (`WhereClause.canonical`): parsed and
   * allow-listed already; its `$1..$n` are bound as parameters of unknown
   * type, the way the where compiler types them.
   */
  readonly where?: string | undefined
  /** Selected columns; undefined means all. Must include every primary-key column. */
  readonly columns?: readonly string[] | undefined
  /** A subset snapshot's mark (docs/protocol.md §6): added to every row's headers as `snapshot_mark`. */
  readonly snapshotMark?: number | undefined
  /**
   * SQL expressions that each return a JSON fragment (`,"name":…`) added to
   * every row's headers, after the standard ones: the tags of subquery shapes.
   */
  readonly headers?: readonly string[] | undefined
}

/**
 * One SELECT whose single text column is each row's complete shape-log line
 * (docs/protocol.md §3.1, §9), built in Postgres so rows stream through as bytes:
 *
 *   {"key":K,"value":{"c1":V1,…},"headers":{"operation":"insert","relation":["schema","table"]}}
 *
 * - Values (selected columns, table order) are `null` or the column's text as
 *   a JSON string. The text is what the type's output function prints: the
 *   same text pgoutput sends for the column, so a row reads the same in the
 *   snapshot and in later changes. For most types that is `col::text`; where a
 *   cast function to text prints something else (bool `true` vs `t`, bpchar
 *   without its padding, inet with `/32`, their domains, user casts) the
 *   output function is called through `concat()` instead.
 * - K is `@sluice/protocol`'s row key (what ChangeEncoder puts on changes)
 *   built from the same text: the primary-key values in key order, or with no
 *   primary key every column (selected or not) in code-point name order.
 * - JSON escaping is Postgres's `to_json(text)`, which escapes exactly the
 *   characters `JSON.stringify` does, so the bytes match the change encoder's.
 * - Column names, the relation and the key prefix are JSON-encoded here and
 *   embedded as SQL string literals; identifiers are always quoted.
 * - A regular table is read with `ONLY`: rows of inheritance children are
 *   published under the children's own relations. A partitioned table is read
 *   whole (its rows live in its partitions).
 */
export function buildSnapshotQuery(info: TableInfo, options: SnapshotQueryOptions = {}): string {
  const byName = new Map(info.columns.map((column) => [column.name, column]))
  let selected: readonly TableColumn[] = info.columns
  if (options.columns !== undefined) {
    const wanted = new Set<string>()
    for (const name of options.columns) {
      if (!byName.has(name)) throw new SnapshotError('invalid_request', `selected column ${JSON.stringify(name)} is not a column of ${describe(info)}`)
      wanted.add(name)
    }
    for (const name of info.primaryKey) {
      if (!wanted.has(name)) throw new SnapshotError('invalid_request', `selected columns must include primary-key column ${JSON.stringify(name)}`)
    }
    selected = info.columns.filter((column) => wanted.has(column.name))
  }

  const keyColumns =
    info.primaryKey.length > 0
      ? info.primaryKey.map((name) => byName.get(name) as TableColumn)
      : [...info.columns].sort((a, b) => compareCodePoints(a.name, b.name))

  const parts = new Parts()
  parts.literal('{"key":')
  parts.expr(`pg_catalog.to_json(${keyExpression(info, keyColumns)})::pg_catalog.text`)
  parts.literal(',"value":{')
  selected.forEach((column, i) => {
    parts.literal(`${i > 0 ? ',' : ''}${JSON.stringify(column.name)}:`)
    parts.expr(`COALESCE(pg_catalog.to_json(${columnText(column)})::pg_catalog.text, 'null')`)
  })
  const mark = options.snapshotMark
  if (mark !== undefined && !Number.isSafeInteger(mark)) throw new SnapshotError('invalid_request', `snapshotMark must be an integer, not ${mark}`)
  const markHeader = mark === undefined ? '' : `,"snapshot_mark":${mark}`
  parts.literal(`},"headers":{"operation":"insert","relation":${JSON.stringify([info.schema, info.name])}${markHeader}`)
  for (const header of options.headers ?? []) parts.expr(header)
  parts.literal('}}')

  const from = `${info.kind === 'table' ? 'ONLY ' : ''}${formatRelation({ schema: info.schema, name: info.name })}`
  const where = options.where === undefined || options.where.trim() === '' ? '' : ` WHERE (${options.where})`
  return `SELECT ${parts.sql()} AS line FROM ${from}${where}`
}

/**
 * The column's text as the type's output function prints it (pgoutput's
 * text), NULL for NULL. `num_nulls` tests the value itself: `IS NULL` would
 * also be true for a composite whose fields are all NULL.
 */
export function columnText(column: TableColumn): string {
  const ident = quoteIdentifier(column.name)
  if (column.castToTextIsOutput) return `${ident}::pg_catalog.text`
  return `CASE WHEN pg_catalog.num_nulls(${ident}) = 0 THEN pg_catalog.concat(${ident}) END`
}

/** `'"s"."t"/' || component || '/' || component…`: never NULL (a NULL component is `_`). */
function keyExpression(info: TableInfo, columns: readonly TableColumn[]): string {
  const parts = new Parts()
  parts.literal(rowKeyPrefix({ schema: info.schema, name: info.name }))
  for (const column of columns) {
    parts.literal('/')
    parts.expr(`COALESCE('"' || pg_catalog.replace(${columnText(column)}, '/', '//') || '"', '_')`)
  }
  return parts.sql()
}

/**
 * Text pieces joined with `||`, adjacent literals merged, as a balanced tree
 * of parenthesised concatenations: a left-deep chain thousands of operators
 * long (a wide table) would recurse that deep in Postgres's parser and planner.
 */
class Parts {
  readonly #items: string[] = []
  #pending: string | undefined

  literal(text: string): void {
    this.#pending = (this.#pending ?? '') + text
  }

  expr(sql: string): void {
    this.#flush()
    this.#items.push(sql)
  }

  sql(): string {
    this.#flush()
    if (this.#items.length === 0) return `''::pg_catalog.text`
    return balanced(this.#items, 0, this.#items.length)
  }

  #flush(): void {
    if (this.#pending !== undefined) this.#items.push(`${sqlLiteral(this.#pending)}::pg_catalog.text`)
    this.#pending = undefined
  }
}

function balanced(items: readonly string[], from: number, to: number): string {
  if (to - from === 1) return items[from] as string
  const middle = (from + to) >>> 1
  return `(${balanced(items, from, middle)} || ${balanced(items, middle, to)})`
}

/** A standard-conforming string literal (the snapshot transaction sets standard_conforming_strings on). */
function sqlLiteral(text: string): string {
  return `'${text.replaceAll("'", "''")}'`
}

function describe(info: TableInfo): string {
  return `${JSON.stringify(info.schema)}.${JSON.stringify(info.name)}`
}

/** Code-point (UTF-8 byte) order, as `buildRowKey` orders the columns of a table without a primary key. */
function compareCodePoints(a: string, b: string): number {
  return Buffer.compare(Buffer.from(a, 'utf8'), Buffer.from(b, 'utf8'))
}
