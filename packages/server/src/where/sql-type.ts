/**
 * The SQL types a where clause is typed with, as the parser sees them.
 *
 * Types are compared by `key` (`int4`, `int4[]`, `enum:mood`), never by object
 * identity: enum types are built per table, and an array type is derived from
 * its element on demand.
 */

export const SCALAR_NAMES = [
  'bool',
  'int2',
  'int4',
  'int8',
  'numeric',
  'float4',
  'float8',
  'text',
  'varchar',
  'bpchar',
  'uuid',
  'date',
  'time',
  'timestamp',
  'timestamptz',
  'interval',
  'json',
  'jsonb',
  /** The type of a quoted literal or `$n` before context decides (Postgres's `unknown`). */
  'unknown',
] as const

export type ScalarName = (typeof SCALAR_NAMES)[number]

export interface ScalarType {
  readonly kind: 'scalar'
  readonly name: ScalarName
  readonly key: string
}

export interface EnumType {
  readonly kind: 'enum'
  readonly name: string
  readonly key: string
  /** Labels in the enum's sort order (`pg_enum.enumsortorder`). */
  readonly labels: readonly string[]
  /** Label → position in `labels`: comparisons are by position, not by text. */
  readonly order: ReadonlyMap<string, number>
}

/** A column type the evaluator does not interpret: only IS NULL and a cast to text see it. */
export interface OpaqueType {
  readonly kind: 'opaque'
  readonly name: string
  readonly key: string
}

export type ElementType = ScalarType | EnumType | OpaqueType

export interface ArrayType {
  readonly kind: 'array'
  readonly element: ElementType
  readonly key: string
}

export type SqlType = ElementType | ArrayType

/** Postgres's type categories (`pg_type.typcategory`), which drive overload resolution. */
export type TypeCategory = 'A' | 'B' | 'D' | 'E' | 'N' | 'S' | 'T' | 'U' | 'X'

const scalars = new Map<ScalarName, ScalarType>(
  SCALAR_NAMES.map((name) => [name, Object.freeze({ kind: 'scalar', name, key: name })]),
)

export function scalar(name: ScalarName): ScalarType {
  const type = scalars.get(name)
  if (type === undefined) throw new Error(`not a scalar type: ${name}`)
  return type
}

export const BOOL = scalar('bool')
export const INT2 = scalar('int2')
export const INT4 = scalar('int4')
export const INT8 = scalar('int8')
export const NUMERIC = scalar('numeric')
export const FLOAT4 = scalar('float4')
export const FLOAT8 = scalar('float8')
export const TEXT = scalar('text')
export const VARCHAR = scalar('varchar')
export const BPCHAR = scalar('bpchar')
export const UUID = scalar('uuid')
export const DATE = scalar('date')
export const TIME = scalar('time')
export const TIMESTAMP = scalar('timestamp')
export const TIMESTAMPTZ = scalar('timestamptz')
export const INTERVAL = scalar('interval')
export const JSON_TYPE = scalar('json')
export const JSONB = scalar('jsonb')
export const UNKNOWN = scalar('unknown')

export function isScalarName(name: string): name is ScalarName {
  return scalars.has(name as ScalarName) && name !== 'unknown'
}

export function enumType(name: string, labels: readonly string[]): EnumType {
  return Object.freeze({
    kind: 'enum',
    name,
    key: `enum:${name}`,
    labels: Object.freeze([...labels]),
    order: new Map(labels.map((label, index) => [label, index])),
  })
}

export function opaqueType(name: string): OpaqueType {
  return Object.freeze({ kind: 'opaque', name, key: `opaque:${name}` })
}

export function arrayOf(element: ElementType): ArrayType {
  return Object.freeze({ kind: 'array', element, key: `${element.key}[]` })
}

export function isUnknown(type: SqlType): boolean {
  return type.kind === 'scalar' && type.name === 'unknown'
}

export function isScalar(type: SqlType, ...names: readonly ScalarName[]): type is ScalarType {
  return type.kind === 'scalar' && (names.length === 0 || names.includes(type.name))
}

export function category(type: SqlType): TypeCategory {
  switch (type.kind) {
    case 'array':
      return 'A'
    case 'enum':
      return 'E'
    case 'opaque':
      return 'U'
    case 'scalar':
      return SCALAR_CATEGORY[type.name]
  }
}

const SCALAR_CATEGORY: Readonly<Record<ScalarName, TypeCategory>> = {
  bool: 'B',
  int2: 'N',
  int4: 'N',
  int8: 'N',
  numeric: 'N',
  float4: 'N',
  float8: 'N',
  text: 'S',
  varchar: 'S',
  bpchar: 'S',
  uuid: 'U',
  date: 'D',
  time: 'D',
  timestamp: 'D',
  timestamptz: 'D',
  interval: 'T',
  json: 'U',
  jsonb: 'U',
  unknown: 'X',
}

/** `pg_type.typispreferred` among our types. */
export function isPreferred(type: SqlType): boolean {
  return type.kind === 'scalar' && PREFERRED.has(type.name)
}

const PREFERRED: ReadonlySet<ScalarName> = new Set(['bool', 'float8', 'text', 'timestamptz', 'interval'])

/** The name Postgres prints in messages (`format_type`): `integer`, `character varying`, `mood[]`. */
export function displayName(type: SqlType): string {
  switch (type.kind) {
    case 'array':
      return `${displayName(type.element)}[]`
    case 'enum':
    case 'opaque':
      return type.name
    case 'scalar':
      return DISPLAY_NAMES[type.name]
  }
}

const DISPLAY_NAMES: Readonly<Record<ScalarName, string>> = {
  bool: 'boolean',
  int2: 'smallint',
  int4: 'integer',
  int8: 'bigint',
  numeric: 'numeric',
  float4: 'real',
  float8: 'double precision',
  text: 'text',
  varchar: 'character varying',
  bpchar: 'character',
  uuid: 'uuid',
  date: 'date',
  time: 'time without time zone',
  timestamp: 'timestamp without time zone',
  timestamptz: 'timestamp with time zone',
  interval: 'interval',
  json: 'json',
  jsonb: 'jsonb',
  unknown: 'unknown',
}

/** A type modifier as a cast may carry it: numeric(p, s), varchar(n) / char(n), timestamp(p). */
export type Typmod =
  | { readonly kind: 'numeric'; readonly precision: number; readonly scale: number }
  | { readonly kind: 'length'; readonly length: number }
  | { readonly kind: 'precision'; readonly precision: number }

export function formatTypmod(typmod: Typmod): string {
  switch (typmod.kind) {
    case 'numeric':
      return `(${typmod.precision},${typmod.scale})`
    case 'length':
      return `(${typmod.length})`
    case 'precision':
      return `(${typmod.precision})`
  }
}
