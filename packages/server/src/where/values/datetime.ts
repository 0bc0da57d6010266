import { ServerError } from '../../errors.js'
import { EvaluationError } from '../where-error.js'

/**
 * date, time, timestamp and timestamptz in Postgres's own representation, so
 * that ordering, ranges and infinities behave exactly as there:
 *
 * - date: days since 2000-01-01 (a number), ±Infinity for ±infinity;
 * - timestamp / timestamptz: microseconds since 2000-01-01 00:00 (a bigint),
 *   INT64_MIN / INT64_MAX for -infinity / infinity; timestamptz is UTC, the
 *   session time zone of every connection Sluice reads from;
 * - time: microseconds since midnight (a number, 0 to 24:00:00).
 *
 * Input covers ISO 8601 (what Postgres prints with DateStyle ISO), `T` or space
 * between date and time, `Z`/`UTC`/`GMT`/numeric offsets, `BC`, and the special
 * words. Postgres accepts much more (month names, DMY numerals, named zones):
 * those are refused with {@link UnsupportedDateTimeError}, which the compiler
 * reports as unsupported rather than guess.
 */

export const USECS_PER_DAY = 86_400_000_000n
/** Julian day of 2000-01-01, Postgres's epoch. */
const EPOCH_JDATE = 2_451_545
/** date2j(294277, 1, 1): first day past the timestamp range. */
const TIMESTAMP_END_JULIAN = 109_203_528
/** date2j(5874898, 1, 1): first day past the date range. */
const DATE_END_JULIAN = 2_147_483_494
const MIN_TIMESTAMP = -211_813_488_000_000_000n
const END_TIMESTAMP = 9_223_371_331_200_000_000n

export const TIMESTAMP_NOBEGIN = -9_223_372_036_854_775_808n
export const TIMESTAMP_NOEND = 9_223_372_036_854_775_807n

/** An input Postgres might accept that we do not interpret (e.g. 'now', a named zone). */
export class UnsupportedDateTimeError extends ServerError<'unsupported_datetime'> {
  override readonly name = 'UnsupportedDateTimeError'
  constructor(message: string) {
    super('unsupported_datetime', message)
  }
}

export type DateTimeKind = 'date' | 'time' | 'timestamp' | 'timestamptz'

const WORD: Readonly<Record<DateTimeKind, string>> = {
  date: 'date',
  time: 'time without time zone',
  timestamp: 'timestamp without time zone',
  timestamptz: 'timestamp with time zone',
}
const RANGE_WORD: Readonly<Record<DateTimeKind, string>> = {
  date: 'date',
  time: 'time',
  timestamp: 'timestamp',
  timestamptz: 'timestamp',
}

export function date2j(year: number, month: number, day: number): number {
  let y = year
  let m = month
  if (m > 2) {
    m += 1
    y += 4800
  } else {
    m += 13
    y += 4799
  }
  const century = Math.floor(y / 100)
  let julian = y * 365 - 32167
  julian += Math.floor(y / 4) - century + Math.floor(century / 4)
  julian += Math.floor((7834 * m) / 256) + day
  return julian
}

export function j2date(jd: number): [number, number, number] {
  let julian = jd + 32044
  let quad = Math.floor(julian / 146097)
  const extra = (julian - quad * 146097) * 4 + 3
  julian += 60 + quad * 3 + Math.floor(extra / 146097)
  quad = Math.floor(julian / 1461)
  julian -= quad * 1461
  let y = Math.floor((julian * 4) / 1461)
  julian = (y !== 0 ? (julian + 305) % 365 : (julian + 306) % 366) + 123
  y += quad * 4
  const year = y - 4800
  quad = Math.floor((julian * 2141) / 65536)
  const day = julian - Math.floor((7834 * quad) / 256)
  const month = ((quad + 10) % 12) + 1
  return [year, month, day]
}

const DAYS_IN_MONTH = [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]

function isLeap(year: number): boolean {
  return year % 4 === 0 && (year % 100 !== 0 || year % 400 === 0)
}

function daysInMonth(year: number, month: number): number {
  return month === 2 && isLeap(year) ? 29 : (DAYS_IN_MONTH[month - 1] ?? 31)
}

interface Fields {
  year: number
  month: number
  day: number
  /** Microseconds since midnight. */
  time: number
  /** Seconds east of UTC, when the input named a zone. */
  offset: number | undefined
  hasDate: boolean
  hasTime: boolean
}

type Special = 'infinity' | '-infinity' | 'epoch' | 'allballs'

