import { SluiceError } from './errors.js'

/**
 * Log offsets (docs/protocol.md §4.1).
 *
 * An offset is the pair `(tx, op)` compared lexicographically as unsigned 64-bit
 * integers, with two points outside that space:
 *
 *   -1          tx = -1            before everything
 *   0_<n>       tx = 0,  op = n    end of initial-snapshot chunk n (virtual)
 *   0_inf       tx = 0,  op = INF  "last virtual offset": sorts after every snapshot chunk
 *   <lsn>_<op>  tx = lsn, op       a real entry: commit LSN of its transaction, op index inside it
 *
 * `inf` is represented as `OP_INF`, one above the largest u64, so plain BigInt
 * comparison orders it after every real op. `now` is not an offset but a request
 * value; `parseRequestOffset` returns it as the string `'now'`.
 *
 * Accepted text (what Electric's `LogOffset.from_string` accepts, made total):
 *
 *   -1                     exactly; `-0`, `-1_0`, `-1_5` are rejected
 *   <digits>_<digits|inf>  ASCII digits only; exactly one `_`; `inf` lower case
 *
 * - Leading zeros are accepted (`0_02` is `0_2`, as Electric documents) and
 *   formatting drops them, so a non-canonical request offset still resolves.
 * - Signs, whitespace, exponents, decimals and non-ASCII digits are rejected.
 *   Electric's integer parser would take `+5_0`; no client produces one, and a
 *   literal `+` in a query string decodes to a space anyway.
 * - Each part must fit in a u64. Electric does not bound them; a larger value
 *   cannot name a real LSN, so it is a client error here rather than a 500 later.
 * - Negative parts other than the literal `-1` are rejected. Electric's parser
 *   crashes on `-1_5` (a 500); here it is "has invalid format".
 * - `now` is only valid as a request offset (`parseRequestOffset`).
 */

/** The largest value a u64 field can hold. */
export const U64_MAX = (1n << 64n) - 1n

/** The op of `<tx>_inf`: above every op a log can store. */
export const OP_INF = U64_MAX + 1n

export interface LogOffset {
  readonly tx: bigint
  readonly op: bigint
}

/** `-1`: before the first entry of every log. */
export const BEFORE_ALL: LogOffset = Object.freeze({ tx: -1n, op: 0n })

/** `0_inf`: after every snapshot chunk, before every real entry. */
export const LAST_VIRTUAL: LogOffset = Object.freeze({ tx: 0n, op: OP_INF })

export type RequestOffset = LogOffset | 'now'

/** The Ecto message Electric gives for a malformed `offset` parameter. */
export const INVALID_OFFSET_MESSAGE = 'has invalid format'

export class InvalidOffsetError extends SluiceError<'invalid_offset'> {
  override readonly name = 'InvalidOffsetError'
  readonly input: string

  constructor(input: string) {
    super('invalid_offset', {
      message: `Invalid offset ${JSON.stringify(input)}: expected -1, now, or <int>_<int|inf>`,
      errors: { offset: [INVALID_OFFSET_MESSAGE] },
    })
    this.input = input
  }
}

const DIGITS = /^[0-9]+$/
// Beyond 20 significant digits a value cannot fit in a u64; checking the length
// first keeps BigInt() away from absurdly long inputs.
const U64_DIGITS = 20

function parseU64(text: string, input: string): bigint {
  if (!DIGITS.test(text)) throw new InvalidOffsetError(input)
  let start = 0
  while (start < text.length - 1 && text.charCodeAt(start) === 0x30) start++
  if (text.length - start > U64_DIGITS) throw new InvalidOffsetError(input)
  const value = BigInt(text.slice(start))
  if (value > U64_MAX) throw new InvalidOffsetError(input)
  return value
}

/** Builds an offset from its parts; throws `RangeError` for a pair no log can hold. */
export function makeOffset(tx: bigint, op: bigint): LogOffset {
  const valid = tx === -1n ? op === 0n : tx >= 0n && tx <= U64_MAX && op >= 0n && op <= OP_INF
  if (!valid) throw new RangeError(`offset out of range: ${tx}_${op}`)
  return { tx, op }
}

/** Parses a stored or response offset (`-1`, `0_0`, `0_inf`, `<lsn>_<op>`); `now` is rejected. */
export function parseOffset(input: string): LogOffset {
  if (input === '-1') return BEFORE_ALL
  const sep = input.indexOf('_')
  if (sep < 0 || sep !== input.lastIndexOf('_')) throw new InvalidOffsetError(input)
  const tx = parseU64(input.slice(0, sep), input)
  const opText = input.slice(sep + 1)
  const op = opText === 'inf' ? OP_INF : parseU64(opText, input)
  return { tx, op }
}

/** Parses the `offset` query parameter: any offset, or `now`. */
export function parseRequestOffset(input: string): RequestOffset {
  return input === 'now' ? 'now' : parseOffset(input)
}

export function formatOffset(offset: LogOffset): string {
  if (offset.tx < 0n) return '-1'
  return `${offset.tx}_${offset.op === OP_INF ? 'inf' : offset.op}`
}

/** Formats a request offset, `now` included (as the etag of an `offset=now` response needs). */
export function formatRequestOffset(offset: RequestOffset): string {
  return offset === 'now' ? 'now' : formatOffset(offset)
}

export function compareOffsets(a: LogOffset, b: LogOffset): -1 | 0 | 1 {
  if (a.tx !== b.tx) return a.tx < b.tx ? -1 : 1
  if (a.op !== b.op) return a.op < b.op ? -1 : 1
  return 0
}

export function offsetsEqual(a: LogOffset, b: LogOffset): boolean {
  return a.tx === b.tx && a.op === b.op
}

export function isBeforeAll(offset: LogOffset): boolean {
  return offset.tx < 0n
}

/** True for `0_n` and `0_inf`: offsets inside (or just past) the initial snapshot. */
export function isVirtual(offset: LogOffset): boolean {
  return offset.tx === 0n
}
