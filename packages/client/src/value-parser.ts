import type { ColumnSchema, ShapeSchema } from '@sluice/protocol'
import { type ArrayValue, parseArrayLiteral } from './array-literal.js'
import { ClientError, InvalidResponseError, ParserNullValueError } from './errors.js'

/**
 * Turns the Postgres text values of a change message into JavaScript values,
 * column by column, guided by the `electric-schema` header (docs/protocol.md §7.1):
 *
 *   int2, int4, float4, float8   number (`Number()`, so NaN, Infinity, -Infinity survive)
 *   int8                         bigint
 *   bool                         boolean (`t`/`true` from the log and the snapshot alike)
 *   json, jsonb                  the parsed JSON
 *   dims ≥ 1                     nested arrays through the array-literal parser, elements as above
 *   anything else                the text unchanged (numeric, timestamps, uuid, enums, bytea…)
 *
 * Columns absent from the schema pass through untouched. A `null` for a column
 * marked `not_null` is a `ParserNullValueError`: the schema is wrong or the data
 * is, and silently passing it on would break code that trusts the types.
 *
 * One deliberate difference from the official client: a NULL *element* inside
 * an array column that is NOT NULL is `null`, not an error. The column is not
 * null; its elements may be (`int4[] NOT NULL` can hold `{1,NULL}`), and the
 * official client throwing there stops sync on valid data.
 */

/** What a parsed column can hold with the default parsers (custom parsers may add types). */
export type Value = string | number | bigint | boolean | null | JsonValue | Value[]
export type JsonValue = string | number | boolean | null | JsonValue[] | { [key: string]: JsonValue }

/** A parsed row: column name → value. */
export type Row = Record<string, unknown>

/** Parses one non-null text value; receives the column's schema entry (modifiers included). */
export type ParseFunction = (text: string, column: ColumnSchema) => unknown

/** Type name (`pg_type.typname`, the element type for arrays) → parser. */
export type Parsers = Readonly<Record<string, ParseFunction>>

const toNumber: ParseFunction = (text) => Number(text)
const toBigInt: ParseFunction = (text) => BigInt(text)
const toBool: ParseFunction = (text) => text === 't' || text === 'true'
const toJson: ParseFunction = (text) => JSON.parse(text) as unknown

export const DEFAULT_PARSERS: Parsers = Object.freeze({
  int2: toNumber,
  int4: toNumber,
  int8: toBigInt,
  float4: toNumber,
  float8: toNumber,
  bool: toBool,
  json: toJson,
  jsonb: toJson,
})

/**
 * The parser of a type, own entries only: a type is any Postgres name, and an
 * enum or domain named `constructor` or `toString` must not find Object's
 * methods (nor `__proto__` the prototype).
 */
function parserFor(parsers: Parsers, type: string): ParseFunction | undefined {
  return Object.prototype.hasOwnProperty.call(parsers, type) ? parsers[type] : undefined
}

/** `box` is the one built-in type whose array delimiter is `;` rather than `,`. */
const SEMICOLON_DELIMITED = new Set(['box'])

/** Text of a row's columns in, parsed values out. */
export type RowParser = (values: Readonly<Record<string, string | null>>) => Row

/**
 * Builds the parser for one schema; column parsers are resolved once per
 * column here, not once per value. The values given are left as they are: the
 * row is a copy (see `createRowParserInPlace` for the stream's own use).
 */
export function createRowParser(schema: ShapeSchema, custom: Parsers = {}): RowParser {
  const inPlace = createRowParserInPlace(schema, custom)
  // A copy made by spreading keeps the message object's compact layout (every column an
  // in-object field, as JSON.parse laid it out); a row grown from `{}` one column at a time
  // keeps only 4 fields in the object and the rest in a separate backing array.
  return (values) => inPlace({ ...values })
}

/**
 * The same parser, writing the parsed values into the object it is given and
 * returning it. For values nobody else holds (fresh from JSON.parse): the
 * stream's rows are then the objects JSON.parse made, with their compact
 * layout, and no second object per row is allocated and copied. Columns whose
 * type has no parser (text, timestamps, numeric...) are not visited at all
 * except to refuse a null in a `not_null` one.
 */
export function createRowParserInPlace(schema: ShapeSchema, custom: Parsers = {}): (values: Record<string, unknown>) => Row {
  const parsers = { ...DEFAULT_PARSERS, ...custom }
  const names: string[] = []
  const parses: Array<(text: string | null) => unknown> = []
  const notNullText: string[] = []
  for (const [name, column] of Object.entries(schema)) {
    if ((column.dims === undefined || column.dims === 0) && parserFor(parsers, column.type) === undefined) {
      if (column.not_null === true) notNullText.push(name)
      continue
    }
    names.push(name)
    parses.push(columnParser(name, column, parsers))
  }
  const count = names.length
  return (values) => {
    let i = 0
    try {
      for (; i < count; i++) {
        const name = names[i]!
        const text = values[name]
        // Own values from JSON are strings or null; anything else (a column absent from an
        // update, found on the prototype instead) is left alone.
        if (typeof text === 'string' || text === null) values[name] = parses[i]!(text)
      }
    } catch (error) {
      throw valueError(names[i]!, schema[names[i]!]!, error)
    }
    for (let i = 0; i < notNullText.length; i++) {
      const name = notNullText[i]!
      if (values[name] === null) throw new ParserNullValueError(name)
    }
    return values
  }
}

/**
 * A value a parser refused (`BigInt('x')`, JSON that does not parse, a custom
 * parser's own throw) as the client error it is: the body is not what its
 * schema says. The client's own errors (a null in a `not_null` column, an array
 * literal that does not parse) already are one.
 */
function valueError(name: string, column: ColumnSchema, error: unknown): ClientError {
  if (error instanceof ClientError) return error
  const why = error instanceof Error ? error.message : String(error)
  return new InvalidResponseError(`column "${name}": a ${column.type} value that does not parse (${why})`, { cause: error })
}

/** The parser of one column, `null` handling and arrays included. */
export function columnParser(name: string, column: ColumnSchema, parsers: Parsers = DEFAULT_PARSERS): (text: string | null) => unknown {
  const parse = parserFor(parsers, column.type)
  const element = parse === undefined ? (text: string) => text : (text: string) => parse(text, column)
  const notNull = column.not_null === true
  if (column.dims !== undefined && column.dims > 0) {
    const delimiter = SEMICOLON_DELIMITED.has(column.type) ? ';' : ','
    const parseElement = (text: string | null): unknown => (text === null ? null : element(text))
    return (text) => {
      if (text === null) {
        if (notNull) throw new ParserNullValueError(name)
        return null
      }
      return parseArrayLiteral(text, parseElement, delimiter) satisfies ArrayValue<unknown>
    }
  }
  return (text) => {
    if (text === null) {
      if (notNull) throw new ParserNullValueError(name)
      return null
    }
    return element(text)
  }
}
