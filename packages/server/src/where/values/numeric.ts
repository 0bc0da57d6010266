import { divisionByZero, EvaluationError, invalidSyntax } from '../where-error.js'

/**
 * Postgres `numeric`, exactly: a finite value is `coef / 10^scale` where
 * `scale` is the display scale (`1.50` has coef 150, scale 2, and prints so),
 * and the specials NaN, Infinity and -Infinity order as Postgres orders them
 * (-Infinity < every number < Infinity < NaN, and NaN = NaN).
 *
 * Never converted to a float: every operation is BigInt arithmetic with the
 * result scale Postgres picks (division included: see {@link divScale}).
 */
export interface FiniteNumeric {
  readonly coef: bigint
  readonly scale: number
}

export type NumericSpecial = 'NaN' | 'Infinity' | '-Infinity'

export type Numeric = FiniteNumeric | NumericSpecial

/** Postgres's NUMERIC_MAX_DISPLAY_SCALE / NUMERIC_MIN_SIG_DIGITS, which fix division's result scale. */
const MAX_DISPLAY_SCALE = 1000
const MIN_SIG_DIGITS = 16
/** Postgres refuses exponents beyond ±NUMERIC_MAX_PRECISION in numeric input. */
const MAX_INPUT_EXPONENT = 1000
/** Postgres's NUMERIC_DSCALE_MAX: a product is rounded to this many fraction digits. */
const DSCALE_MAX = 0x3fff

export const NUMERIC_ZERO: FiniteNumeric = Object.freeze({ coef: 0n, scale: 0 })

const POWERS: bigint[] = []
export function pow10(n: number): bigint {
  if (n < 64) {
    let p = POWERS[n]
    if (p === undefined) {
      p = 10n ** BigInt(n)
      POWERS[n] = p
    }
    return p
  }
  return 10n ** BigInt(n)
}

const SPACE = '[ \\t\\n\\v\\f\\r]*'
const SPECIAL_SYNTAX = new RegExp(`^${SPACE}([+-]?)(nan|infinity|inf)${SPACE}$`, 'i')
const DECIMAL_SYNTAX = new RegExp(
  `^${SPACE}([+-]?)((?:[0-9](?:_?[0-9])*)?)(?:\\.((?:[0-9](?:_?[0-9])*)?))?(?:[eE]([+-]?[0-9](?:_?[0-9])*))?${SPACE}$`,
)
const NONDECIMAL_SYNTAX = new RegExp(
  `^${SPACE}([+-]?)(0[xX](?:_?[0-9a-fA-F])+|0[oO](?:_?[0-7])+|0[bB](?:_?[01])+)${SPACE}$`,
)

/** The `numeric_in` input function (Postgres 16+ syntax: underscores, 0x/0o/0b integers). */
export function parseNumeric(text: string): Numeric {
  const fast = parsePlainDecimal(text)
  if (fast !== undefined) return fast
  const special = SPECIAL_SYNTAX.exec(text)
  if (special !== null) {
    const word = (special[2] ?? '').toLowerCase()
    const sign = special[1]
    if (word === 'nan') {
      if (sign !== '') throw invalidSyntax('numeric', text)
      return 'NaN'
    }
    return sign === '-' ? '-Infinity' : 'Infinity'
  }
  const nondecimal = NONDECIMAL_SYNTAX.exec(text)
  if (nondecimal !== null) {
    const value = BigInt((nondecimal[2] ?? '').replaceAll('_', ''))
    return { coef: nondecimal[1] === '-' ? -value : value, scale: 0 }
  }
  const match = DECIMAL_SYNTAX.exec(text)
  if (match === null) throw invalidSyntax('numeric', text)
  const intDigits = (match[2] ?? '').replaceAll('_', '')
  const fracDigits = (match[3] ?? '').replaceAll('_', '')
  if (intDigits === '' && fracDigits === '') throw invalidSyntax('numeric', text)
  let exponent = 0
  if (match[4] !== undefined) {
    exponent = Number(match[4].replaceAll('_', ''))
    if (!(Math.abs(exponent) <= MAX_INPUT_EXPONENT)) throw invalidSyntax('numeric', text)
  }
  let coef = BigInt(intDigits + fracDigits || '0')
  let scale = fracDigits.length - exponent
  if (scale < 0) {
    coef *= pow10(-scale)
    scale = 0
  }
  if (match[1] === '-') coef = -coef
  return { coef, scale }
}

