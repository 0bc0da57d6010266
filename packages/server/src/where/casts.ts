import { canCoerceImplicitly } from './catalog.js'
import type { ScalarName, SqlType, Typmod } from './sql-type.js'
import { isUnknown } from './sql-type.js'
import { codecFor } from './type-codec.js'
import type { ArrayValue } from './values/array.js'
import { mapArray } from './values/array.js'
import { boolToText } from './values/bool.js'
import {
  dateToTimestamp,
  roundTime,
  roundTimestamp,
  timestampToDate,
  timestampToTime,
} from './values/datetime.js'
import { bigintToFloat32, floatToBigint, floatToNumeric, numericToFloat, toFloat32 } from './values/float.js'
import { narrowInteger } from './values/integer.js'
import type { Interval } from './values/interval.js'
import { intervalToTime, timeToInterval } from './values/interval.js'
import type { Jsonb } from './values/json.js'
import { jsonbToBool, jsonbToNumeric, parseJsonb } from './values/json.js'
import type { Numeric } from './values/numeric.js'
import { applyNumericTypmod, fromBigint, numericToBigint } from './values/numeric.js'
import { applyBpcharLength, applyVarcharLength, trimBpchar } from './values/text.js'

/**
 * Type conversions, by the pathways Postgres would use (`find_coercion_pathway`):
 * a pg_cast function, a binary-compatible relabel, array element-wise coercion,
 * or I/O conversion through text. Each returns a pure value → value function;
 * NULL never reaches it (casts are strict).
 */
export type CastFn = (value: unknown) => unknown

export type CastContext = 'implicit' | 'explicit'

const identity: CastFn = (v) => v

type Word = 'smallint' | 'integer' | 'bigint'
const INT_WORD: Readonly<Record<'int2' | 'int4' | 'int8', Word>> = { int2: 'smallint', int4: 'integer', int8: 'bigint' }

function toInt(name: 'int2' | 'int4' | 'int8', big: bigint): number | bigint {
  return narrowInteger(name, big)
}

function intToBig(v: unknown): bigint {
  return typeof v === 'bigint' ? v : BigInt(v as number)
}

/** pg_cast function/binary entries among our scalar types, in any context; the boolean says implicit. */
function scalarCast(from: ScalarName, to: ScalarName): CastFn | undefined {
  const ints = ['int2', 'int4', 'int8'] as const
  const isInt = (n: ScalarName): n is 'int2' | 'int4' | 'int8' => (ints as readonly string[]).includes(n)
  const isFloat = (n: ScalarName): n is 'float4' | 'float8' => n === 'float4' || n === 'float8'
  if (isInt(from)) {
    if (isInt(to)) return (v) => toInt(to, intToBig(v))
    if (to === 'numeric') return (v) => fromBigint(intToBig(v))
    if (to === 'float8') return (v) => (typeof v === 'bigint' ? Number(v) : v)
    if (to === 'float4') return (v) => (typeof v === 'bigint' ? bigintToFloat32(v) : Math.fround(v as number))
    if (to === 'bool' && from === 'int4') return (v) => v !== 0
    return undefined
  }
  if (from === 'numeric') {
    if (isInt(to)) return (v) => toInt(to, numericToBigint(v as Numeric, INT_WORD[to]))
    if (isFloat(to)) return (v) => numericToFloat(to, v as Numeric)
    return undefined
  }
  if (isFloat(from)) {
    if (isInt(to)) return (v) => toInt(to, floatToBigint(v as number, INT_WORD[to]))
    if (to === 'numeric') return (v) => floatToNumeric(v as number, from === 'float8' ? 15 : 6)
    if (to === 'float8') return identity
    if (to === 'float4') return (v) => toFloat32(v as number)
    return undefined
  }
  switch (`${from}>${to}`) {
    case 'bool>int4':
      return (v) => (v ? 1 : 0)
    case 'bool>text':
    case 'bool>varchar':
    case 'bool>bpchar':
      return (v) => boolToText(v as boolean)
    case 'bpchar>text':
    case 'bpchar>varchar':
      return (v) => trimBpchar(v as string)
    case 'text>bpchar':
    case 'text>varchar':
    case 'varchar>text':
    case 'varchar>bpchar':
      return identity
    case 'date>timestamp':
    case 'date>timestamptz':
      return (v) => dateToTimestamp(v as number)
    case 'timestamp>timestamptz':
    case 'timestamptz>timestamp':
      // The session time zone is UTC: the instant and the wall-clock reading coincide.
      return identity
    case 'timestamp>date':
    case 'timestamptz>date':
      return (v) => timestampToDate(v as bigint)
    case 'timestamp>time':
    case 'timestamptz>time':
      return (v) => timestampToTime(v as bigint)
    case 'time>interval':
      return (v) => timeToInterval(v as number)
    case 'interval>time':
      return (v) => intervalToTime(v as Interval)
    case 'json>jsonb':
      return (v) => parseJsonb(v as string)
    case 'jsonb>json':
      return (v) => (v as Jsonb).text
    case 'jsonb>bool':
      return (v) => jsonbToBool(v as Jsonb)
    case 'jsonb>numeric':
      return (v) => jsonbToNumeric(v as Jsonb, 'numeric')
  }
  if (from === 'jsonb' && isInt(to)) {
    return (v) => toInt(to, numericToBigint(jsonbToNumeric(v as Jsonb, INT_WORD[to]), INT_WORD[to]))
  }
  if (from === 'jsonb' && isFloat(to)) {
    return (v) => numericToFloat(to, jsonbToNumeric(v as Jsonb, to === 'float8' ? 'double precision' : 'real'))
  }
  return undefined
}

