import { SluiceError } from './errors.js'
import { U64_MAX } from './offset.js'

/**
 * Postgres log sequence numbers.
 *
 * An LSN is a u64 with two text forms:
 *
 *   XXX/YYY   Postgres' own (`pg_lsn`): high and low 32 bits in hex, 1 to 8 digits
 *             each. Postgres up to 17 prints `%X/%X`; 18 pads the low half to 8
 *             digits. Both parse; `formatLsn` prints the unpadded form, which every
 *             version reads back.
 *   decimal   what the Shape API sends (offsets, `lsn` headers, `global_last_seen_lsn`).
 *
 * Compare LSNs as BigInt, never as text: neither form sorts correctly as a string.
 */

export class InvalidLsnError extends SluiceError<'invalid_lsn'> {
  override readonly name = 'InvalidLsnError'
  readonly input: string

  constructor(input: string, expected: string) {
    super('invalid_lsn', { message: `Invalid LSN ${JSON.stringify(input)}: expected ${expected}` })
    this.input = input
  }
}

// Same rule as pg_lsn's input function: 1-8 hex digits, a slash, 1-8 hex digits, nothing else.
const PG_LSN = /^([0-9A-Fa-f]{1,8})\/([0-9A-Fa-f]{1,8})$/
const DECIMAL = /^[0-9]{1,20}$/

/** Parses `XXX/YYY` to a u64. */
export function parseLsn(text: string): bigint {
  const match = PG_LSN.exec(text)
  if (match === null) throw new InvalidLsnError(text, 'XXX/YYY with 1-8 hex digits on each side')
  const [, high = '', low = ''] = match
  return (BigInt(`0x${high}`) << 32n) | BigInt(`0x${low}`)
}

/** Formats a u64 as Postgres does (`16/B374D848`, upper case, no padding). */
export function formatLsn(lsn: bigint): string {
  assertU64(lsn)
  const high = lsn >> 32n
  const low = lsn & 0xffff_ffffn
  return `${high.toString(16).toUpperCase()}/${low.toString(16).toUpperCase()}`
}

/** Parses the decimal form used on the wire. Leading zeros are accepted; signs are not. */
export function parseDecimalLsn(text: string): bigint {
  const trimmed = text.replace(/^0+(?=[0-9])/, '')
  if (!DECIMAL.test(trimmed)) throw new InvalidLsnError(text, 'a decimal integer')
  const value = BigInt(trimmed)
  if (value > U64_MAX) throw new InvalidLsnError(text, 'a value below 2^64')
  return value
}

export function formatDecimalLsn(lsn: bigint): string {
  assertU64(lsn)
  return lsn.toString()
}

function assertU64(lsn: bigint): void {
  if (lsn < 0n || lsn > U64_MAX) throw new RangeError(`LSN out of range: ${lsn}`)
}
