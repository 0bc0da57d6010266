import type { PostgresCluster } from '@sluice/test-utils'
import pg from 'pg'

/**
 * What the official client should hold for a row, worked out from Postgres
 * itself and the client's documented parsing rules (docs/protocol.md §7.1), never
 * from Sluice's output: Postgres prints each value under the display settings
 * of §3.5, and the text goes through the rule for the column's schema type.
 * Array literals are split by node-postgres's own text[] parser, a separate
 * implementation from the client's.
 */

/** docs/protocol.md §3.5: the session settings every value is printed under. */
const PROTOCOL_DISPLAY_SETTINGS: ReadonlyArray<[string, string]> = [
  ['bytea_output', 'hex'],
  ['DateStyle', 'ISO, DMY'],
  ['TimeZone', 'UTC'],
  ['extra_float_digits', '1'],
  ['IntervalStyle', 'iso_8601'],
]

/** One column as the `electric-schema` header describes it (docs/protocol.md §7). */
export interface SchemaEntry {
  readonly type: string
  readonly dims?: number
  readonly pk_index?: number
  readonly not_null?: true
  readonly max_length?: number
  readonly length?: number
  readonly precision?: number
  readonly scale?: number
  readonly fields?: string
  readonly type_mod?: number
}

/** text[]'s OID; pg-types' TypeId enum lists only scalar builtins, though its parser registry has the arrays. */
const TEXT_ARRAY_OID = 1009
const splitArrayLiteral = (pg.types.getTypeParser as (oid: number, format: 'text') => (text: string) => unknown)(TEXT_ARRAY_OID, 'text')

/** §7.1, one scalar. */
function parseScalar(text: string, type: string): unknown {
  switch (type) {
    case 'int2':
    case 'int4':
    case 'float4':
    case 'float8':
      return Number(text)
    case 'int8':
      return BigInt(text)
    case 'bool':
      return text === 'true' || text === 't'
    case 'json':
    case 'jsonb':
      return JSON.parse(text)
    default:
      return text
  }
}

function mapNested(value: unknown, type: string): unknown {
  if (value === null) return null
  if (Array.isArray(value)) return value.map((v) => mapNested(v, type))
  return parseScalar(value as string, type)
}

/** The value the client should hold for Postgres's text `text` of a column described by `entry`. */
export function clientValue(text: string | null, entry: SchemaEntry): unknown {
  if (text === null) return null
  if ((entry.dims ?? 0) > 0) return mapNested(splitArrayLiteral(text), entry.type)
  return parseScalar(text, entry.type)
}

export const quoteIdent = (name: string): string => `"${name.replaceAll('"', '""')}"`

/**
 * The rows of `relation` (already quoted) as the client should materialise them,
 * keyed by `keyOf` of the raw text row. `concat()` prints through the type's
 * output function, which keeps char(n)'s padding that a `::text` cast drops;
 * `num_nulls` because `IS NULL` is true for a composite whose fields are all
 * null, which is a value (`(,)`), not SQL NULL.
 */
export async function expectedClientRows(
  cluster: PostgresCluster,
  relation: string,
  schema: Readonly<Record<string, SchemaEntry>>,
  keyOf: (text: Record<string, string | null>) => string,
  where = 'true',
  params: readonly unknown[] = [],
): Promise<Map<string, Record<string, unknown>>> {
  const names = Object.keys(schema)
  const select = names.map((n) => `CASE WHEN num_nulls(${quoteIdent(n)}) = 1 THEN NULL ELSE concat(${quoteIdent(n)}) END AS ${quoteIdent(n)}`).join(', ')
  const client = await cluster.connect()
  try {
    for (const [name, value] of PROTOCOL_DISPLAY_SETTINGS) await client.query('SELECT set_config($1, $2, false)', [name, value])
    const { rows } = await client.query<Record<string, string | null>>(`SELECT ${select} FROM ${relation} WHERE ${where}`, [...params])
    const out = new Map<string, Record<string, unknown>>()
    for (const row of rows) {
      const parsed: Record<string, unknown> = {}
      for (const n of names) parsed[n] = clientValue(row[n] ?? null, schema[n]!)
      out.set(keyOf(row), parsed)
    }
    return out
  } finally {
    await client.end()
  }
}
