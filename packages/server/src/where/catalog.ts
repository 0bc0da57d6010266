import type { ScalarName, SqlType, TypeCategory } from './sql-type.js'
import { category, isPreferred, isUnknown, scalar } from './sql-type.js'

/**
 * A slice of Postgres's catalog (pg_operator, pg_proc, pg_cast) covering the
 * types a where clause can use, so that operator and function resolution picks
 * exactly the overload Postgres would (see resolve-overload.ts). Entries
 * Postgres has but we do not evaluate are kept, marked unsupported, so that the
 * error says "not supported" rather than "does not exist".
 */

/** A declared argument type: a concrete type or one of the polymorphic pseudo-types we need. */
export type ArgSpec = SqlType | 'anyarray' | 'anyenum'

export interface Signature {
  readonly name: string
  /** Declared argument types: [right] for a prefix operator, [left, right] for a binary one, a function's list. */
  readonly args: readonly ArgSpec[]
  /** Result type; `null` marks "same as the polymorphic argument" (never needed for our result types). */
  readonly result: SqlType
  readonly supported: boolean
}

function t(name: string): SqlType | 'anyarray' | 'anyenum' {
  if (name === 'anyarray' || name === 'anyenum') return name
  return scalar(name as ScalarName)
}

function parseTable(kind: 'op' | 'fn', text: string, supported: (name: string, args: readonly string[]) => boolean): Signature[] {
  const out: Signature[] = []
  for (const line of text.trim().split('\n')) {
    const [name = '', ...rest] = line.trim().split(/\s+/)
    const result = rest.pop() ?? ''
    const args = kind === 'op' && rest[0] === '-' ? rest.slice(1) : rest
    out.push({ name, args: args.map(t), result: scalar(result as ScalarName), supported: supported(name, args) })
  }
  return out
}

const COMPARABLE_PAIRS = `bool bool|int8 int8|int8 int2|int8 int4|int2 int8|int2 int2|int2 int4|int4 int8|int4 int2|int4 int4|text text|float4 float4|float4 float8|float8 float4|float8 float8|bpchar bpchar|date date|date timestamp|date timestamptz|time time|timestamp date|timestamp timestamp|timestamp timestamptz|timestamptz date|timestamptz timestamp|timestamptz timestamptz|interval interval|numeric numeric|anyarray anyarray|uuid uuid|anyenum anyenum|jsonb jsonb`

const OTHER_OPERATORS = `
!~~ text text bool
!~~ bpchar text bool
!~~* text text bool
!~~* bpchar text bool
~~ text text bool
~~ bpchar text bool
~~* text text bool
~~* bpchar text bool
&& anyarray anyarray bool
@> anyarray anyarray bool
<@ anyarray anyarray bool
@> jsonb jsonb bool
<@ jsonb jsonb bool
% int8 int8 int8
% int2 int2 int2
% int4 int4 int4
% numeric numeric numeric
* int8 int8 int8
* int8 int2 int8
* int8 int4 int8
* int2 int8 int8
* int2 int2 int2
* int2 int4 int4
* int4 int8 int8
* int4 int2 int4
* int4 int4 int4
* float4 float4 float4
* float4 float8 float8
* float8 float4 float8
* float8 float8 float8
* float8 interval interval
* interval float8 interval
* numeric numeric numeric
+ - int8 int8
+ - int2 int2
+ - int4 int4
+ - float4 float4
+ - float8 float8
+ - numeric numeric
+ int8 int8 int8
+ int8 int2 int8
+ int8 int4 int8
+ int2 int8 int8
+ int2 int2 int2
+ int2 int4 int4
+ int4 int8 int8
+ int4 int2 int4
+ int4 int4 int4
+ int4 date date
+ float4 float4 float4
+ float4 float8 float8
+ float8 float4 float8
+ float8 float8 float8
+ date int4 date
+ date time timestamp
+ date interval timestamp
+ time date timestamp
+ time interval time
+ timestamp interval timestamp
+ timestamptz interval timestamptz
+ interval date timestamp
+ interval time time
+ interval timestamp timestamp
+ interval timestamptz timestamptz
+ interval interval interval
+ numeric numeric numeric
- - int8 int8
- - int2 int2
- - int4 int4
- - float4 float4
- - float8 float8
- - interval interval
- - numeric numeric
- int8 int8 int8
- int8 int2 int8
- int8 int4 int8
- int2 int8 int8
- int2 int2 int2
- int2 int4 int4
- int4 int8 int8
- int4 int2 int4
- int4 int4 int4
- float4 float4 float4
- float4 float8 float8
- float8 float4 float8
- float8 float8 float8
- date int4 date
- date date int4
- date interval timestamp
- time time interval
- time interval time
- timestamp timestamp interval
- timestamp interval timestamp
- timestamptz timestamptz interval
- timestamptz interval timestamptz
- interval interval interval
- numeric numeric numeric
/ int8 int8 int8
/ int8 int2 int8
/ int8 int4 int8
/ int2 int8 int8
/ int2 int2 int2
/ int2 int4 int4
/ int4 int8 int8
/ int4 int2 int4
/ int4 int4 int4
/ float4 float4 float4
/ float4 float8 float8
/ float8 float4 float8
/ float8 float8 float8
/ interval float8 interval
/ numeric numeric numeric
`

