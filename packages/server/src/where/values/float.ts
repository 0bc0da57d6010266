import { divisionByZero, invalidSyntax, outOfRange } from '../where-error.js'
import type { FiniteNumeric, Numeric } from './numeric.js'
import { formatNumeric, pow10 } from './numeric.js'

/**
 * float4 and float8 as Postgres computes them. Both are JS numbers; a float4 is
 * always a value `Math.fround` leaves unchanged. Decimal → binary conversions
 * are correctly rounded straight to the target precision (what strtof/strtod
 * do), never through a double first; text output is the shortest round-trip
 * form Postgres prints with extra_float_digits > 0.
 */

export type FloatName = 'float4' | 'float8'

const WORD = { float4: 'real', float8: 'double precision' } as const

const SPACE_CHARS = ' \t\n\v\f\r'
const DECIMAL = /^[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?/
const SPECIALS: readonly [string, number][] = [
  ['+infinity', Infinity],
  ['-infinity', -Infinity],
  ['infinity', Infinity],
  ['+inf', Infinity],
  ['-inf', -Infinity],
  ['inf', Infinity],
  ['+nan', NaN],
  ['-nan', NaN],
  ['nan', NaN],
]

function trimSpaces(text: string): string {
  let start = 0
  let end = text.length
  while (start < end && SPACE_CHARS.includes(text.charAt(start))) start++
  while (end > start && SPACE_CHARS.includes(text.charAt(end - 1))) end--
  return text.slice(start, end)
}

/** `float4in` / `float8in`. */
export function parseFloat(name: FloatName, text: string): number {
  const body = trimSpaces(text)
  if (body === '') throw invalidSyntax(WORD[name], text)
  const lower = body.toLowerCase()
  for (const [word, value] of SPECIALS) {
    if (lower === word) return value
  }
  const match = DECIMAL.exec(body)
  if (match === null || match[0].length !== body.length) throw invalidSyntax(WORD[name], text)
  const value = name === 'float8' ? Number(body) : decimalToFloat32(body)
  if (!Number.isFinite(value)) throw outOfRange(`"${text}" is out of range for type ${WORD[name]}`)
  if (value === 0 && /[1-9]/.test(mantissaOf(body))) {
    throw outOfRange(`"${text}" is out of range for type ${WORD[name]}`)
  }
  return value
}

function mantissaOf(decimal: string): string {
  const e = decimal.search(/[eE]/)
  return e < 0 ? decimal : decimal.slice(0, e)
}

/** Fast path for text Postgres produced; same result as {@link parseFloat}. */
export function parseFloatOutput(name: FloatName, text: string): number {
  if (name === 'float8' && OUTPUT_SHAPE.test(text)) {
    const n = Number(text)
    if (Number.isFinite(n) && n !== 0) return n
  }
  return parseFloat(name, text)
}

const OUTPUT_SHAPE = /^-?[0-9]+(?:\.[0-9]+)?(?:e[+-][0-9]+)?$/

/**
 * Decimal text → nearest float32 (ties to even), as strtof does. Rounding to a
 * double first and then to float32 can be off by one ulp when the double lands
 * exactly on a float32 midpoint; that case is settled exactly.
 */
export function decimalToFloat32(decimal: string): number {
  const d = Number(decimal)
  const f = Math.fround(d)
  if (f === d || !Number.isFinite(d)) return f
  const [lo, hi] = f < d ? [f, nextFloat32Up(f)] : [nextFloat32Down(f), f]
  const mid = lo + (hi - lo) / 2
  if (d !== mid) return f
  const cmp = compareDecimalToDouble(decimal, mid)
  if (cmp === 0) return f
  return cmp < 0 ? lo : hi
}

const F32 = new Float32Array(1)
const U32 = new Uint32Array(F32.buffer)

function nextFloat32Up(f: number): number {
  F32[0] = f
  if (f === 0) return 1.401298464324817e-45
  U32[0] = (U32[0] ?? 0) + (f > 0 ? 1 : -1)
  return F32[0] ?? 0
}

function nextFloat32Down(f: number): number {
  return -nextFloat32Up(-f)
}

/** Exact sign of (decimal − x), both finite. */
function compareDecimalToDouble(decimal: string, x: number): number {
  const [num, den] = decimalRational(decimal)
  const [xn, xd] = doubleRational(x)
  const left = num * xd
  const right = xn * den
  return left < right ? -1 : left > right ? 1 : 0
}

function decimalRational(decimal: string): [bigint, bigint] {
  const m = /^([+-]?)([0-9]*)\.?([0-9]*)(?:[eE]([+-]?[0-9]+))?$/.exec(decimal)
  if (m === null) throw new Error(`not a decimal: ${decimal}`)
  const frac = m[3] ?? ''
  let num = BigInt(`${m[2] ?? ''}${frac}` || '0')
  if (m[1] === '-') num = -num
  const exponent = Number(m[4] ?? '0') - frac.length
  return exponent >= 0 ? [num * pow10(exponent), 1n] : [num, pow10(-exponent)]
}

const F64 = new Float64Array(1)
const U64 = new BigUint64Array(F64.buffer)

/** A finite double as an exact fraction num/den (den a power of two). */
export function doubleRational(x: number): [bigint, bigint] {
  F64[0] = x
  const bits = U64[0] ?? 0n
  const negative = bits >> 63n === 1n
  const exponentBits = Number((bits >> 52n) & 0x7ffn)
  let mantissa = bits & 0xfffffffffffffn
  let exponent: number
  if (exponentBits === 0) exponent = -1074
  else {
    mantissa |= 1n << 52n
    exponent = exponentBits - 1075
  }
  if (negative) mantissa = -mantissa
  return exponent >= 0 ? [mantissa << BigInt(exponent), 1n] : [mantissa, 1n << BigInt(-exponent)]
}

/** `float8_to_float4` (`dtof`): overflow and underflow are errors, as in Postgres. */
export function toFloat32(x: number): number {
  const f = Math.fround(x)
  if (!Number.isFinite(f) && Number.isFinite(x)) throw outOfRange('value out of range: overflow')
  if (f === 0 && x !== 0) throw outOfRange('value out of range: underflow')
  return f
}

/** bigint → nearest float32, ties to even (C's `(float4) int64`), without double rounding. */
export function bigintToFloat32(value: bigint): number {
  const abs = value < 0n ? -value : value
  if (abs < 1n << 53n) return Math.fround(Number(value))
  const bitLength = abs.toString(2).length
  const shift = BigInt(bitLength - 24)
  let mantissa = abs >> shift
  const rest = abs - (mantissa << shift)
  const half = 1n << (shift - 1n)
  if (rest > half || (rest === half && (mantissa & 1n) === 1n)) mantissa += 1n
  const result = Number(mantissa) * 2 ** Number(shift)
  return value < 0n ? -result : result
}

export type FloatOp = '+' | '-' | '*' | '/'

/** float4/float8 arithmetic with Postgres's overflow, underflow and division-by-zero errors. */
export function floatArith(name: FloatName, op: FloatOp, a: number, b: number): number {
  let r: number
  switch (op) {
    case '+':
      r = a + b
      break
    case '-':
      r = a - b
      break
    case '*':
      r = a * b
      break
    case '/':
      if (b === 0 && !Number.isNaN(a)) throw divisionByZero()
      r = a / b
      break
  }
  // Computing in double and rounding once to float32 is exact for + - * / (53 >= 2*24 + 2).
  if (name === 'float4') r = Math.fround(r)
  if (!Number.isFinite(r) && !Number.isNaN(r)) {
    const infiniteInput = op === '/' ? !Number.isFinite(a) : !Number.isFinite(a) || !Number.isFinite(b)
    if (!infiniteInput) throw outOfRange('value out of range: overflow')
  }
  if (r === 0) {
    if (op === '*' && a !== 0 && b !== 0) throw outOfRange('value out of range: underflow')
    if (op === '/' && a !== 0 && Number.isFinite(b)) throw outOfRange('value out of range: underflow')
  }
  return r
}

/** Postgres's float comparison: NaN equals NaN and sorts above everything; -0 = 0. */
export function compareFloat(a: number, b: number): number {
  if (Number.isNaN(a)) return Number.isNaN(b) ? 0 : 1
  if (Number.isNaN(b)) return -1
  return a < b ? -1 : a > b ? 1 : 0
}

/** A string equal exactly when `float8eq` says equal (float4 values are promoted first). */
export function floatKey(x: number): string {
  if (Number.isNaN(x)) return 'NaN'
  if (x === 0) return '0'
  return String(x)
}

/** `rint`: round half to even, what float → int casts use. */
export function roundHalfEven(x: number): number {
  const r = Math.round(x)
  if (Math.abs(x - Math.trunc(x)) === 0.5 && r % 2 !== 0) return r - 1
  return r
}

/** float → int2/int4/int8 (`ftoi4`, `dtoi8`, …): round half to even, then range-check. */
export function floatToBigint(x: number, word: 'smallint' | 'integer' | 'bigint'): bigint {
  const r = roundHalfEven(x)
  if (Number.isNaN(r) || !(r >= -9223372036854775808 && r < 9223372036854775808)) {
    throw outOfRange(`${word} out of range`)
  }
  return BigInt(r)
}

/** The float output functions with extra_float_digits > 0 (shortest round-trip text). */
export function formatFloat(name: FloatName, x: number): string {
  if (Number.isNaN(x)) return 'NaN'
  if (x === Infinity) return 'Infinity'
  if (x === -Infinity) return '-Infinity'
  if (x === 0) return Object.is(x, -0) ? '-0' : '0'
  const { digits, exponent } = shortestDecimal(Math.abs(x), name)
  // Postgres's ryu-based output switches to exponent form at the same places printf %g would.
  const fixedLimit = name === 'float8' ? 15 : 6
  const sign = x < 0 ? '-' : ''
  if (exponent >= -4 && exponent < fixedLimit) return sign + fixedNotation(digits, exponent)
  const mantissa = digits.length === 1 ? digits : `${digits[0] ?? ''}.${digits.slice(1)}`
  const abs = Math.abs(exponent)
  return `${sign}${mantissa}e${exponent < 0 ? '-' : '+'}${abs < 10 ? '0' : ''}${abs}`
}

function fixedNotation(digits: string, exponent: number): string {
  if (exponent < 0) return `0.${'0'.repeat(-exponent - 1)}${digits}`
  if (digits.length <= exponent + 1) return digits + '0'.repeat(exponent + 1 - digits.length)
  return `${digits.slice(0, exponent + 1)}.${digits.slice(exponent + 1)}`
}

interface Decimal {
  /** Significant digits, no leading or trailing zeros. */
  readonly digits: string
  /** Decimal exponent of the first digit. */
  readonly exponent: number
}

/** m · 2^e with m the full significand (implicit bit included), for a positive finite value. */
function decompose(x: number, name: FloatName): { m: bigint; e: number; lowerGapHalved: boolean } {
  if (name === 'float8') {
    F64[0] = x
    const bits = U64[0] ?? 0n
    const exponentBits = Number((bits >> 52n) & 0x7ffn)
    const fraction = bits & 0xfffffffffffffn
    if (exponentBits === 0) return { m: fraction, e: -1074, lowerGapHalved: false }
    return { m: fraction | (1n << 52n), e: exponentBits - 1075, lowerGapHalved: fraction === 0n && exponentBits > 1 }
  }
  F32[0] = x
  const bits = U32[0] ?? 0
  const exponentBits = (bits >>> 23) & 0xff
  const fraction = bits & 0x7fffff
  if (exponentBits === 0) return { m: BigInt(fraction), e: -149, lowerGapHalved: false }
  return { m: BigInt(fraction | 0x800000), e: exponentBits - 150, lowerGapHalved: fraction === 0 && exponentBits > 1 }
}

/** a/b vs c/d for positive denominators. */
function compareFractions(a: bigint, b: bigint, c: bigint, d: bigint): number {
  const l = a * d
  const r = c * b
  return l < r ? -1 : l > r ? 1 : 0
}

/**
 * The shortest decimal strictly inside the value's rounding interval, the one
 * nearest the value when several are that short (ties to an even last digit):
 * Postgres's Ryu with bounds excluded (`acceptBounds = false`), which is why
 * 1e23::float8 prints as 9.999999999999999e+22 there (and here) while
 * JavaScript prints 1e+23. Exact BigInt arithmetic: float output is not on the
 * row path, only `::text` casts.
 */
function shortestDecimal(x: number, name: FloatName): Decimal {
  const { m, e, lowerGapHalved } = decompose(x, name)
  // Work in units of 2^(e-2): value 4m, bounds 4m+2 and 4m-2 (4m-1 below a power of two).
  const shift = e - 2
  const unitNum = shift >= 0 ? 1n << BigInt(shift) : 1n
  const unitDen = shift >= 0 ? 1n : 1n << BigInt(-shift)
  const value = 4n * m * unitNum
  const upper = (4n * m + 2n) * unitNum
  const lower = (4n * m - (lowerGapHalved ? 1n : 2n)) * unitNum
  let exponent = Math.floor(Math.log10(x))
  // log10 can be off by one near powers of ten: settle it exactly.
  const power = (k: number): [bigint, bigint] => (k >= 0 ? [pow10(k), 1n] : [1n, pow10(-k)])
  {
    const [pn, pd] = power(exponent)
    if (compareFractions(value, unitDen, pn, pd) < 0) exponent--
    const [qn, qd] = power(exponent + 1)
    if (compareFractions(value, unitDen, qn, qd) >= 0) exponent++
  }
  for (let digits = 1; digits <= 17; digits++) {
    const q = exponent - digits + 1
    // d = value / 10^q, rounded half to even.
    const [qn, qd] = power(q)
    const num = value * qd
    const den = unitDen * qn
    let d = num / den
    const rest = num - d * den
    if (rest * 2n > den || (rest * 2n === den && d % 2n === 1n)) d += 1n
    let best: bigint | undefined
    let bestDistance: [bigint, bigint] | undefined
    for (const candidate of [d, d - 1n, d + 1n]) {
      if (candidate <= 0n) continue
      const cn = candidate * qn
      const cd = qd
      if (compareFractions(cn, cd, lower, unitDen) <= 0 || compareFractions(cn, cd, upper, unitDen) >= 0) continue
      // |candidate - value| as a fraction over cd * unitDen.
      const diff = cn * unitDen - value * cd
      const distance: [bigint, bigint] = [diff < 0n ? -diff : diff, cd * unitDen]
      if (bestDistance === undefined || compareFractions(distance[0], distance[1], bestDistance[0], bestDistance[1]) < 0) {
        best = candidate
        bestDistance = distance
      }
    }
    if (best !== undefined) {
      let text = best.toString()
      let exp = q + text.length - 1
      text = text.replace(/0+$/, '')
      if (text === '') {
        text = '0'
        exp = 0
      }
      return { digits: text, exponent: exp }
    }
  }
  const fallback = x.toExponential()
  const at = fallback.indexOf('e')
  return { digits: fallback.slice(0, at).replace('.', ''), exponent: Number(fallback.slice(at + 1)) }
}

/**
 * `float8_numeric` / `float4_numeric`: Postgres prints the float with
 * `%.{15|6}g` (round half to even on the exact binary value) and parses that.
 */
export function floatToNumeric(x: number, significantDigits: number): Numeric {
  if (Number.isNaN(x)) return 'NaN'
  if (x === Infinity) return 'Infinity'
  if (x === -Infinity) return '-Infinity'
  if (x === 0) return { coef: 0n, scale: 0 }
  const [num, den] = doubleRational(Math.abs(x))
  // Exact decimal expansion: num/den with den = 2^k equals num*5^k / 10^k.
  const k = den.toString(2).length - 1
  const digitsValue = num * 5n ** BigInt(k)
  const all = digitsValue.toString()
  // value = all × 10^-k; exponent of the first digit:
  const firstExponent = all.length - 1 - k
  let kept: bigint
  if (all.length <= significantDigits) kept = digitsValue * pow10(significantDigits - all.length)
  else {
    const drop = all.length - significantDigits
    const divisor = pow10(drop)
    kept = digitsValue / divisor
    const rest = digitsValue % divisor
    const twice = rest * 2n
    if (twice > divisor || (twice === divisor && kept % 2n === 1n)) kept += 1n
  }
  let exponent = firstExponent
  let keptDigits = kept.toString()
  if (keptDigits.length > significantDigits) {
    // Rounding carried into a new digit (9.99… → 10.0…).
    exponent++
    keptDigits = keptDigits.slice(0, significantDigits)
  }
  keptDigits = keptDigits.replace(/0+$/, '') || '0'
  // value = keptDigits × 10^(exponent - (len - 1)); numeric_in's display scale is the fraction digits %g printed.
  const scale = Math.max(0, keptDigits.length - 1 - exponent)
  const power = exponent - (keptDigits.length - 1) + scale
  const coef = BigInt(keptDigits) * pow10(power)
  return { coef: x < 0 ? -coef : coef, scale }
}

/** `numeric_float8` / `numeric_float4`: through the text form, with the float input's range errors. */
export function numericToFloat(name: FloatName, n: Numeric): number {
  if (typeof n === 'string') return n === 'NaN' ? NaN : n === 'Infinity' ? Infinity : -Infinity
  return parseFloat(name, formatNumeric(n as FiniteNumeric))
}