const SPACE = '[ \\t\\n\\v\\f\\r]'
const DATE_PART = '([0-9]{3,})-([0-9]{1,2})-([0-9]{1,2})'
const TIME_PART = '([0-9]{1,2}):([0-9]{2})(?::([0-9]{2})(\\.[0-9]*)?)?'
const ZONE_PART = '(z|utc|gmt|[+-][0-9]{1,2}(?::?[0-9]{2}(?::?[0-9]{2})?)?)'
const DATE_TIME = new RegExp(
  `^${SPACE}*${DATE_PART}(?:(?:${SPACE}+|t)${TIME_PART})?${SPACE}*${ZONE_PART}?${SPACE}*(bc|ad)?${SPACE}*$`,
  'i',
)
const TIME_ONLY = new RegExp(`^${SPACE}*()()()${TIME_PART}${SPACE}*${ZONE_PART}?${SPACE}*()$`, 'i')
const OFFSET = /^([+-])([0-9]{1,2}?)(?::?([0-9]{2})(?::?([0-9]{2}))?)?$/

function parseFields(kind: DateTimeKind, text: string): Fields | Special {
  const word = text.trim().toLowerCase()
  switch (word) {
    case 'infinity':
    case '+infinity':
      return 'infinity'
    case '-infinity':
      return '-infinity'
    case 'epoch':
      return 'epoch'
    case 'allballs':
      return 'allballs'
    case 'now':
    case 'today':
    case 'tomorrow':
    case 'yesterday':
      throw new UnsupportedDateTimeError(`'${word}' depends on the current time, which a where clause may not`)
  }
  const m = DATE_TIME.exec(text) ?? TIME_ONLY.exec(text)
  if (m === null) {
    throw new UnsupportedDateTimeError(
      `unsupported ${WORD[kind]} literal "${text}": use ISO 8601, e.g. 2024-01-31 13:45:00.123456+00`,
    )
  }
  const hasDate = m[1] !== undefined && m[1] !== ''
  const hasTime = m[4] !== undefined
  const fields: Fields = { year: 2000, month: 1, day: 1, time: 0, offset: undefined, hasDate, hasTime }
  if (hasDate) {
    let year = Number(m[1])
    const month = Number(m[2])
    const day = Number(m[3])
    const era = m[9]?.toLowerCase()
    if (year === 0) throw fieldOverflow(text)
    if (era === 'bc') year = -(year - 1)
    if (month < 1 || month > 12 || day < 1 || day > daysInMonth(year, month)) throw fieldOverflow(text)
    fields.year = year
    fields.month = month
    fields.day = day
  }
  if (hasTime) {
    const hour = Number(m[4])
    const minute = Number(m[5])
    const second = m[6] === undefined ? 0 : Number(m[6])
    // Postgres reads the fraction with strtod and rounds half to even to microseconds.
    const fraction = m[7] === undefined || m[7] === '.' ? 0 : roundHalfEven(Number(`0${m[7]}`) * 1e6)
    if (minute > 59 || second > 60 || hour > 24 || (hour === 24 && (minute > 0 || second > 0 || fraction > 0))) {
      throw fieldOverflow(text)
    }
    fields.time = ((hour * 60 + minute) * 60 + second) * 1e6 + fraction
  }
  if (m[8] !== undefined) fields.offset = parseOffset(m[8], text)
  return fields
}

function roundHalfEven(x: number): number {
  const r = Math.round(x)
  return Math.abs(x - Math.trunc(x)) === 0.5 && r % 2 !== 0 ? r - 1 : r
}

/** Seconds east of UTC for Z / UTC / GMT / ±hh[[:]mm[[:]ss]]. */
function parseOffset(zone: string, text: string): number {
  const lower = zone.toLowerCase()
  if (lower === 'z' || lower === 'utc' || lower === 'gmt') return 0
  const m = OFFSET.exec(zone)
  if (m === null) throw invalidDatetime('timestamp with time zone', text)
  const hours = Number(m[2])
  const minutes = Number(m[3] ?? '0')
  const seconds = Number(m[4] ?? '0')
  if (hours > 15 || minutes > 59 || seconds > 59) {
    throw new EvaluationError('datetime_field_overflow', `time zone displacement out of range: "${text}"`)
  }
  return (m[1] === '-' ? -1 : 1) * ((hours * 60 + minutes) * 60 + seconds)
}

/** Postgres's error for date and time input that does not parse: its own SQLSTATE (22007), the same text as other types' syntax errors. */
function invalidDatetime(typeDisplayName: string, text: string): EvaluationError {
  return new EvaluationError('invalid_datetime_format', `invalid input syntax for type ${typeDisplayName}: "${text}"`)
}

function fieldOverflow(text: string): EvaluationError {
  return new EvaluationError('datetime_field_overflow', `date/time field value out of range: "${text}"`)
}

