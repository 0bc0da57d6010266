import type { RelationName } from './identifiers.js'
import type { RowValues } from './messages.js'

/**
 * Row keys (docs/protocol.md §3.3). Clients compare keys as strings, so every
 * server and every snapshot query must build exactly these bytes:
 *
 *   "<schema>"."<table>"/"<v1>"/"<v2>"…
 *
 * - Values are the primary-key columns in key order, as text, each in double
 *   quotes. Quotes inside are *not* escaped; `/` is doubled, which is enough to
 *   keep the separator unambiguous. SQL NULL is a bare `_` (no quotes), so it
 *   differs from the string "_".
 * - With no primary key, every column is used, ordered by column name
 *   (code-point order, as Elixir sorts binaries).
 * - In the schema and table names `/` and `.` are doubled; quotes are left as is.
 */

export function rowKeyPrefix(relation: RelationName): string {
  return `"${escapeRelationPart(relation.schema)}"."${escapeRelationPart(relation.name)}"`
}

/** Appends the key components to a prefix from `rowKeyPrefix` (compute the prefix once per relation). */
export function rowKeyFromValues(prefix: string, values: readonly (string | null)[]): string {
  let key = prefix
  for (const value of values) key += keyPart(value)
  return key
}

/** `rowKeyFromValues(prefix, [value])`, for a one-column key, without the array. */
export function rowKeyFromValue(prefix: string, value: string | null): string {
  return prefix + keyPart(value)
}

function keyPart(value: string | null): string {
  if (value === null) return '/_'
  return `/"${value.includes('/') ? value.replaceAll('/', '//') : value}"`
}

/**
 * The key of `record` in `relation`. `primaryKey` lists the key columns in key
 * order; an empty list means the table has none and all columns count.
 */
export function buildRowKey(relation: RelationName, record: RowValues, primaryKey: readonly string[]): string {
  const prefix = rowKeyPrefix(relation)
  if (primaryKey.length === 0) {
    const columns = Object.keys(record).sort(compareCodePoints)
    return rowKeyFromValues(prefix, columns.map((column) => record[column] ?? null))
  }
  return rowKeyFromValues(
    prefix,
    primaryKey.map((column) => {
      const value = record[column]
      if (value === undefined) throw new Error(`row has no value for primary-key column ${JSON.stringify(column)}`)
      return value
    }),
  )
}

function escapeRelationPart(part: string): string {
  return part.replaceAll('/', '//').replaceAll('.', '..')
}

/** UTF-8 byte order, which is code-point order; JS's default sort is UTF-16 unit order. */
export function compareCodePoints(a: string, b: string): number {
  const length = Math.min(a.length, b.length)
  for (let i = 0; i < length; i++) {
    const x = a.charCodeAt(i)
    const y = b.charCodeAt(i)
    if (x === y) continue
    // Below the surrogate range both orders agree; a surrogate (an astral code
    // point) must sort after U+E000..U+FFFF, which UTF-16 order puts after it.
    const xs = x >= 0xd800 && x <= 0xdfff
    const ys = y >= 0xd800 && y <= 0xdfff
    if (xs !== ys) return xs ? 1 : -1
    return x - y
  }
  return a.length - b.length
}
