import { EvaluationError, invalidSyntax } from '../where-error.js'
import { UnsupportedDateTimeError } from './datetime.js'

/**
 * `interval` as Postgres stores it: months, days and microseconds kept apart
 * (a month is not a fixed number of days), each with its own sign.
 *
 * Comparison and equality go through Postgres's "span" (a month counts as 30
 * days, a day as 24 hours), so '1 mon' = '30 days' is true there and here.
 * Postgres 17+ infinite intervals are INT32_MAX/INT32_MAX/INT64_MAX months,
 * days and micros (negated for -infinity).
 */
export interface Interval {
  readonly months: number
  readonly days: number
  readonly micros: bigint
}

const INT32_MAX = 2147483647
const INT32_MIN = -2147483648
const INT64_MAX = 9223372036854775807n
const INT64_MIN = -9223372036854775808n
const USECS_PER_DAY = 86_400_000_000n
const DAYS_PER_MONTH = 30n

export const INTERVAL_INFINITY: Interval = Object.freeze({ months: INT32_MAX, days: INT32_MAX, micros: INT64_MAX })
export const INTERVAL_NEG_INFINITY: Interval = Object.freeze({
  months: INT32_MIN,
  days: INT32_MIN,
  micros: INT64_MIN,
})

export function isInfiniteInterval(i: Interval): boolean {
  return (
    (i.months === INT32_MAX && i.days === INT32_MAX && i.micros === INT64_MAX) ||
    (i.months === INT32_MIN && i.days === INT32_MIN && i.micros === INT64_MIN)
  )
}

/** `interval_cmp_value`: the 128-bit span Postgres orders intervals by. */
export function intervalSpan(i: Interval): bigint {
  return (BigInt(i.months) * DAYS_PER_MONTH + BigInt(i.days)) * USECS_PER_DAY + i.micros
}

export function compareInterval(a: Interval, b: Interval): number {
  const x = intervalSpan(a)
  const y = intervalSpan(b)
  return x < y ? -1 : x > y ? 1 : 0
}

function overflow(): EvaluationError {
  return new EvaluationError('datetime_field_overflow', 'interval out of range')
}

function checked(months: number, days: number, micros: bigint): Interval {
  if (months > INT32_MAX || months < INT32_MIN || days > INT32_MAX || days < INT32_MIN) throw overflow()
  if (micros > INT64_MAX || micros < INT64_MIN) throw overflow()
  const result = { months, days, micros }
  if (isInfiniteInterval(result)) throw overflow()
  return result
}

// ISO 8601 with designators, as IntervalStyle iso_8601 prints: P1Y2M3DT4H5M6.5S, each part signed.
const ISO = /^P(?:(-?[0-9]+)Y)?(?:(-?[0-9]+)M)?(?:(-?[0-9]+)W)?(?:(-?[0-9]+)D)?(?:T(?:(-?[0-9]+)H)?(?:(-?[0-9]+)M)?(?:(-?[0-9]*(?:\.[0-9]*)?)S)?)?$/

const UNITS: Readonly<Record<string, 'us' | 'ms' | 's' | 'min' | 'h' | 'd' | 'w' | 'mon' | 'y' | 'dec' | 'c' | 'mil'>> = {
  microsecond: 'us',
  microseconds: 'us',
  us: 'us',
  usec: 'us',
  usecs: 'us',
  millisecond: 'ms',
  milliseconds: 'ms',
  ms: 'ms',
  msec: 'ms',
  msecs: 'ms',
  second: 's',
  seconds: 's',
  s: 's',
  sec: 's',
  secs: 's',
  minute: 'min',
  minutes: 'min',
  m: 'min',
  min: 'min',
  mins: 'min',
  hour: 'h',
  hours: 'h',
  h: 'h',
  hr: 'h',
  hrs: 'h',
  day: 'd',
  days: 'd',
  d: 'd',
  week: 'w',
  weeks: 'w',
  w: 'w',
  month: 'mon',
  months: 'mon',
  mon: 'mon',
  mons: 'mon',
  year: 'y',
  years: 'y',
  y: 'y',
  yr: 'y',
  yrs: 'y',
  decade: 'dec',
  decades: 'dec',
  century: 'c',
  centuries: 'c',
  millennium: 'mil',
  millennia: 'mil',
}

