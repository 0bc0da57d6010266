import fc from 'fast-check'
import type { WhereColumn } from '../../src/where/index.js'

/**
 * Generators for the where-clause oracle: a table with a column of every type
 * the evaluator supports, row values full of edge cases (as Postgres input
 * text), and well-typed random clauses over them. "Well-typed" is by family
 * (numbers with numbers, strings with strings, ...): which exact operator and
 * coercions apply is left for Sluice and Postgres to agree on.
 */

export const ENUM_LABELS = ['sad', 'ok', 'happy'] as const

type Family =
  | 'num'
  | 'str'
  | 'bool'
  | 'uuid'
  | 'date'
  | 'time'
  | 'interval'
  | 'json'
  | 'jsonb'
  | 'mood'
  | 'int[]'
  | 'text[]'
  | 'num[]'

interface ColumnSpec {
  readonly name: string
  /** SQL type in CREATE TABLE. */
  readonly sql: string
  readonly family: Family
  readonly where: WhereColumn
  readonly values: fc.Arbitrary<string>
}

const esc = (s: string): string => `'${s.replaceAll("'", "''")}'`

// ---- values ---------------------------------------------------------------------------------

const smallInt = fc.oneof(fc.constantFrom('0', '1', '-1', '2', '7', '10', '-3'), fc.integer({ min: -100, max: 100 }).map(String))
const int2 = fc.oneof(smallInt, fc.constantFrom('32767', '-32768', '255'), fc.integer({ min: -32768, max: 32767 }).map(String))
const int4 = fc.oneof(
  smallInt,
  fc.constantFrom('2147483647', '-2147483648', '65536'),
  fc.integer().map(String),
)
const int8 = fc.oneof(
  smallInt,
  fc.constantFrom('9223372036854775807', '-9223372036854775808', '9007199254740993', '4294967296'),
  fc.bigInt({ min: -(2n ** 63n), max: 2n ** 63n - 1n }).map(String),
)
const digits = (min: number, max: number): fc.Arbitrary<string> =>
  fc.array(fc.constantFrom('0', '1', '2', '3', '5', '7', '9'), { minLength: min, maxLength: max }).map((d) => d.join(''))
const decimal = fc
  .tuple(fc.constantFrom('', '-'), fc.oneof(digits(1, 4), digits(1, 22)), fc.option(fc.oneof(digits(0, 3), digits(0, 24)), { nil: undefined }))
  .map(([sign, int, frac]) => `${sign}${int}${frac === undefined ? '' : `.${frac}`}`)
const numeric = fc.oneof(
  { weight: 4, arbitrary: decimal },
  { weight: 2, arbitrary: smallInt },
  { weight: 1, arbitrary: fc.constantFrom('NaN', 'Infinity', '-Infinity', '0.000', '1.50', '0.000000000000000000000000000001', '123456789012345678901234567890.123456789') },
)
const numeric12 = fc.oneof(
  fc.constantFrom('0', '1.5', '-2.25', '99999999.9999', 'NaN'),
  fc.tuple(fc.integer({ min: -99999999, max: 99999999 }), fc.integer({ min: 0, max: 9999 })).map(
    ([i, f]) => `${i}.${String(f).padStart(4, '0')}`,
  ),
)
const floatSpecial = fc.constantFrom('NaN', 'Infinity', '-Infinity', '-0', '0', '0.1', '1.1', '1e-05', '1e+15', '100000', '3.4028235e38')
const float8 = fc.oneof(
  floatSpecial,
  smallInt,
  fc.double({ noNaN: true, noDefaultInfinity: true }).map((d) => (Object.is(d, -0) ? '-0' : String(d))),
  fc.constantFrom('1.7976931348623157e308', '5e-324', '2.2250738585072014e-308', '0.30000000000000004', '123456789012345678'),
)
const float4 = fc.oneof(
  floatSpecial,
  smallInt,
  fc.float({ noNaN: true, noDefaultInfinity: true }).map((d) => (Object.is(d, -0) ? '-0' : String(d))),
  fc.constantFrom('1.17549435e-38', '16777217', '0.333333343', '1e-45'),
)
const TEXT_CHARS = ['a', 'b', 'c', 'A', 'B', 'z', ' ', '%', '_', '\\', '"', "'", '{', '}', ',', 'é', 'É', 'ß', '€', '𝄞', '\u00a0', '\t', '\n', '1', '0', '.']
const textChar = fc.constantFrom(...TEXT_CHARS)
const text = fc.oneof(
  { weight: 5, arbitrary: fc.string({ unit: textChar, maxLength: 8 }) },
  { weight: 1, arbitrary: fc.constantFrom('', ' ', 'abc', 'ABC', 'abc  ', 'NULL', 'null', ' 12 ', '1.5', 't', 'yes', 'off', 'NaN', '-7', '1e3') },
)
const varchar12 = text.map((s) => Array.from(s).slice(0, 12).join(''))
const bpchar4 = fc.oneof(text.map((s) => Array.from(s).slice(0, 4).join('')), fc.constantFrom('a', 'a ', 'ab  ', '    ', ''))
const boolValue = fc.constantFrom('t', 'f', 'true', 'false')
const uuid = fc.oneof(fc.uuid(), fc.constantFrom('00000000-0000-0000-0000-000000000000', 'ffffffff-ffff-ffff-ffff-ffffffffffff', 'A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11'))