/** `-?digits[.digits]`, the shape numeric_out produces, without regular expressions. */
function parsePlainDecimal(text: string): FiniteNumeric | undefined {
  const n = text.length
  let i = text.charCodeAt(0) === 45 ? 1 : 0
  const start = i
  let dot = -1
  for (; i < n; i++) {
    const c = text.charCodeAt(i)
    if (c === 46 && dot < 0) dot = i
    else if (c < 48 || c > 57) return undefined
  }
  if (n === start || dot === start || dot === n - 1) return undefined
  const digits = dot < 0 ? text.slice(start) : text.slice(start, dot) + text.slice(dot + 1)
  const coef = BigInt(digits)
  return { coef: start === 1 ? -coef : coef, scale: dot < 0 ? 0 : n - dot - 1 }
}

/** The `numeric_out` output function: plain notation with exactly `scale` fraction digits. */
export function formatNumeric(n: Numeric): string {
  if (typeof n === 'string') return n
  const negative = n.coef < 0n
  let digits = (negative ? -n.coef : n.coef).toString()
  let out: string
  if (n.scale === 0) out = digits
  else {
    if (digits.length <= n.scale) digits = '0'.repeat(n.scale - digits.length + 1) + digits
    out = `${digits.slice(0, digits.length - n.scale)}.${digits.slice(digits.length - n.scale)}`
  }
  return negative ? `-${out}` : out
}

/** Same value with trailing fraction zeros removed: the canonical form of an equality key. */
export function normalize(n: FiniteNumeric): FiniteNumeric {
  let { coef, scale } = n
  if (coef === 0n) return NUMERIC_ZERO
  while (scale > 0 && coef % 10n === 0n) {
    coef /= 10n
    scale--
  }
  return { coef, scale }
}

/** A string equal for exactly the values `numeric_eq` calls equal. */
export function numericKey(n: Numeric): string {
  return typeof n === 'string' ? n : formatNumeric(normalize(n))
}

function rank(n: Numeric): number {
  if (typeof n !== 'string') return 0
  return n === 'NaN' ? 3 : n === 'Infinity' ? 2 : -2
}

/** `numeric_cmp`. */
export function compareNumeric(a: Numeric, b: Numeric): number {
  if (typeof a === 'string' || typeof b === 'string') {
    const ra = rank(a)
    const rb = rank(b)
    return ra < rb ? -1 : ra > rb ? 1 : 0
  }
  const [x, y] = align(a, b)
  return x < y ? -1 : x > y ? 1 : 0
}

function align(a: FiniteNumeric, b: FiniteNumeric): [bigint, bigint] {
  if (a.scale === b.scale) return [a.coef, b.coef]
  if (a.scale < b.scale) return [a.coef * pow10(b.scale - a.scale), b.coef]
  return [a.coef, b.coef * pow10(a.scale - b.scale)]
}

function sign(n: Numeric): number {
  if (typeof n === 'string') return n === 'Infinity' ? 1 : n === '-Infinity' ? -1 : 0
  return n.coef > 0n ? 1 : n.coef < 0n ? -1 : 0
}

export function negate(n: Numeric): Numeric {
  if (typeof n === 'string') return n === 'NaN' ? n : n === 'Infinity' ? '-Infinity' : 'Infinity'
  return { coef: -n.coef, scale: n.scale }
}

export function add(a: Numeric, b: Numeric): Numeric {
  if (typeof a === 'string' || typeof b === 'string') {
    if (a === 'NaN' || b === 'NaN') return 'NaN'
    if (typeof a === 'string' && typeof b === 'string') return a === b ? a : 'NaN'
    return typeof a === 'string' ? a : (b as NumericSpecial)
  }
  const [x, y] = align(a, b)
  return { coef: x + y, scale: Math.max(a.scale, b.scale) }
}

export function subtract(a: Numeric, b: Numeric): Numeric {
  return add(a, negate(b))
}

export function multiply(a: Numeric, b: Numeric): Numeric {
  if (typeof a === 'string' || typeof b === 'string') {
    if (a === 'NaN' || b === 'NaN') return 'NaN'
    const s = sign(a) * sign(b)
    // Infinity times zero has no sign to take.
    return s === 0 ? 'NaN' : s > 0 ? 'Infinity' : '-Infinity'
  }
  const product = { coef: a.coef * b.coef, scale: a.scale + b.scale }
  return product.scale > DSCALE_MAX ? round(product, DSCALE_MAX) : product
}