const STRING_TYPES: ReadonlySet<string> = new Set(['text', 'varchar', 'bpchar'])

function isStringType(type: SqlType): boolean {
  return type.kind === 'scalar' && STRING_TYPES.has(type.name)
}

/**
 * The conversion from `from` to `to` in `context`, or undefined when Postgres
 * has no such cast (`cannot cast type X to Y`). Typmods are applied separately
 * ({@link typmodCoercion}).
 */
export function castFunction(from: SqlType, to: SqlType, context: CastContext): CastFn | undefined {
  if (from.key === to.key) return identity
  if (isUnknown(from)) {
    const codec = codecFor(to)
    return (v) => codec.parse(v as string)
  }
  if (context === 'implicit' && !canCoerceImplicitly(from, to)) return undefined
  if (from.kind === 'scalar' && to.kind === 'scalar') {
    const fn = scalarCast(from.name, to.name)
    if (fn !== undefined) return fn
  }
  if (from.kind === 'array' && to.kind === 'array') {
    const element = castFunction(from.element, to.element, context)
    if (element === undefined) return undefined
    return (v) => mapArray(v as ArrayValue<unknown>, element)
  }
  if (context === 'implicit') return undefined
  // I/O conversion: anything to a string type through its output function, a string type to anything through the input function.
  if (isStringType(to)) {
    const codec = codecFor(from)
    return (v) => codec.format(v)
  }
  if (isStringType(from)) {
    const codec = codecFor(to)
    return (v) => codec.parse(v as string)
  }
  return undefined
}

const STABLE_IO: ReadonlySet<string> = new Set(['date', 'time', 'timestamp', 'timestamptz', 'interval'])
const STABLE_FUNCTION_CASTS: ReadonlySet<string> = new Set([
  'date>timestamptz',
  'timestamp>timestamptz',
  'timestamptz>date',
  'timestamptz>time',
  'timestamptz>timestamp',
])

/** Whether the I/O function of the type is STABLE in Postgres (date/time ones read DateStyle; enum and array ones look up catalogs). */
function stableIo(type: SqlType, direction: 'in' | 'out'): boolean {
  if (type.kind === 'array' || type.kind === 'enum') return true
  if (type.kind !== 'scalar') return false
  return STABLE_IO.has(type.name) && !(type.name === 'time' && direction === 'out')
}

/** Whether Postgres's cast from `from` to `to` is STABLE, so its planner leaves it to run time. */
export function castIsStable(from: SqlType, to: SqlType): boolean {
  if (from.key === to.key || isUnknown(from)) return false
  if (from.kind === 'scalar' && to.kind === 'scalar') {
    if (scalarCast(from.name, to.name) !== undefined) return STABLE_FUNCTION_CASTS.has(`${from.name}>${to.name}`)
  }
  if (from.kind === 'array' && to.kind === 'array' && castFunction(from.element, to.element, 'explicit') !== undefined) {
    return castIsStable(from.element, to.element)
  }
  if (isStringType(to)) return stableIo(from, 'out')
  return stableIo(to, 'in')
}

/** Whether Postgres's parsing of the target type is reproduced for arbitrary text (not just constants). */
export function parsesAnyText(type: SqlType): boolean {
  const target = type.kind === 'array' ? type.element : type
  return !(target.kind === 'scalar' && ['date', 'time', 'timestamp', 'timestamptz', 'interval'].includes(target.name))
}

/** Whether a cast from `from` to `to` goes through `to`'s input function. */
export function castParsesText(from: SqlType, to: SqlType): boolean {
  if (from.key === to.key) return false
  if (isUnknown(from)) return true
  if (from.kind === 'array' && to.kind === 'array') return castParsesText(from.element, to.element)
  if (from.kind === 'scalar' && to.kind === 'scalar' && scalarCast(from.name, to.name) !== undefined) return false
  return isStringType(from)
}

/** The length coercion an explicit cast with a type modifier applies (`::numeric(10,2)`, `::varchar(3)`). */
export function typmodCoercion(type: SqlType, typmod: Typmod): CastFn {
  if (type.kind === 'array') {
    const element = typmodCoercion(type.element, typmod)
    return (v) => mapArray(v as ArrayValue<unknown>, element)
  }
  if (type.kind !== 'scalar') return identity
  switch (typmod.kind) {
    case 'numeric':
      return (v) => applyNumericTypmod(v as Numeric, typmod.precision, typmod.scale)
    case 'length':
      if (type.name === 'varchar') return (v) => applyVarcharLength(v as string, typmod.length)
      if (type.name === 'bpchar') return (v) => applyBpcharLength(v as string, typmod.length)
      return identity
    case 'precision':
      if (type.name === 'timestamp' || type.name === 'timestamptz') {
        return (v) => roundTimestamp(v as bigint, typmod.precision)
      }
      if (type.name === 'time') return (v) => roundTime(v as number, typmod.precision)
      return identity
  }
}