const NUMERIC_TYPES = new Set(['int2', 'int4', 'int8', 'numeric', 'float4', 'float8'])

/** Which catalog operators the evaluator implements. */
function operatorSupported(name: string, args: readonly string[]): boolean {
  if (['=', '<>', '<', '<=', '>', '>='].includes(name)) {
    // jsonb has an ordering in Postgres, but an intricate one we do not reproduce.
    return !(args[0] === 'jsonb' && name !== '=' && name !== '<>')
  }
  if (['~~', '!~~', '~~*', '!~~*', '&&'].includes(name)) return true
  if (name === '@>' || name === '<@') return args[0] === 'anyarray'
  if (['+', '-', '*', '/', '%'].includes(name)) {
    if (args.every((a) => NUMERIC_TYPES.has(a))) return true
    // interval ± interval and unary minus; date/time arithmetic is left out.
    return (name === '+' || name === '-') && args.every((a) => a === 'interval')
  }
  return false
}

export const OPERATORS: readonly Signature[] = [
  ...['=', '<>', '<', '<=', '>', '>='].flatMap((op) =>
    parseTable(
      'op',
      COMPARABLE_PAIRS.split('|')
        .map((pair) => `${op} ${pair} bool`)
        .join('\n'),
      operatorSupported,
    ),
  ),
  ...parseTable('op', OTHER_OPERATORS, operatorSupported),
]

/** Operator names that exist in our catalog. Others are reported as not supported. */
export const OPERATOR_NAMES: ReadonlySet<string> = new Set(OPERATORS.map((o) => o.name))

const FUNCTIONS_TABLE = `
lower text text
upper text text
length text int4
length bpchar int4
char_length text int4
char_length bpchar int4
character_length text int4
character_length bpchar int4
octet_length text int4
octet_length bpchar int4
like_escape text text text
`

export const FUNCTIONS: readonly Signature[] = parseTable('fn', FUNCTIONS_TABLE, () => true)

export const FUNCTION_NAMES: ReadonlySet<string> = new Set(FUNCTIONS.map((f) => f.name))

// By name and arity, each list made once: binding a clause resolves each operator in it, and a restart
// binds every stored shape's clause (100k of them), each of which would otherwise scan the whole table.
const operatorLists = new Map<string, readonly Signature[]>()
const functionLists = new Map<string, readonly Signature[]>()

function candidates(lists: Map<string, readonly Signature[]>, all: readonly Signature[], name: string, arity: number): readonly Signature[] {
  const key = `${arity}:${name}`
  const known = lists.get(key)
  if (known !== undefined) return known
  const list = Object.freeze(all.filter((s) => s.name === name && s.args.length === arity))
  // Only real signatures are kept: names and arities come from requests, and misses must not grow the map.
  if (list.length > 0) lists.set(key, list)
  return list
}

export function operatorCandidates(name: string, arity: 1 | 2): readonly Signature[] {
  return candidates(operatorLists, OPERATORS, name, arity)
}

export function functionCandidates(name: string, arity: number): readonly Signature[] {
  return candidates(functionLists, FUNCTIONS, name, arity)
}

/** Implicit casts (pg_cast castcontext 'i') among our scalar types. */
const IMPLICIT: Readonly<Partial<Record<ScalarName, readonly ScalarName[]>>> = {
  int2: ['int4', 'int8', 'numeric', 'float4', 'float8'],
  int4: ['int8', 'numeric', 'float4', 'float8'],
  int8: ['numeric', 'float4', 'float8'],
  numeric: ['float4', 'float8'],
  float4: ['float8'],
  text: ['bpchar', 'varchar'],
  varchar: ['text', 'bpchar'],
  bpchar: ['text', 'varchar'],
  date: ['timestamp', 'timestamptz'],
  time: ['interval'],
  timestamp: ['timestamptz'],
}

/** `can_coerce_type` with COERCION_IMPLICIT, for one concrete target type. */
export function canCoerceImplicitly(from: SqlType, to: SqlType): boolean {
  if (from.key === to.key) return true
  if (isUnknown(from)) return true
  if (from.kind === 'array' && to.kind === 'array') return canCoerceImplicitly(from.element, to.element)
  if (from.kind === 'scalar' && to.kind === 'scalar') return IMPLICIT[from.name]?.includes(to.name) ?? false
  return false
}

export function canCoerceToSpec(from: SqlType, to: ArgSpec): boolean {
  if (to === 'anyarray') return isUnknown(from) || from.kind === 'array'
  if (to === 'anyenum') return isUnknown(from) || from.kind === 'enum'
  return canCoerceImplicitly(from, to)
}

export function specCategory(spec: ArgSpec): TypeCategory | 'P' {
  return typeof spec === 'string' ? 'P' : category(spec)
}

export function specPreferred(spec: ArgSpec): boolean {
  return typeof spec !== 'string' && isPreferred(spec)
}

export function specKey(spec: ArgSpec): string {
  return typeof spec === 'string' ? spec : spec.key
}