const pad = (n: number, w: number): string => String(n).padStart(w, '0')
const ymd = fc
  .tuple(fc.integer({ min: 1, max: 9999 }), fc.integer({ min: 1, max: 12 }), fc.integer({ min: 1, max: 28 }), fc.boolean())
  .map(([y, m, d, bc]) => `${pad(y, 4)}-${pad(m, 2)}-${pad(d, 2)}${bc && y < 4713 ? ' BC' : ''}`)
const commonDates = fc.constantFrom('2000-01-01', '2024-02-29', '1999-12-31', '1970-01-01', '2024-01-01')
const date = fc.oneof(
  { weight: 4, arbitrary: ymd },
  { weight: 2, arbitrary: commonDates },
  { weight: 1, arbitrary: fc.constantFrom('infinity', '-infinity', '4713-11-24 BC', '5874897-12-31', '294276-12-31', '294277-01-01') },
)
const timeOfDay = fc
  .tuple(fc.integer({ min: 0, max: 23 }), fc.integer({ min: 0, max: 59 }), fc.integer({ min: 0, max: 59 }), fc.option(fc.integer({ min: 0, max: 999999 }), { nil: undefined }))
  .map(([h, m, s, f]) => `${pad(h, 2)}:${pad(m, 2)}:${pad(s, 2)}${f === undefined ? '' : `.${pad(f, 6)}`}`)