/**
 * `interval_in` for the forms Postgres prints (iso_8601, postgres and
 * postgres_verbose styles) and the common hand-written ones: `1 day 02:00:00`,
 * `@ 3 hours ago`, `P1DT2H`. Fractions are accepted on seconds and smaller
 * units only; other inputs are refused as unsupported rather than guessed.
 */
export function parseInterval(text: string): Interval {
  const body = text.trim()
  const lower = body.toLowerCase()
  if (lower === 'infinity' || lower === '+infinity') return INTERVAL_INFINITY
  if (lower === '-infinity') return INTERVAL_NEG_INFINITY
  if (body.startsWith('P')) return parseIso(body, text)
  return parseVerbose(lower, text)
}

function parseIso(body: string, text: string): Interval {
  const m = ISO.exec(body)
  if (m === null || body === 'P' || body.endsWith('T')) throw unsupported(text)
  const n = (i: number): number => (m[i] === undefined ? 0 : Number(m[i]))
  const months = n(1) * 12 + n(2)
  const days = n(3) * 7 + n(4)
  let micros = BigInt(n(5)) * 3_600_000_000n + BigInt(n(6)) * 60_000_000n
  if (m[7] !== undefined) micros += secondsToMicros(m[7], text)
  return checked(months, days, micros)
}

/** A signed decimal number of `unit`-microseconds: whole part exact, fraction rounded like Postgres's rint(). */
function scaledMicros(value: string, unit: number, text: string): bigint {
  const m = /^([+-]?)([0-9]*)(?:\.([0-9]*))?$/.exec(value)
  if (m === null || (m[2] === '' && (m[3] ?? '') === '')) throw invalidSyntax('interval', text)
  const fraction = m[3] ?? ''
  const whole = BigInt(m[2] || '0') * BigInt(unit)
  const part = fraction === '' ? 0 : roundHalfEven(Number(`0.${fraction}`) * unit)
  const micros = whole + BigInt(part)
  return m[1] === '-' ? -micros : micros
}

function secondsToMicros(seconds: string, text: string): bigint {
  return scaledMicros(seconds, 1_000_000, text)
}

function roundHalfEven(x: number): number {
  const r = Math.round(x)
  return Math.abs(x - Math.trunc(x)) === 0.5 && r % 2 !== 0 ? r - 1 : r
}

const TIME_TOKEN = /^([+-]?)([0-9]+):([0-9]{1,2})(?::([0-9]{1,2}(?:\.[0-9]*)?))?$/
const NUMBER_TOKEN = /^[+-]?[0-9]+(?:\.[0-9]*)?$/

function parseVerbose(lower: string, text: string): Interval {
  const tokens = lower.replace(/^@\s*/, '').split(/\s+/).filter((t) => t !== '')
  let ago = false
  if (tokens[tokens.length - 1] === 'ago') {
    ago = true
    tokens.pop()
  }
  if (tokens.length === 0) throw invalidSyntax('interval', text)
  let months = 0
  let days = 0
  let micros = 0n
  for (let i = 0; i < tokens.length; i++) {
    const token = tokens[i] ?? ''
    const time = TIME_TOKEN.exec(token)
    if (time !== null) {
      const sign = time[1] === '-' ? -1n : 1n
      const minutes = Number(time[3])
      const seconds = time[4] === undefined ? 0n : secondsToMicros(time[4], text)
      if (minutes > 59 || seconds >= 60_000_000n) throw fieldOverflow(text)
      micros += sign * (BigInt(time[2] ?? '0') * 3_600_000_000n + BigInt(minutes) * 60_000_000n + seconds)
      continue
    }
    // A number glued to its unit ('3days') is split the way Postgres's lexer splits it.
    const glued = /^([+-]?[0-9]+(?:\.[0-9]*)?)([a-z]+)$/.exec(token)
    let value: string
    let unitWord: string | undefined
    if (glued !== null) {
      value = glued[1] ?? ''
      unitWord = glued[2]
    } else if (NUMBER_TOKEN.test(token)) {
      value = token
      unitWord = tokens[i + 1]
      if (unitWord !== undefined && UNITS[unitWord] !== undefined) i++
      else unitWord = undefined
    } else throw unsupported(text)
    const unit = unitWord === undefined ? (i === tokens.length - 1 && tokens.length === 1 ? 's' : 'd') : UNITS[unitWord]
    if (unit === undefined) throw unsupported(text)
    const fractional = value.includes('.')
    if (fractional && unit !== 's' && unit !== 'ms' && unit !== 'us') throw unsupported(text)
    switch (unit) {
      case 'us':
        micros += scaledMicros(value, 1, text)
        break
      case 'ms':
        micros += scaledMicros(value, 1000, text)
        break
      case 's':
        micros += secondsToMicros(value, text)
        break
      case 'min':
        micros += BigInt(value) * 60_000_000n
        break
      case 'h':
        micros += BigInt(value) * 3_600_000_000n
        break
      case 'd':
        days += Number(value)
        break
      case 'w':
        days += Number(value) * 7
        break
      case 'mon':
        months += Number(value)
        break
      case 'y':
        months += Number(value) * 12
        break
      case 'dec':
        months += Number(value) * 120
        break
      case 'c':
        months += Number(value) * 1200
        break
      case 'mil':
        months += Number(value) * 12000
        break
    }
  }
  if (ago) return checked(-months, -days, -micros)
  return checked(months, days, micros)
}

