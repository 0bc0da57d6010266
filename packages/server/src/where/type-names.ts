import type { EnumType, ScalarType, SqlType, Typmod } from './sql-type.js'
import { arrayOf, isScalarName, scalar } from './sql-type.js'
import { WhereClauseError } from './where-error.js'

/**
 * Resolves a parse-tree TypeName (`int`, `pg_catalog.int4`, `numeric(10,2)`,
 * `text[]`, an enum of the table) to our types, with Postgres's checks on type
 * modifiers.
 */

export interface ResolvedTypeName {
  readonly type: SqlType
  readonly typmod: Typmod | undefined
  /** Canonical spelling, for the normalised clause text. */
  readonly sql: string
}

/** Built-in types Postgres has that where clauses do not evaluate: named so the error says "not supported". */
const KNOWN_UNSUPPORTED: ReadonlySet<string> = new Set([
  'bytea',
  'char',
  'name',
  'oid',
  'timetz',
  'money',
  'inet',
  'cidr',
  'macaddr',
  'macaddr8',
  'bit',
  'varbit',
  'point',
  'line',
  'lseg',
  'box',
  'path',
  'polygon',
  'circle',
  'xml',
  'tsvector',
  'tsquery',
  'int4range',
  'int8range',
  'numrange',
  'tsrange',
  'tstzrange',
  'daterange',
  'regclass',
  'regtype',
  'record',
  'jsonpath',
  'pg_lsn',
  'txid_snapshot',
  'unknown',
])

interface RawTypeName {
  readonly names?: readonly { readonly String?: { readonly sval?: string } }[]
  readonly typmods?: readonly unknown[]
  readonly arrayBounds?: readonly unknown[]
  readonly setof?: boolean
  readonly pct_type?: boolean
  readonly location?: number
}

function typmodInt(node: unknown, typeName: string): number {
  const value = (node as { A_Const?: { ival?: { ival?: number } } }).A_Const
  if (value === undefined) {
    throw new WhereClauseError('datatype_mismatch', `type modifiers must be simple constants or identifiers (type ${typeName})`)
  }
  return value.ival?.ival ?? 0
}

export function resolveTypeName(raw: RawTypeName, enums: ReadonlyMap<string, EnumType>): ResolvedTypeName {
  const names = (raw.names ?? []).map((n) => n.String?.sval ?? '')
  const location = raw.location
  const spelled = names.join('.')
  if (raw.setof === true || raw.pct_type === true) {
    throw new WhereClauseError('unsupported', `type ${spelled} is not supported in where clauses`, positioned(location))
  }
  let base: string
  if (names.length === 2 && names[0] === 'pg_catalog') base = names[1] ?? ''
  else if (names.length === 1) base = names[0] ?? ''
  else {
    throw new WhereClauseError('unsupported', `schema-qualified type names are not supported: ${spelled}`, positioned(location))
  }
  let element: EnumType | ScalarType
  if (names.length === 1 && enums.has(base)) element = enums.get(base) as EnumType
  else if (isScalarName(base)) element = scalar(base)
  else if (KNOWN_UNSUPPORTED.has(base) || names.length === 2) {
    throw new WhereClauseError(
      'unsupported',
      `type ${base === 'char' ? '"char"' : base} is not supported in where clauses`,
      positioned(location),
    )
  } else throw new WhereClauseError('undefined_type', `type "${spelled}" does not exist`, positioned(location))

  const typmods = raw.typmods ?? []
  let typmod: Typmod | undefined
  const name = element.name
  if (typmods.length > 0) typmod = resolveTypmod(name, typmods.map((m) => typmodInt(m, name)), location)
  const isArray = (raw.arrayBounds?.length ?? 0) > 0
  const type: SqlType = isArray ? arrayOf(element) : element
  const modifier =
    typmod === undefined
      ? ''
      : typmod.kind === 'numeric'
        ? `(${typmod.precision},${typmod.scale})`
        : typmod.kind === 'length'
          ? `(${typmod.length})`
          : `(${typmod.precision})`
  const sqlName = element.kind === 'enum' ? quoteIdent(element.name) : name
  return { type, typmod, sql: `${sqlName}${modifier}${isArray ? '[]' : ''}` }
}

/** Postgres's identifier quoting rule, enough for type and column names in canonical text. */
export function quoteIdent(name: string): string {
  return `"${name.replaceAll('"', '""')}"`
}

function positioned(location: number | undefined): { position?: number } {
  return location === undefined || location < 0 ? {} : { position: location }
}

/** Postgres's VARCHAR and BPCHAR length limit (MaxAttrSize). */
const MAX_STRING_LENGTH = 10_485_760
/** NUMERIC_MAX_PRECISION and the scale bounds of Postgres 15+. */
const MAX_NUMERIC_PRECISION = 1000
const MIN_NUMERIC_SCALE = -1000
const MAX_NUMERIC_SCALE = 1000
/** MAX_TIMESTAMP_PRECISION: larger precisions are reduced to it, as Postgres does (with a warning). */
const MAX_TIME_PRECISION = 6

function resolveTypmod(name: string, values: readonly number[], location: number | undefined): Typmod {
  const fail = (message: string): never => {
    throw new WhereClauseError('datatype_mismatch', message, positioned(location))
  }
  switch (name) {
    case 'numeric': {
      if (values.length > 2) fail('invalid NUMERIC type modifier')
      const precision = values[0] ?? 0
      const scale = values[1] ?? 0
      if (precision < 1 || precision > MAX_NUMERIC_PRECISION) {
        fail(`NUMERIC precision ${precision} must be between 1 and ${MAX_NUMERIC_PRECISION}`)
      }
      if (scale < MIN_NUMERIC_SCALE || scale > MAX_NUMERIC_SCALE) {
        fail(`NUMERIC scale ${scale} must be between ${MIN_NUMERIC_SCALE} and ${MAX_NUMERIC_SCALE}`)
      }
      return { kind: 'numeric', precision, scale }
    }
    case 'varchar':
    case 'bpchar': {
      const word = name === 'varchar' ? 'varchar' : 'char'
      if (values.length !== 1) fail(`invalid type modifier`)
      const length = values[0] ?? 0
      if (length < 1) fail(`length for type ${word} must be at least 1`)
      if (length > MAX_STRING_LENGTH) fail(`length for type ${word} cannot exceed ${MAX_STRING_LENGTH}`)
      return { kind: 'length', length }
    }
    case 'timestamp':
    case 'timestamptz':
    case 'time': {
      if (values.length !== 1) fail('invalid type modifier')
      const precision = values[0] ?? 0
      if (precision < 0) fail(`${name.toUpperCase()}(${precision}) precision must not be negative`)
      return { kind: 'precision', precision: Math.min(precision, MAX_TIME_PRECISION) }
    }
    case 'interval':
      throw new WhereClauseError(
        'unsupported',
        'interval field restrictions and precision are not supported in where clauses',
        positioned(location),
      )
    default:
      return fail(`type modifier is not allowed for type "${name}"`)
  }
}