const time = fc.oneof(timeOfDay, fc.constantFrom('00:00:00', '24:00:00', '12:00:00', '23:59:59.999999'))
const tsDate = fc.oneof(ymd.map((s) => s.replace(' BC', '')), commonDates, fc.constantFrom('294276-12-31', '4713-11-24'))
const timestamp = fc.oneof(
  { weight: 5, arbitrary: fc.tuple(tsDate, timeOfDay).map(([d, t]) => `${d} ${t}`) },
  { weight: 1, arbitrary: fc.constantFrom('infinity', '-infinity', '2000-01-01 00:00:00', '0044-03-15 12:00:00 BC', '2024-01-01 00:00:00.5') },
)
const timestamptz = fc.oneof(
  { weight: 5, arbitrary: fc.tuple(tsDate, timeOfDay, fc.constantFrom('+00', 'Z', '-08', '+05:30', '')).map(([d, t, z]) => `${d} ${t}${z}`) },
  { weight: 1, arbitrary: fc.constantFrom('infinity', '-infinity', '2000-01-01 00:00:00+00', '2024-01-01 00:00:00.5+00') },
)
const interval = fc.oneof(
  fc
    .tuple(fc.integer({ min: -300, max: 300 }), fc.integer({ min: -400, max: 400 }), fc.integer({ min: -100000, max: 100000 }), fc.integer({ min: 0, max: 999999 }))
    .map(([mon, day, sec, us]) => `${mon} months ${day} days ${sec}.${pad(us, 6)} seconds`),
  fc.constantFrom('PT0S', 'P1M', 'P30D', 'PT720H', 'P1Y', 'P-1D', 'PT-0.5S', '1 day', '24 hours', 'P1DT-1H'),
)
const jsonScalar = fc.oneof(
  fc.constantFrom('1', '1.0', '1.50', '-0', '1e2', '100', 'true', 'false', 'null', '"a"', '"\\u00e9"', '"é"', '""', '0.1'),
  fc.integer({ min: -5, max: 5 }).map(String),
)
const jsonDoc: fc.Arbitrary<string> = fc.letrec<{ doc: string }>((tie) => ({
  doc: fc.oneof(
    { depthSize: 'small', withCrossShrink: true },
    jsonScalar,
    fc.array(tie('doc'), { maxLength: 3 }).map((items) => `[${items.join(', ')}]`),
    fc
      .array(fc.tuple(fc.constantFrom('a', 'b', 'aa', 'é', ''), tie('doc')), { maxLength: 3 })
      .map((entries) => `{${entries.map(([k, v]) => `"${k}":${v}`).join(',')}}`),
  ),
})).doc
const mood = fc.constantFrom(...ENUM_LABELS)
const arrayText = (element: fc.Arbitrary<string>, quote: boolean): fc.Arbitrary<string> =>
  fc.oneof(
    { weight: 5, arbitrary: fc.array(fc.option(element, { nil: null, freq: 6 }), { maxLength: 4 }).map((items) => `{${items.map((i) => (i === null ? 'NULL' : quote ? `"${i.replace(/["\\]/g, '\\$&')}"` : i)).join(',')}}`) },
    { weight: 1, arbitrary: fc.constantFrom('{}', '{{1,2},{3,4}}', '[0:1]={1,2}', '{NULL}', '{1,1,2}') },
  )

const intArray = arrayText(smallInt, false).filter((s) => !/[a-z]/i.test(s.replace('NULL', '')))
const textArray = fc.oneof(arrayText(text, true), fc.constantFrom('{}', '{a,b}', '{"",NULL,"NULL"}', '{" a ",b}'))
const numArray = fc.oneof(arrayText(fc.oneof(smallInt, fc.constantFrom('1.0', '1.50', 'NaN', '2.5')), false), fc.constantFrom('{}', '{1,NULL}'))

function col(name: string, sql: string, family: Family, where: WhereColumn, values: fc.Arbitrary<string>): ColumnSpec {
  return { name, sql, family, where: { ...where, name }, values }
}

export const COLUMNS: readonly ColumnSpec[] = [
  col('c_i2', 'int2', 'num', { name: '', type: 'int2' }, int2),
  col('c_i4', 'int4', 'num', { name: '', type: 'int4' }, int4),
  col('c_i8', 'int8', 'num', { name: '', type: 'int8' }, int8),
  col('c_num', 'numeric', 'num', { name: '', type: 'numeric' }, numeric),
  col('c_num2', 'numeric(12,4)', 'num', { name: '', type: 'numeric' }, numeric12),
  col('c_f4', 'float4', 'num', { name: '', type: 'float4' }, float4),
  col('c_f8', 'float8', 'num', { name: '', type: 'float8' }, float8),
  col('c_text', 'text COLLATE "C"', 'str', { name: '', type: 'text' }, text),
  col('c_vc', 'varchar(12) COLLATE "C"', 'str', { name: '', type: 'varchar' }, varchar12),
  col('c_bc', 'char(4) COLLATE "C"', 'str', { name: '', type: 'bpchar' }, bpchar4),
  col('c_bool', 'bool', 'bool', { name: '', type: 'bool' }, boolValue),
  col('c_uuid', 'uuid', 'uuid', { name: '', type: 'uuid' }, uuid),
  col('c_date', 'date', 'date', { name: '', type: 'date' }, date),
  col('c_time', 'time', 'time', { name: '', type: 'time' }, time),
  col('c_ts', 'timestamp', 'date', { name: '', type: 'timestamp' }, timestamp),
  col('c_tstz', 'timestamptz', 'date', { name: '', type: 'timestamptz' }, timestamptz),
  col('c_iv', 'interval', 'interval', { name: '', type: 'interval' }, interval),
  col('c_json', 'json', 'json', { name: '', type: 'json' }, jsonDoc),
  col('c_jsonb', 'jsonb', 'jsonb', { name: '', type: 'jsonb' }, jsonDoc),
  col('c_mood', 'mood', 'mood', { name: '', type: 'mood', enumValues: ENUM_LABELS }, mood),
  col('c_ai', 'int4[]', 'int[]', { name: '', type: '_int4' }, intArray),
  col('c_at', 'text[] COLLATE "C"', 'text[]', { name: '', type: 'text', dims: 1 }, textArray),
  col('c_an', 'numeric[]', 'num[]', { name: '', type: '_numeric' }, numArray),
]