export function divide(a: Numeric, b: Numeric): Numeric {
  if (typeof a === 'string' || typeof b === 'string') {
    if (a === 'NaN' || b === 'NaN') return 'NaN'
    if (typeof a === 'string') {
      if (typeof b === 'string') return 'NaN'
      const s = sign(b)
      if (s === 0) throw divisionByZero()
      return sign(a) * s > 0 ? 'Infinity' : '-Infinity'
    }
    // finite / ±Infinity: Postgres returns an unsigned zero rather than underflowing.
    return NUMERIC_ZERO
  }
  if (b.coef === 0n) throw divisionByZero()
  const scale = divScale(a, b)
  // a/b at `scale` digits = a.coef * 10^(b.scale + scale - a.scale) / b.coef, rounded half away from zero.
  const shift = b.scale + scale - a.scale
  let num = a.coef
  let den = b.coef
  if (shift >= 0) num *= pow10(shift)
  else den *= pow10(-shift)
  return { coef: roundedQuotient(num, den), scale }
}

/** num / den rounded half away from zero. */
function roundedQuotient(num: bigint, den: bigint): bigint {
  const q = num / den
  const r = num % den
  if (r === 0n) return q
  const twice = (r < 0n ? -r : r) * 2n
  const absDen = den < 0n ? -den : den
  if (twice >= absDen) return (num < 0n) !== (den < 0n) ? q - 1n : q + 1n
  return q
}

/** `numeric_mod`: truncated quotient, remainder with the sign of the dividend. */
export function modulo(a: Numeric, b: Numeric): Numeric {
  if (typeof a === 'string' || typeof b === 'string') {
    if (a === 'NaN' || b === 'NaN') return 'NaN'
    if (typeof a === 'string') {
      if (sign(b) === 0) throw divisionByZero()
      return 'NaN'
    }
    return a
  }
  if (b.coef === 0n) throw divisionByZero()
  const [x, y] = align(a, b)
  return { coef: x % y, scale: Math.max(a.scale, b.scale) }
}

/**
 * Postgres's `select_div_scale`: enough digits for 16 significant ones, never
 * fewer than either input's display scale. It reasons in base-10000 digits
 * (Postgres's storage), so the estimate is reproduced in that base.
 */
export function divScale(a: FiniteNumeric, b: FiniteNumeric): number {
  const [weight1, first1] = baseWeight(a)
  const [weight2, first2] = baseWeight(b)
  let qweight = weight1 - weight2
  if (first1 <= first2) qweight--
  let scale = MIN_SIG_DIGITS - qweight * 4
  scale = Math.max(scale, a.scale, b.scale, 0)
  return Math.min(scale, MAX_DISPLAY_SCALE)
}

/** Weight and leading digit of the value in base 10000 (0, 0 for zero). */
function baseWeight(n: FiniteNumeric): [number, number] {
  if (n.coef === 0n) return [0, 0]
  const abs = n.coef < 0n ? -n.coef : n.coef
  const exponent = abs.toString().length - 1 - n.scale
  const weight = Math.floor(exponent / 4)
  const shift = n.scale + 4 * weight
  const first = shift >= 0 ? abs / pow10(shift) : abs * pow10(-shift)
  return [weight, Number(first)]
}

/** `round_var`: to `scale` fraction digits, half away from zero; the display scale becomes `scale`. */
export function round(n: FiniteNumeric, scale: number): FiniteNumeric {
  if (scale >= n.scale) return { coef: n.coef * pow10(scale - n.scale), scale }
  return { coef: roundedQuotient(n.coef, pow10(n.scale - scale)), scale }
}

/** The length coercion of `numeric(precision, scale)`, as an explicit cast applies it. */
export function applyNumericTypmod(n: Numeric, precision: number, scale: number): Numeric {
  if (typeof n === 'string') {
    if (n === 'NaN') return n
    throw new EvaluationError(
      'numeric_value_out_of_range',
      `numeric field overflow`,
    )
  }
  const rounded =
    scale >= 0
      ? round(n, scale)
      : { coef: roundedQuotient(n.coef, pow10(n.scale - scale)) * pow10(-scale), scale: 0 }
  const abs = rounded.coef < 0n ? -rounded.coef : rounded.coef
  // Integer digits may not exceed precision - scale.
  const limit = pow10(precision - scale + rounded.scale)
  if (abs >= limit) throw new EvaluationError('numeric_value_out_of_range', 'numeric field overflow')
  return rounded
}

/** `numeric_int2/4/8`: round half away from zero, then range-check. */
export function numericToBigint(n: Numeric, word: 'smallint' | 'integer' | 'bigint'): bigint {
  if (typeof n === 'string') {
    throw new EvaluationError(
      'invalid_parameter_value',
      n === 'NaN' ? `cannot convert NaN to ${word}` : `cannot convert infinity to ${word}`,
    )
  }
  return round(n, 0).coef
}

export function fromBigint(value: bigint): FiniteNumeric {
  return { coef: value, scale: 0 }
}

