import type { ColumnSchema, IntervalFields, ShapeSchema } from '@sluice/protocol'
import type { TableColumn, TableInfo } from '../shape-service.js'

/**
 * The `electric-schema` header (docs/protocol.md §7) from the catalog's TableInfo:
 * selected columns in table order, array columns by element type with `dims`,
 * `pk_index`, `not_null`, and the type modifier decoded as Postgres's
 * `format_type` reads it. Cached per (table info, column list): a TableInfo is
 * immutable and shared by every shape on the table.
 */

/** Postgres's VARHDRSZ: varchar, bpchar and numeric typmods carry it. */
const VARHDRSZ = 4
/** interval typmod: the low 16 bits are the precision, 0xffff meaning "none". */
const INTERVAL_FULL_PRECISION = 0xffff
/** interval typmod: the range mask in bits 16..30; all bits set means no field restriction. */
const INTERVAL_FULL_RANGE = 0x7fff

// Field bits of Postgres's datetime.h (MONTH=1, YEAR=2, DAY=3, HOUR=10, MINUTE=11, SECOND=12).
const MONTH = 1 << 1
const YEAR = 1 << 2
const DAY = 1 << 3
const HOUR = 1 << 10
const MINUTE = 1 << 11
const SECOND = 1 << 12

const INTERVAL_FIELDS: ReadonlyMap<number, IntervalFields> = new Map<number, IntervalFields>([
  [YEAR, 'YEAR'],
  [MONTH, 'MONTH'],
  [DAY, 'DAY'],
  [HOUR, 'HOUR'],
  [MINUTE, 'MINUTE'],
  [SECOND, 'SECOND'],
  [YEAR | MONTH, 'YEAR TO MONTH'],
  [DAY | HOUR, 'DAY TO HOUR'],
  [DAY | HOUR | MINUTE, 'DAY TO MINUTE'],
  [DAY | HOUR | MINUTE | SECOND, 'DAY TO SECOND'],
  [HOUR | MINUTE, 'HOUR TO MINUTE'],
  [HOUR | MINUTE | SECOND, 'HOUR TO SECOND'],
  [MINUTE | SECOND, 'MINUTE TO SECOND'],
])

const PRECISION_TYPES = new Set(['time', 'timetz', 'timestamp', 'timestamptz'])

export function columnSchema(column: TableColumn): ColumnSchema {
  const isArray = column.dims > 0
  const type = isArray ? (column.elementTypeName ?? column.typeName.replace(/^_/, '')) : column.typeName
  const out: { -readonly [K in keyof ColumnSchema]: ColumnSchema[K] } = { type }
  if (isArray) out.dims = column.dims
  if (column.pkIndex !== undefined) out.pk_index = column.pkIndex
  if (column.notNull || column.pkIndex !== undefined) out.not_null = true
  Object.assign(out, modifiers(type, column.typeMod))
  return out
}

function modifiers(type: string, typmod: number): Partial<ColumnSchema> {
  if (typmod < 0) return {}
  switch (type) {
    case 'varchar':
      return { max_length: typmod - VARHDRSZ }
    case 'bpchar':
      return { length: typmod - VARHDRSZ }
    case 'bit':
    case 'varbit':
      return { length: typmod }
    case 'numeric': {
      const t = typmod - VARHDRSZ
      // Scale is an 11-bit signed field since Postgres 15 (negative scales).
      return { precision: (t >> 16) & 0xffff, scale: ((t & 0x7ff) ^ 1024) - 1024 }
    }
    case 'interval': {
      const precision = typmod & 0xffff
      const range = (typmod >> 16) & INTERVAL_FULL_RANGE
      const fields = range === INTERVAL_FULL_RANGE ? undefined : INTERVAL_FIELDS.get(range)
      return {
        ...(fields === undefined ? {} : { fields }),
        ...(precision === INTERVAL_FULL_PRECISION ? {} : { precision }),
      }
    }
    default:
      return PRECISION_TYPES.has(type) ? { precision: typmod } : { type_mod: typmod }
  }
}

export function shapeSchema(table: TableInfo, columns: readonly string[] | undefined): ShapeSchema {
  const selected = columns === undefined ? undefined : new Set(columns)
  const schema: Record<string, ColumnSchema> = {}
  for (const column of table.columns) {
    if (selected === undefined || selected.has(column.name)) schema[column.name] = columnSchema(column)
  }
  return schema
}

const cache = new WeakMap<TableInfo, Map<string, string>>()

/** The header value, memoised per table info and column list. */
export function schemaHeader(table: TableInfo, columns: readonly string[] | undefined): string {
  let perTable = cache.get(table)
  if (perTable === undefined) {
    perTable = new Map()
    cache.set(table, perTable)
  }
  const key = columns === undefined ? '*' : JSON.stringify(columns)
  let value = perTable.get(key)
  if (value === undefined) {
    value = headerBytes(JSON.stringify(shapeSchema(table, columns)))
    perTable.set(key, value)
  }
  return value
}

/**
 * Node writes header strings as latin1, one byte per char, and refuses chars
 * above U+00FF. Column names can be any Unicode: send their UTF-8 bytes, as
 * Electric does, by spelling each byte as one latin1 char. DEL, the one
 * control character JSON.stringify leaves as it is, Node refuses in a header:
 * it is written as its JSON escape (it can only be inside a name's string).
 */
function headerBytes(text: string): string {
  const json = text.includes('\x7f') ? text.replaceAll('\x7f', '\\u007f') : text
  return /^[\x00-\x7f]*$/.test(json) ? json : Buffer.from(json, 'utf8').toString('latin1')
}