export const WHERE_COLUMNS: readonly WhereColumn[] = [{ name: 'id', type: 'int4', notNull: true }, ...COLUMNS.map((c) => c.where)]

/** A row: id plus one input text (or NULL) per column. */
export type RowInput = readonly (string | null)[]

export const rowArbitrary: fc.Arbitrary<RowInput> = fc.tuple(
  ...COLUMNS.map((c) => fc.option(c.values, { nil: null, freq: 7 })),
)

// ---- clauses ----------------------------------------------------------------------------------

const byFamily = (family: Family): string[] => COLUMNS.filter((c) => c.family === family).map((c) => c.name)

function pick<T>(items: readonly T[]): fc.Arbitrary<T> {
  return fc.constantFrom(...items)
}

/** A typed literal of a family: `'v'::type`, a bare number, or NULL::type. */
function literal(family: Family): fc.Arbitrary<string> {
  const typed = (values: fc.Arbitrary<string>, types: readonly string[]): fc.Arbitrary<string> =>
    fc.tuple(values, pick(types)).map(([v, t]) => `${esc(v)}::${t}`)
  switch (family) {
    case 'num':
      return fc.oneof(
        { weight: 3, arbitrary: smallInt.map((v) => (v.startsWith('-') ? `(${v})` : v)) },
        { weight: 2, arbitrary: fc.constantFrom('1.5', '0.1', '2.50', '1e3', '3000000000', '9223372036854775807', '0.000001', '1e-10', '100000000000000000000') },
        { weight: 2, arbitrary: typed(fc.oneof(numeric, float8, int4), ['numeric', 'float8', 'float4', 'int8', 'int2', 'numeric(10,2)', 'int4']) },
      )
    case 'str':
      return typed(text, ['text', 'varchar', 'char(3)', 'varchar(2)', 'bpchar'])
    case 'bool':
      return fc.constantFrom('true', 'false', 'NULL::bool', "'t'::bool", "'off'::boolean")
    case 'uuid':
      return typed(uuid, ['uuid'])
    case 'date':
      return fc.oneof(typed(date, ['date']), typed(timestamp, ['timestamp', 'timestamp(0)', 'timestamp(3)']), typed(timestamptz, ['timestamptz']))
    case 'time':
      return typed(time, ['time', 'time(2)'])
    case 'interval':
      return typed(interval, ['interval'])
    case 'json':
      return typed(jsonDoc, ['json'])
    case 'jsonb':
      return typed(jsonDoc, ['jsonb'])
    case 'mood':
      return typed(mood, ['mood'])
    case 'int[]':
      return fc.oneof(typed(intArray, ['int4[]']), fc.array(smallInt, { minLength: 1, maxLength: 3 }).map((a) => `ARRAY[${a.join(', ')}]`))
    case 'text[]':
      return typed(textArray, ['text[]'])
    case 'num[]':
      return typed(numArray, ['numeric[]'])
  }
}