function outOfRange(kind: DateTimeKind, text: string): EvaluationError {
  return new EvaluationError('datetime_field_overflow', `${RANGE_WORD[kind]} out of range: "${text}"`)
}

/** julian day within Postgres's accepted range for y/m (IS_VALID_JULIAN). */
function validJulian(year: number, month: number): boolean {
  return (year > -4713 || (year === -4713 && month >= 11)) && (year < 5874898 || (year === 5874898 && month < 6))
}

/** `date_in`. */
export function parseDate(text: string): number {
  const fast = ISO_DATE.exec(text)
  if (fast !== null) return daysFromFields(Number(fast[1]), Number(fast[2]), Number(fast[3]), text)
  const f = parseFields('date', text)
  if (f === 'infinity') return Infinity
  if (f === '-infinity') return -Infinity
  if (f === 'epoch') return date2j(1970, 1, 1) - EPOCH_JDATE
  if (f === 'allballs' || !f.hasDate) throw invalidDatetime('date', text)
  if (!validJulian(f.year, f.month)) throw outOfRange('date', text)
  const days = date2j(f.year, f.month, f.day) - EPOCH_JDATE
  if (!validDate(days)) throw outOfRange('date', text)
  return days
}

const ISO_DATE = /^([0-9]{4})-([0-9]{2})-([0-9]{2})$/
const ISO_TIMESTAMP = /^([0-9]{4})-([0-9]{2})-([0-9]{2}) ([0-9]{2}):([0-9]{2}):([0-9]{2})(?:\.([0-9]{1,6}))?(\+00)?$/

function daysFromFields(year: number, month: number, day: number, text: string): number {
  if (year === 0 || month < 1 || month > 12 || day < 1 || day > daysInMonth(year, month)) throw fieldOverflow(text)
  return date2j(year, month, day) - EPOCH_JDATE
}

function validDate(days: number): boolean {
  return days >= -EPOCH_JDATE && days < DATE_END_JULIAN - EPOCH_JDATE
}

/** `timestamp_in` / `timestamptz_in` (session time zone UTC). */
export function parseTimestamp(kind: 'timestamp' | 'timestamptz', text: string): bigint {
  // Fast path for what Postgres prints (ISO, UTC, AD, four-digit year).
  const iso = ISO_TIMESTAMP.exec(text)
  if (iso !== null && (kind === 'timestamptz' || iso[8] === undefined)) {
    const days = daysFromFields(Number(iso[1]), Number(iso[2]), Number(iso[3]), text)
    const hour = Number(iso[4])
    const minute = Number(iso[5])
    const second = Number(iso[6])
    if (hour < 24 && minute < 60 && second < 60) {
      const fraction = iso[7] === undefined ? 0 : Number(iso[7].padEnd(6, '0'))
      return BigInt(days) * USECS_PER_DAY + BigInt(((hour * 60 + minute) * 60 + second) * 1e6 + fraction)
    }
  }
  const f = parseFields(kind, text)
  if (f === 'infinity') return TIMESTAMP_NOEND
  if (f === '-infinity') return TIMESTAMP_NOBEGIN
  if (f === 'epoch') return BigInt(date2j(1970, 1, 1) - EPOCH_JDATE) * USECS_PER_DAY
  if (f === 'allballs' || !f.hasDate) throw invalidDatetime(WORD[kind], text)
  if (!validJulian(f.year, f.month)) throw outOfRange(kind, text)
  const days = date2j(f.year, f.month, f.day) - EPOCH_JDATE
  let micros = BigInt(days) * USECS_PER_DAY + BigInt(f.time)
  // A timestamp without time zone ignores any zone in its input, as Postgres does.
  if (kind === 'timestamptz' && f.offset !== undefined) micros -= BigInt(f.offset) * 1_000_000n
  if (!validTimestamp(micros)) throw outOfRange(kind, text)
  return micros
}

export function validTimestamp(micros: bigint): boolean {
  return micros >= MIN_TIMESTAMP && micros < END_TIMESTAMP
}

export function isFiniteTimestamp(micros: bigint): boolean {
  return micros !== TIMESTAMP_NOBEGIN && micros !== TIMESTAMP_NOEND
}

/** `time_in`: a time of day; a date or zone in the input is ignored, as Postgres ignores it. */
export function parseTime(text: string): number {
  const f = parseFields('time', text)
  if (f === 'allballs') return 0
  if (typeof f === 'string' || !f.hasTime) throw invalidDatetime('time without time zone', text)
  return f.time
}

function pad(n: number, width: number): string {
  return String(n).padStart(width, '0')
}

function formatYmd(days: number): [string, boolean] {
  const [year, month, day] = j2date(days + EPOCH_JDATE)
  const bc = year <= 0
  return [`${pad(bc ? 1 - year : year, 4)}-${pad(month, 2)}-${pad(day, 2)}`, bc]
}