function unsupported(text: string): UnsupportedDateTimeError {
  return new UnsupportedDateTimeError(
    `unsupported interval literal "${text}": use e.g. '1 day 02:00:00', '3 hours' or ISO 8601 'P1DT2H'`,
  )
}

function fieldOverflow(text: string): EvaluationError {
  return new EvaluationError('datetime_field_overflow', `interval field value out of range: "${text}"`)
}

/** `interval_out` with IntervalStyle iso_8601. */
export function formatInterval(i: Interval): string {
  if (isInfiniteInterval(i)) return i.months > 0 ? 'infinity' : '-infinity'
  if (i.months === 0 && i.days === 0 && i.micros === 0n) return 'PT0S'
  let out = 'P'
  const years = Math.trunc(i.months / 12)
  const months = i.months - years * 12
  if (years !== 0) out += `${years}Y`
  if (months !== 0) out += `${months}M`
  if (i.days !== 0) out += `${i.days}D`
  if (i.micros !== 0n) {
    out += 'T'
    const negative = i.micros < 0n
    const abs = negative ? -i.micros : i.micros
    const hours = abs / 3_600_000_000n
    const minutes = (abs / 60_000_000n) % 60n
    const micros = abs % 60_000_000n
    const sign = negative ? '-' : ''
    if (hours !== 0n) out += `${sign}${hours}H`
    if (minutes !== 0n) out += `${sign}${minutes}M`
    if (micros !== 0n) {
      const seconds = micros / 1_000_000n
      const fraction = micros % 1_000_000n
      let text = `${sign}${seconds}`
      if (fraction !== 0n) text += `.${fraction.toString().padStart(6, '0').replace(/0+$/, '')}`
      out += `${text}S`
    }
  }
  return out
}

/** A string equal exactly when `interval_eq` says equal. */
export function intervalKey(i: Interval): string {
  return intervalSpan(i).toString()
}

export function negateInterval(i: Interval): Interval {
  if (isInfiniteInterval(i)) return i.months > 0 ? INTERVAL_NEG_INFINITY : INTERVAL_INFINITY
  return checked(-i.months, -i.days, -i.micros)
}

/** `interval_time`: the time part modulo one day. */
export function intervalToTime(i: Interval): number {
  if (isInfiniteInterval(i)) {
    throw new EvaluationError('datetime_field_overflow', 'cannot convert infinite interval to time')
  }
  let t = i.micros % USECS_PER_DAY
  if (t < 0n) t += USECS_PER_DAY
  return Number(t)
}

export function timeToInterval(micros: number): Interval {
  return { months: 0, days: 0, micros: BigInt(micros) }
}


/** `interval_pl`: field by field; infinities absorb finite values, opposite infinities are an error. */
export function addInterval(a: Interval, b: Interval): Interval {
  const ai = isInfiniteInterval(a)
  const bi = isInfiniteInterval(b)
  if (ai || bi) {
    if (ai && bi && a.months !== b.months) throw overflow()
    return ai ? a : b
  }
  return checked(a.months + b.months, a.days + b.days, a.micros + b.micros)
}

export function subtractInterval(a: Interval, b: Interval): Interval {
  const ai = isInfiniteInterval(a)
  const bi = isInfiniteInterval(b)
  if (ai || bi) {
    if (ai && bi && a.months === b.months) throw overflow()
    return ai ? a : negateInterval(b)
  }
  return checked(a.months - b.months, a.days - b.days, a.micros - b.micros)
}