/** An untyped quoted literal that context will type. */
function unknownLiteral(family: Family): fc.Arbitrary<string> {
  const values: Partial<Record<Family, fc.Arbitrary<string>>> = {
    num: fc.oneof(smallInt, fc.constantFrom('1.5', 'NaN', ' 7 ', '1e2', 'Infinity')),
    str: text,
    bool: boolValue,
    uuid,
    date: fc.oneof(date, timestamp),
    time,
    interval,
    jsonb: jsonDoc,
    mood,
    'int[]': intArray,
    'text[]': textArray,
    'num[]': numArray,
  }
  return (values[family] ?? text).map(esc)
}

type Gen = (depth: number) => fc.Arbitrary<string>

function leaf(family: Family): fc.Arbitrary<string> {
  const columns = byFamily(family)
  return columns.length === 0
    ? literal(family)
    : fc.oneof({ weight: 3, arbitrary: pick(columns) }, { weight: 2, arbitrary: literal(family) })
}

const num: Gen = (depth) =>
  depth <= 0
    ? leaf('num')
    : fc.oneof(
        { weight: 4, arbitrary: leaf('num') },
        { weight: 3, arbitrary: fc.tuple(num(depth - 1), pick(['+', '-', '*', '/', '%']), num(depth - 1)).map(([a, op, b]) => `(${a} ${op} ${b})`) },
        { weight: 1, arbitrary: num(depth - 1).map((a) => `(- ${a})`) },
        { weight: 1, arbitrary: fc.tuple(num(depth - 1), pick(['/', '%', '*']), num(depth - 1)).map(([a, op, b]) => `((${a})::numeric ${op} ${b})`) },
        { weight: 2, arbitrary: fc.tuple(num(depth - 1), pick(['int2', 'int4', 'int8', 'numeric', 'numeric(8,3)', 'float4', 'float8'])).map(([a, t]) => `(${a})::${t}`) },
        { weight: 1, arbitrary: fc.tuple(pick(['length', 'char_length', 'octet_length']), str(depth - 1)).map(([f, s]) => `${f}(${s})`) },
        { weight: 1, arbitrary: fc.tuple(num(depth - 1), num(depth - 1)).map(([a, b]) => `COALESCE(${a}, ${b})`) },
        { weight: 1, arbitrary: bool(depth - 1).map((b) => `(${b})::int4`) },
      )

const str: Gen = (depth) =>
  depth <= 0
    ? leaf('str')
    : fc.oneof(
        { weight: 4, arbitrary: leaf('str') },
        { weight: 2, arbitrary: fc.tuple(pick(['lower', 'upper']), str(depth - 1)).map(([f, s]) => `${f}(${s})`) },
        { weight: 2, arbitrary: fc.tuple(anyValue(depth - 1), pick(['text', 'varchar', 'varchar(3)', 'char(2)', 'bpchar'])).map(([v, t]) => `(${v})::${t}`) },
        { weight: 2, arbitrary: num(depth).map((v) => `(${v})::text`) },
        { weight: 1, arbitrary: fc.tuple(str(depth - 1), str(depth - 1)).map(([a, b]) => `COALESCE(${a}, ${b})`) },
      )

function anyValue(depth: number): fc.Arbitrary<string> {
  return fc.oneof(
    num(depth),
    leaf('bool'),
    leaf('uuid'),
    dateExpr(depth),
    leaf('time'),
    intervalExpr(depth),
    leaf('json'),
    leaf('jsonb'),
    leaf('mood'),
    leaf('int[]'),
    leaf('text[]'),
    leaf('num[]'),
  )
}

const dateExpr: Gen = (depth) =>
  depth <= 0
    ? leaf('date')
    : fc.oneof(
        { weight: 3, arbitrary: leaf('date') },
        { weight: 1, arbitrary: fc.tuple(dateExpr(depth - 1), pick(['date', 'timestamp', 'timestamptz', 'timestamp(2)'])).map(([v, t]) => `(${v})::${t}`) },
      )

