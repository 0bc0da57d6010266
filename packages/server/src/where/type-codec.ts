import type { ArrayType, EnumType, ScalarName, SqlType } from './sql-type.js'
import type { ArrayValue } from './values/array.js'
import { arrayEquals, compareArrays, formatArray, parseArray } from './values/array.js'
import { compareBool, formatBool, parseBool } from './values/bool.js'
import {
  compareDates,
  formatDate,
  formatTime,
  formatTimestamp,
  parseDate,
  parseTime,
  parseTimestamp,
} from './values/datetime.js'
import { compareFloat, floatKey, formatFloat, parseFloat, parseFloatOutput } from './values/float.js'
import { compareBigints, compareNumbers, parseInteger, parseIntegerOutput } from './values/integer.js'
import type { Interval } from './values/interval.js'
import { compareInterval, formatInterval, intervalKey, parseInterval } from './values/interval.js'
import type { Jsonb } from './values/json.js'
import { parseJson, parseJsonb } from './values/json.js'
import type { Numeric } from './values/numeric.js'
import { compareNumeric, formatNumeric, numericKey, parseNumeric } from './values/numeric.js'
import { compareBpchar, compareText, trimBpchar } from './values/text.js'
import { parseUuid } from './values/uuid.js'
import { EvaluationError } from './where-error.js'

/**
 * What the evaluator needs to know about values of one type: the input and
 * output functions, the default btree ordering and an equality key (a string
 * equal exactly when the type's `=` says equal, so values can be hashed).
 *
 * Values are JS representations chosen per type (see each module under
 * values/); SQL NULL is `null` and never reaches a codec.
 */
export interface TypeCodec {
  /** The input function: Postgres text → value. Throws {@link EvaluationError} like Postgres would. */
  readonly parse: (text: string) => unknown
  /** Faster parse for text Postgres itself printed (row values); same result as `parse`. */
  readonly parseOutput: (text: string) => unknown
  /** The output function: value → Postgres text (what `::text` and array output use). */
  readonly format: (value: unknown) => string
  /** Btree order, absent for types without one (json, jsonb ordering is not supported). */
  readonly compare: ((a: unknown, b: unknown) => number) | undefined
  /** Equality key, absent for types without `=` (json). */
  readonly key: ((value: unknown) => string) | undefined
  readonly equals: ((a: unknown, b: unknown) => boolean) | undefined
}

const identity = (value: unknown): string => value as string

function codec(
  parse: (text: string) => unknown,
  format: (value: unknown) => string,
  compare: ((a: unknown, b: unknown) => number) | undefined,
  key: ((value: unknown) => string) | undefined,
  parseOutput: (text: string) => unknown = parse,
  equals?: (a: unknown, b: unknown) => boolean,
): TypeCodec {
  return {
    parse,
    parseOutput,
    format,
    compare,
    key,
    equals: equals ?? (compare !== undefined ? (a, b) => compare(a, b) === 0 : undefined),
  }
}

