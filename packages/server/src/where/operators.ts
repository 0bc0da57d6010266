import type { SqlType } from './sql-type.js'
import { codecFor } from './type-codec.js'
import type { ArrayValue } from './values/array.js'
import { arrayContains, arrayKeySet, arrayOverlaps, keysContain, overlapsKeys } from './values/array.js'
import { compareDateTimestamp } from './values/datetime.js'
import type { FloatOp } from './values/float.js'
import { compareFloat, floatArith } from './values/float.js'
import type { ArithOp } from './values/integer.js'
import { bigArith, negateBig, negateSmall, smallArith } from './values/integer.js'
import type { Interval } from './values/interval.js'
import { addInterval, negateInterval, subtractInterval } from './values/interval.js'
import type { LikeMatcher } from './values/like.js'
import { compileLike } from './values/like.js'
import type { Numeric } from './values/numeric.js'
import { add, divide, modulo, multiply, negate, subtract } from './values/numeric.js'

/**
 * Implementations of the catalog's operators for concrete argument types.
 * Operators are strict: the evaluator never calls these with NULL.
 */
export type BinaryFn = (a: unknown, b: unknown) => unknown
export type UnaryFn = (a: unknown) => unknown

export const COMPARISON_OPERATORS: ReadonlySet<string> = new Set(['=', '<>', '<', '<=', '>', '>='])

const INTS = new Set(['int2', 'int4', 'int8'])

function scalarName(type: SqlType): string {
  return type.kind === 'scalar' ? type.name : type.kind
}

/** A three-way comparison for a pair of (possibly different) comparable types. */
export function comparator(left: SqlType, right: SqlType): ((a: unknown, b: unknown) => number) | undefined {
  const l = scalarName(left)
  const r = scalarName(right)
  if (left.key === right.key) return codecFor(left).compare
  if (INTS.has(l) && INTS.has(r)) {
    // number and bigint compare exactly in JS.
    return (a, b) => ((a as number) < (b as number) ? -1 : (a as number) > (b as number) ? 1 : 0)
  }
  if ((l === 'float4' || l === 'float8') && (r === 'float4' || r === 'float8')) {
    return (a, b) => compareFloat(a as number, b as number)
  }
  if (l === 'date' && (r === 'timestamp' || r === 'timestamptz')) {
    return (a, b) => compareDateTimestamp(a as number, b as bigint)
  }
  if ((l === 'timestamp' || l === 'timestamptz') && r === 'date') {
    return (a, b) => -compareDateTimestamp(b as number, a as bigint)
  }
  if ((l === 'timestamp' || l === 'timestamptz') && (r === 'timestamp' || r === 'timestamptz')) {
    return (a, b) => ((a as bigint) < (b as bigint) ? -1 : (a as bigint) > (b as bigint) ? 1 : 0)
  }
  return undefined
}

/** Equality for a pair of types, through keys when they share a codec (jsonb has keys but no order). */
export function equality(left: SqlType, right: SqlType): ((a: unknown, b: unknown) => boolean) | undefined {
  if (left.key === right.key) return codecFor(left).equals
  const compare = comparator(left, right)
  return compare === undefined ? undefined : (a, b) => compare(a, b) === 0
}

/** Cross-type date/time comparisons that involve timestamptz are STABLE in Postgres (they read TimeZone). */
export function comparisonIsStable(left: SqlType, right: SqlType): boolean {
  const l = scalarName(left)
  const r = scalarName(right)
  if (l === r) return false
  return (l === 'timestamptz' && (r === 'date' || r === 'timestamp')) || (r === 'timestamptz' && (l === 'date' || l === 'timestamp'))
}

/** Same-type comparisons where JS operators already agree with Postgres: the hot path of most clauses. */
const DIRECT: ReadonlySet<string> = new Set(['int2', 'int4', 'int8', 'date', 'timestamp', 'timestamptz', 'time'])
const DIRECT_EQUALITY: ReadonlySet<string> = new Set([...DIRECT, 'text', 'varchar', 'uuid', 'bool'])

function directComparison(op: string): BinaryFn | undefined {
  switch (op) {
    case '=':
      return (a, b) => a === b
    case '<>':
      return (a, b) => a !== b
    case '<':
      return (a, b) => (a as number) < (b as number)
    case '<=':
      return (a, b) => (a as number) <= (b as number)
    case '>':
      return (a, b) => (a as number) > (b as number)
    case '>=':
      return (a, b) => (a as number) >= (b as number)
  }
  return undefined
}

export function comparisonFn(op: string, left: SqlType, right: SqlType): BinaryFn | undefined {
  if (left.key === right.key && left.kind === 'scalar') {
    // Integers, dates and timestamps are numbers or bigints of one kind per type; strings compare
    // by identity for equality (their order needs code-point comparison, below).
    if (DIRECT.has(left.name) || ((op === '=' || op === '<>') && DIRECT_EQUALITY.has(left.name))) {
      return directComparison(op)
    }
  }
  if (op === '=' || op === '<>') {
    const eq = equality(left, right)
    if (eq === undefined) return undefined
    return op === '=' ? eq : (a, b) => !eq(a, b)
  }
  const compare = comparator(left, right)
  if (compare === undefined) return undefined
  switch (op) {
    case '<':
      return (a, b) => compare(a, b) < 0
    case '<=':
      return (a, b) => compare(a, b) <= 0
    case '>':
      return (a, b) => compare(a, b) > 0
    case '>=':
      return (a, b) => compare(a, b) >= 0
  }
  return undefined
}