const intervalExpr: Gen = (depth) =>
  depth <= 0
    ? leaf('interval')
    : fc.oneof(
        { weight: 3, arbitrary: leaf('interval') },
        { weight: 1, arbitrary: fc.tuple(intervalExpr(depth - 1), pick(['+', '-']), intervalExpr(depth - 1)).map(([a, op, b]) => `(${a} ${op} ${b})`) },
        { weight: 1, arbitrary: intervalExpr(depth - 1).map((a) => `(- ${a})`) },
        { weight: 1, arbitrary: pick(['c_time']).map((c) => `${c}::interval`) },
      )

function familyExpr(family: Family, depth: number): fc.Arbitrary<string> {
  switch (family) {
    case 'num':
      return num(depth)
    case 'str':
      return str(depth)
    case 'date':
      return dateExpr(depth)
    case 'interval':
      return intervalExpr(depth)
    case 'time':
      return fc.oneof(leaf('time'), pick(['c_ts', 'c_tstz']).map((c) => `${c}::time`))
    case 'jsonb':
      return fc.oneof(leaf('jsonb'), leaf('json').map((j) => `${j}::jsonb`))
    case 'bool':
      return depth <= 0 ? leaf('bool') : bool(depth - 1)
    default:
      return leaf(family)
  }
}

const ORDERED: readonly Family[] = ['num', 'str', 'bool', 'uuid', 'date', 'time', 'interval', 'mood', 'int[]', 'text[]', 'num[]']
const EQUALITY_ONLY: readonly Family[] = ['jsonb']

function comparison(depth: number): fc.Arbitrary<string> {
  const ordered = fc
    .tuple(pick(ORDERED), pick(['=', '<>', '<', '<=', '>', '>=', '!=']), fc.boolean())
    .chain(([family, op, untyped]) =>
      fc
        .tuple(familyExpr(family, depth), untyped ? unknownLiteral(family) : familyExpr(family, depth))
        .map(([a, b]) => `${a} ${op} ${b}`),
    )
  const equality = fc
    .tuple(pick(EQUALITY_ONLY), pick(['=', '<>']))
    .chain(([family, op]) => fc.tuple(familyExpr(family, depth), familyExpr(family, depth)).map(([a, b]) => `${a} ${op} ${b}`))
  return fc.oneof({ weight: 6, arbitrary: ordered }, { weight: 1, arbitrary: equality })
}

const LIKE_CHARS = ['a', 'b', 'A', 'é', '%', '%', '_', '\\', ' ', 'c', '1', '5', '0', '.', '-', 'e', 'N', ':', 'T']
const likePattern = fc.string({ unit: fc.constantFrom(...LIKE_CHARS), maxLength: 5 })