const SCALAR_CODECS: Readonly<Record<ScalarName, TypeCodec>> = {
  bool: codec(parseBool, (v) => formatBool(v as boolean), (a, b) => compareBool(a as boolean, b as boolean), (v) => formatBool(v as boolean)),
  int2: codec(
    (t) => parseInteger('int2', t),
    (v) => String(v),
    (a, b) => compareNumbers(a as number, b as number),
    (v) => String(v),
    (t) => parseIntegerOutput('int2', t),
  ),
  int4: codec(
    (t) => parseInteger('int4', t),
    (v) => String(v),
    (a, b) => compareNumbers(a as number, b as number),
    (v) => String(v),
    (t) => parseIntegerOutput('int4', t),
  ),
  int8: codec(
    (t) => parseInteger('int8', t),
    (v) => String(v),
    (a, b) => compareBigints(a as bigint, b as bigint),
    (v) => String(v),
  ),
  numeric: codec(
    parseNumeric,
    (v) => formatNumeric(v as Numeric),
    (a, b) => compareNumeric(a as Numeric, b as Numeric),
    (v) => numericKey(v as Numeric),
  ),
  float4: codec(
    (t) => parseFloat('float4', t),
    (v) => formatFloat('float4', v as number),
    (a, b) => compareFloat(a as number, b as number),
    (v) => floatKey(v as number),
  ),
  float8: codec(
    (t) => parseFloat('float8', t),
    (v) => formatFloat('float8', v as number),
    (a, b) => compareFloat(a as number, b as number),
    (v) => floatKey(v as number),
    (t) => parseFloatOutput('float8', t),
  ),
  text: codec(identity, identity, (a, b) => compareText(a as string, b as string), identity, identity, (a, b) => a === b),
  varchar: codec(identity, identity, (a, b) => compareText(a as string, b as string), identity, identity, (a, b) => a === b),
  bpchar: codec(
    identity,
    identity,
    (a, b) => compareBpchar(a as string, b as string),
    (v) => trimBpchar(v as string),
  ),
  uuid: codec(parseUuid, identity, (a, b) => compareText(a as string, b as string), identity, parseUuid, (a, b) => a === b),
  date: codec(parseDate, (v) => formatDate(v as number), (a, b) => compareDates(a as number, b as number), (v) => String(v)),
  time: codec(parseTime, (v) => formatTime(v as number), (a, b) => compareNumbers(a as number, b as number), (v) => String(v)),
  timestamp: codec(
    (t) => parseTimestamp('timestamp', t),
    (v) => formatTimestamp('timestamp', v as bigint),
    (a, b) => compareBigints(a as bigint, b as bigint),
    (v) => String(v),
  ),
  timestamptz: codec(
    (t) => parseTimestamp('timestamptz', t),
    (v) => formatTimestamp('timestamptz', v as bigint),
    (a, b) => compareBigints(a as bigint, b as bigint),
    (v) => String(v),
  ),
  interval: codec(
    parseInterval,
    (v) => formatInterval(v as Interval),
    (a, b) => compareInterval(a as Interval, b as Interval),
    (v) => intervalKey(v as Interval),
  ),
  json: codec(parseJson, identity, undefined, undefined),
  jsonb: codec(
    parseJsonb,
    (v) => (v as Jsonb).text,
    undefined,
    (v) => (v as Jsonb).key,
    parseJsonb,
    (a, b) => (a as Jsonb).key === (b as Jsonb).key,
  ),
  unknown: codec(identity, identity, undefined, undefined),
}

function enumCodec(type: EnumType): TypeCodec {
  const parse = (text: string): string => {
    if (!type.order.has(text)) {
      throw new EvaluationError('invalid_text_representation', `invalid input value for enum ${type.name}: "${text}"`)
    }
    return text
  }
  const position = (label: unknown): number => type.order.get(label as string) ?? -1
  return codec(parse, identity, (a, b) => compareNumbers(position(a), position(b)), identity, parse, (a, b) => a === b)
}

function arrayCodec(type: ArrayType, maxElements: number): TypeCodec {
  const element = codecFor(type.element, maxElements)
  const elementCompare = element.compare
  const elementEquals = element.equals
  const elementKey = element.key
  return codec(
    (text) => parseArray(text, element.parse, maxElements),
    (value) => formatArray(value as ArrayValue<unknown>, element.format),
    elementCompare === undefined
      ? undefined
      : (a, b) => compareArrays(a as ArrayValue<unknown>, b as ArrayValue<unknown>, elementCompare),
    elementKey === undefined
      ? undefined
      : (value) => {
          const array = value as ArrayValue<unknown>
          const items = array.items.map((item) => (item === null ? 'N' : `v${JSON.stringify(elementKey(item))}`))
          return `${array.dims.join(',')}|${array.lbounds.join(',')}|${items.join(',')}`
        },
    (text) => parseArray(text, element.parseOutput, Number.POSITIVE_INFINITY),
    elementEquals === undefined
      ? undefined
      : (a, b) => arrayEquals(a as ArrayValue<unknown>, b as ArrayValue<unknown>, elementEquals),
  )
}

const OPAQUE_CODEC = codec(identity, identity, undefined, undefined)

/**
 * The codec of a type. Array constants (literals, parameters) are bounded by
 * `maxElements`; row values are not, since Postgres already accepted them.
 */
export function codecFor(type: SqlType, maxElements: number = Number.POSITIVE_INFINITY): TypeCodec {
  switch (type.kind) {
    case 'scalar':
      return SCALAR_CODECS[type.name]
    case 'enum':
      return enumCodec(type)
    case 'array':
      return arrayCodec(type, maxElements)
    case 'opaque':
      return OPAQUE_CODEC
  }
}