export function arithmeticFn(op: string, left: SqlType, right: SqlType, result: SqlType): BinaryFn | undefined {
  const res = scalarName(result)
  if (res === 'int2' || res === 'int4') return (a, b) => smallArith(res, op as ArithOp, a as number, b as number)
  if (res === 'int8') {
    return (a, b) =>
      bigArith(op as ArithOp, typeof a === 'bigint' ? a : BigInt(a as number), typeof b === 'bigint' ? b : BigInt(b as number))
  }
  if (res === 'float4' || res === 'float8') return (a, b) => floatArith(res, op as FloatOp, a as number, b as number)
  if (res === 'numeric') {
    switch (op) {
      case '+':
        return (a, b) => add(a as Numeric, b as Numeric)
      case '-':
        return (a, b) => subtract(a as Numeric, b as Numeric)
      case '*':
        return (a, b) => multiply(a as Numeric, b as Numeric)
      case '/':
        return (a, b) => divide(a as Numeric, b as Numeric)
      case '%':
        return (a, b) => modulo(a as Numeric, b as Numeric)
    }
  }
  if (res === 'interval' && scalarName(left) === 'interval' && scalarName(right) === 'interval') {
    if (op === '+') return (a, b) => addInterval(a as Interval, b as Interval)
    if (op === '-') return (a, b) => subtractInterval(a as Interval, b as Interval)
  }
  return undefined
}

export function prefixFn(op: string, type: SqlType): UnaryFn | undefined {
  if (op === '+') return (a) => a
  if (op !== '-') return undefined
  switch (scalarName(type)) {
    case 'int2':
      return (a) => negateSmall('int2', a as number)
    case 'int4':
      return (a) => negateSmall('int4', a as number)
    case 'int8':
      return (a) => negateBig(a as bigint)
    case 'float4':
    case 'float8':
      return (a) => -(a as number)
    case 'numeric':
      return (a) => negate(a as Numeric)
    case 'interval':
      return (a) => negateInterval(a as Interval)
  }
  return undefined
}

export function arrayOperatorFn(op: string, type: SqlType, constantRight?: ArrayValue<unknown>): BinaryFn | undefined {
  if (type.kind !== 'array') return undefined
  const key = codecFor(type.element).key
  if (key === undefined) return undefined
  // A constant right side (`tags && $1`, `tags <@ $1`) has its keys built once, not at every row.
  const constantKeys = constantRight === undefined ? undefined : arrayKeySet(constantRight, key)
  switch (op) {
    case '@>':
      return (a, b) => arrayContains(a as ArrayValue<unknown>, b as ArrayValue<unknown>, key)
    case '<@':
      if (constantKeys !== undefined) return (a) => keysContain(constantKeys, a as ArrayValue<unknown>, key)
      return (a, b) => arrayContains(b as ArrayValue<unknown>, a as ArrayValue<unknown>, key)
    case '&&':
      if (constantKeys !== undefined) return (a) => overlapsKeys(a as ArrayValue<unknown>, constantKeys, key)
      return (a, b) => arrayOverlaps(a as ArrayValue<unknown>, b as ArrayValue<unknown>, key)
  }
  return undefined
}

export const LIKE_OPERATORS: Readonly<Record<string, { readonly negated: boolean; readonly insensitive: boolean }>> = {
  '~~': { negated: false, insensitive: false },
  '!~~': { negated: true, insensitive: false },
  '~~*': { negated: false, insensitive: true },
  '!~~*': { negated: true, insensitive: true },
}

/** Compiled LIKE patterns one non-constant LIKE keeps (a clause's array holds at most 10,000). */
const MAX_CACHED_PATTERNS = 16_384
/** The longest pattern kept in that cache. */
const MAX_CACHED_PATTERN_LENGTH = 256

/**
 * LIKE, its matcher compiled once for a constant pattern, and for patterns
 * known only per row (an array's elements, another column) once per distinct
 * pattern.
 */
export function likeFn(op: string, constantPattern: string | undefined): BinaryFn {
  const spec = LIKE_OPERATORS[op]
  if (spec === undefined) throw new Error(`not a LIKE operator: ${op}`)
  const { negated, insensitive } = spec
  if (constantPattern !== undefined) {
    const matcher = compileLike(constantPattern, insensitive)
    return negated ? (a) => !matcher(a as string) : (a) => matcher(a as string)
  }
  // Patterns from an array (`name LIKE ANY ($1)`, up to 10,000) come round again at every row: each is
  // compiled once. Patterns from rows are endless, so the cache starts over when it fills.
  const matchers = new Map<string, LikeMatcher>()
  return (a, b) => {
    let matcher = matchers.get(b as string)
    if (matcher === undefined) {
      matcher = compileLike(b as string, insensitive)
      // Short ones only: a pattern from a row may be any length, and the cache is per clause.
      if ((b as string).length <= MAX_CACHED_PATTERN_LENGTH) {
        if (matchers.size >= MAX_CACHED_PATTERNS) matchers.clear()
        matchers.set(b as string, matcher)
      }
    }
    const matched = matcher(a as string)
    return negated ? !matched : matched
  }
}