function predicate(depth: number): fc.Arbitrary<string> {
  const anyFamily = pick([...ORDERED, 'jsonb', 'json'] as Family[])
  return fc.oneof(
    { weight: 6, arbitrary: comparison(depth) },
    { weight: 2, arbitrary: anyFamily.chain((f) => familyExpr(f, depth)).chain((e) => pick(['IS NULL', 'IS NOT NULL']).map((t) => `${e} ${t}`)) },
    {
      weight: 2,
      arbitrary: fc
        .tuple(pick([...ORDERED, 'jsonb'] as Family[]), pick(['IS DISTINCT FROM', 'IS NOT DISTINCT FROM']))
        .chain(([f, op]) => fc.tuple(familyExpr(f, depth), familyExpr(f, depth)).map(([a, b]) => `${a} ${op} ${b}`)),
    },
    {
      weight: 2,
      arbitrary: fc
        .tuple(pick(['num', 'str', 'date'] as Family[]), pick(['BETWEEN', 'NOT BETWEEN', 'BETWEEN SYMMETRIC']))
        .chain(([f, op]) =>
          fc.tuple(familyExpr(f, depth), familyExpr(f, 0), familyExpr(f, 0)).map(([a, b, c]) => `${a} ${op} ${b} AND ${c}`),
        ),
    },
    {
      weight: 3,
      arbitrary: fc
        .tuple(pick(['num', 'str', 'date', 'uuid', 'mood', 'bool'] as Family[]), pick(['IN', 'NOT IN']), fc.boolean())
        .chain(([f, op, untyped]) =>
          fc
            .tuple(familyExpr(f, depth), fc.array(fc.oneof({ weight: 4, arbitrary: untyped ? unknownLiteral(f) : literal(f) }, { weight: 1, arbitrary: fc.constant('NULL') }, { weight: 1, arbitrary: leaf(f) }), { minLength: 1, maxLength: 5 }))
            .map(([a, items]) => `${a} ${op} (${items.join(', ')})`),
        ),
    },
    {
      weight: 3,
      arbitrary: fc
        .tuple(str(depth), pick(['LIKE', 'NOT LIKE', 'ILIKE', 'NOT ILIKE']), likePattern, fc.option(pick(["''", "'!'", "'a'"]), { nil: undefined, freq: 4 }))
        .map(([s, op, p, e]) => `${s} ${op} ${esc(p)}${e === undefined ? '' : ` ESCAPE ${e}`}`),
    },
    { weight: 1, arbitrary: fc.tuple(str(depth), pick(['LIKE', 'ILIKE']), pick(['c_text', 'c_vc'])).map(([s, op, p]) => `${s} ${op} ${p}`) },
    {
      weight: 2,
      arbitrary: fc
        .tuple(pick([['num', 'int[]'], ['num', 'num[]'], ['str', 'text[]']] as [Family, Family][]), pick(['= ANY', '<> ALL', '< ANY', '= ALL']))
        .chain(([[scalar, array], op]) => fc.tuple(familyExpr(scalar, 0), leaf(array)).map(([a, b]) => `${a} ${op} (${b})`)),
    },
    {
      weight: 2,
      arbitrary: fc
        .tuple(pick(['int[]', 'text[]', 'num[]'] as Family[]), pick(['@>', '<@', '&&', '=']))
        .chain(([f, op]) => fc.tuple(leaf(f), fc.oneof(literal(f), unknownLiteral(f), leaf(f))).map(([a, b]) => `${a} ${op} ${b}`)),
    },
    { weight: 1, arbitrary: fc.tuple(depth <= 0 ? leaf('bool') : bool(depth - 1), pick(['IS TRUE', 'IS NOT TRUE', 'IS FALSE', 'IS NOT FALSE', 'IS UNKNOWN', 'IS NOT UNKNOWN'])).map(([b, t]) => `(${b}) ${t}`) },
    { weight: 1, arbitrary: fc.constantFrom('c_bool', 'NOT c_bool', 'true', 'NULL::bool') },
  )
}

const bool: Gen = (depth) =>
  depth <= 0
    ? predicate(0)
    : fc.oneof(
        { weight: 5, arbitrary: predicate(depth - 1) },
        { weight: 2, arbitrary: fc.array(bool(depth - 1), { minLength: 2, maxLength: 3 }).map((parts) => `(${parts.join(' AND ')})`) },
        { weight: 2, arbitrary: fc.array(bool(depth - 1), { minLength: 2, maxLength: 3 }).map((parts) => `(${parts.join(' OR ')})`) },
        { weight: 1, arbitrary: bool(depth - 1).map((b) => `NOT (${b})`) },
      )

export const clauseArbitrary: fc.Arbitrary<string> = fc.integer({ min: 0, max: 3 }).chain((depth) => bool(depth))

/** A scalar expression of any family, for comparing computed values (as text) with Postgres. */
export const valueExpressionArbitrary: fc.Arbitrary<string> = fc
  .integer({ min: 0, max: 3 })
  .chain((depth) =>
    fc.oneof(
      { weight: 4, arbitrary: num(depth) },
      { weight: 2, arbitrary: str(depth) },
      { weight: 1, arbitrary: dateExpr(depth) },
      { weight: 1, arbitrary: intervalExpr(depth) },
      { weight: 1, arbitrary: anyValue(depth) },
    ),
  )