/** `date_out` with DateStyle ISO. */
export function formatDate(days: number): string {
  if (days === Infinity) return 'infinity'
  if (days === -Infinity) return '-infinity'
  const [ymd, bc] = formatYmd(days)
  return bc ? `${ymd} BC` : ymd
}

/** HH:MM:SS with the fraction's trailing zeros dropped. */
export function formatTimeOfDay(micros: number): string {
  const totalSeconds = Math.floor(micros / 1e6)
  const fraction = micros - totalSeconds * 1e6
  const hours = Math.floor(totalSeconds / 3600)
  const minutes = Math.floor((totalSeconds % 3600) / 60)
  const seconds = totalSeconds % 60
  let out = `${pad(hours, 2)}:${pad(minutes, 2)}:${pad(seconds, 2)}`
  if (fraction > 0) out += `.${pad(fraction, 6).replace(/0+$/, '')}`
  return out
}

/** `timestamp_out` / `timestamptz_out` with DateStyle ISO and TimeZone UTC. */
export function formatTimestamp(kind: 'timestamp' | 'timestamptz', micros: bigint): string {
  if (micros === TIMESTAMP_NOEND) return 'infinity'
  if (micros === TIMESTAMP_NOBEGIN) return '-infinity'
  const [days, time] = splitTimestamp(micros)
  const [ymd, bc] = formatYmd(days)
  let out = `${ymd} ${formatTimeOfDay(time)}`
  if (kind === 'timestamptz') out += '+00'
  return bc ? `${out} BC` : out
}

/** Days since the epoch and microseconds into that day (floor division, as timestamp2tm). */
export function splitTimestamp(micros: bigint): [number, number] {
  let days = micros / USECS_PER_DAY
  let time = micros % USECS_PER_DAY
  if (time < 0n) {
    time += USECS_PER_DAY
    days -= 1n
  }
  return [Number(days), Number(time)]
}

/** `formatTime` (`time_out`). */
export function formatTime(micros: number): string {
  return formatTimeOfDay(micros)
}

/** date → timestamp(tz) (`date2timestamp`); errors past the timestamp range as Postgres does. */
export function dateToTimestamp(days: number): bigint {
  if (days === Infinity) return TIMESTAMP_NOEND
  if (days === -Infinity) return TIMESTAMP_NOBEGIN
  if (days >= TIMESTAMP_END_JULIAN - EPOCH_JDATE) {
    throw new EvaluationError('datetime_field_overflow', 'date out of range for timestamp')
  }
  return BigInt(days) * USECS_PER_DAY
}

/** `date_cmp_timestamp`: a date past the timestamp range sorts after every finite timestamp. */
export function compareDateTimestamp(days: number, micros: bigint): number {
  if (days !== Infinity && days >= TIMESTAMP_END_JULIAN - EPOCH_JDATE) return micros === TIMESTAMP_NOEND ? -1 : 1
  const left = dateToTimestamp(days)
  return left < micros ? -1 : left > micros ? 1 : 0
}

/** timestamp → date (`timestamp_date`). */
export function timestampToDate(micros: bigint): number {
  if (micros === TIMESTAMP_NOEND) return Infinity
  if (micros === TIMESTAMP_NOBEGIN) return -Infinity
  return splitTimestamp(micros)[0]
}

/** timestamp → time: the time of day; Postgres gives NULL for infinities. */
export function timestampToTime(micros: bigint): number | null {
  if (!isFiniteTimestamp(micros)) return null
  return splitTimestamp(micros)[1]
}

const SCALES = [1_000_000, 100_000, 10_000, 1_000, 100, 10, 1]

/** `AdjustTimestampForTypmod`: round to `precision` fraction digits, half away from zero. */
export function roundTimestamp(micros: bigint, precision: number): bigint {
  if (!isFiniteTimestamp(micros) || precision >= 6) return micros
  const scale = BigInt(SCALES[precision] ?? 1)
  const offset = scale / 2n
  const rounded = micros >= 0n ? ((micros + offset) / scale) * scale : -(((-micros + offset) / scale) * scale)
  if (!validTimestamp(rounded)) throw new EvaluationError('datetime_field_overflow', 'timestamp out of range')
  return rounded
}

/** `AdjustTimeForTypmod`. */
export function roundTime(micros: number, precision: number): number {
  if (precision >= 6) return micros
  const scale = SCALES[precision] ?? 1
  return Math.floor((micros + scale / 2) / scale) * scale
}

export function compareDates(a: number, b: number): number {
  return a < b ? -1 : a > b ? 1 : 0
}

