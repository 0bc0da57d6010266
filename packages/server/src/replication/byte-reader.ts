import { PgoutputDecodeError } from './replication-errors.js'

const NUL = 0
const TWO_32 = 2 ** 32
/** A 64-bit value whose high half is below this (in magnitude) fits a Number exactly. */
const SAFE_HIGH = 2 ** 21

/**
 * The last 64-bit value each of u64 and i64 read, with its BigInt: BigInts
 * are immutable, so a repeat (a transaction's Begin and Commit name the same
 * commit LSN and time) is handed the same one. With one-row transactions the
 * five BigInts a transaction's messages made were ~3% of the pipeline's main
 * thread at 100k shapes; this makes three.
 */
interface Last64 {
  hi: number
  lo: number
  value: bigint
}
const lastU64: Last64 = { hi: -1, lo: -1, value: 0n }
const lastI64: Last64 = { hi: -1, lo: -1, value: 0n }

/**
 * A bounds-checked big-endian cursor over one pgoutput message. Every read
 * checks the remaining length first, so a short buffer raises a typed
 * `pgoutput_truncated` error rather than a RangeError (or, for strings, a
 * silently short value).
 */
export class ByteReader {
  private pos: number
  /** Where the message ends: the buffer may hold more after it (a socket chunk holds many messages). */
  private limit: number

  /** Reads `buf` from `start` to its end (a message inside a larger buffer needs no view of its own). */
  constructor(
    private buf: Buffer,
    /** The message type character, for error messages. */
    private messageType: string,
    private start = 0,
  ) {
    this.pos = start
    this.limit = buf.length
  }

  /** Reads another message, `buf` from `start` to `end`, with the same reader (the decoder reuses one rather than make one per message). */
  reset(buf: Buffer, messageType: string, start: number, end = buf.length): this {
    this.buf = buf
    this.messageType = messageType
    this.start = start
    this.pos = start
    this.limit = end
    return this
  }

  /** Bytes read so far, from `start`. */
  get offset(): number {
    return this.pos - this.start
  }

  get remaining(): number {
    return this.limit - this.pos
  }

  u8(field: string): number {
    this.need(1, field)
    return this.buf[this.pos++] as number
  }

  i16(field: string): number {
    this.need(2, field)
    const value = this.buf.readInt16BE(this.pos)
    this.pos += 2
    return value
  }

  i32(field: string): number {
    this.need(4, field)
    const value = this.buf.readInt32BE(this.pos)
    this.pos += 4
    return value
  }

  /** xids and OIDs are unsigned 32-bit. */
  u32(field: string): number {
    this.need(4, field)
    const value = this.buf.readUInt32BE(this.pos)
    this.pos += 4
    return value
  }

  /**
   * LSNs. Built from one Number while the value stays below 2^53 (every LSN
   * and timestamp in practice): Buffer's readBigUInt64BE makes four BigInts
   * for each (both halves, the shift, the sum), a few per transaction.
   */
  u64(field: string): bigint {
    this.need(8, field)
    const hi = this.buf.readUInt32BE(this.pos)
    const lo = this.buf.readUInt32BE(this.pos + 4)
    this.pos += 8
    // A transaction's Begin and Commit carry the same commit LSN: the second read gets the first's BigInt.
    if (hi === lastU64.hi && lo === lastU64.lo) return lastU64.value
    const value = hi < SAFE_HIGH ? BigInt(hi * TWO_32 + lo) : (BigInt(hi) << 32n) | BigInt(lo)
    lastU64.hi = hi
    lastU64.lo = lo
    lastU64.value = value
    return value
  }

  /** Timestamps (microseconds since 2000-01-01, may be negative). */
  i64(field: string): bigint {
    this.need(8, field)
    const hi = this.buf.readInt32BE(this.pos)
    const lo = this.buf.readUInt32BE(this.pos + 4)
    this.pos += 8
    // Begin and Commit carry the same commit timestamp (see u64).
    if (hi === lastI64.hi && lo === lastI64.lo) return lastI64.value
    const value = hi < SAFE_HIGH && hi >= -SAFE_HIGH ? BigInt(hi * TWO_32 + lo) : (BigInt(hi) << 32n) + BigInt(lo)
    lastI64.hi = hi
    lastI64.lo = lo
    lastI64.value = value
    return value
  }

  /** A NUL-terminated UTF-8 string. */
  cstring(field: string): string {
    const end = this.buf.indexOf(NUL, this.pos)
    if (end < 0 || end >= this.limit) throw this.truncated(`${field} has no terminating NUL`)
    const value = this.buf.toString('utf8', this.pos, end)
    this.pos = end + 1
    return value
  }

  /**
   * Moves past a tuple's value of `length` bytes and returns where it starts,
   * for a caller that decodes a run of values at once (`text`). The column's
   * number names it only in an error: a field name built for every value of
   * every row was once the decoder's largest allocation.
   */
  skipValue(length: number, column: number): number {
    if (length < 0 || this.limit - this.pos < length) this.need(length, `value of column ${column}`)
    const at = this.pos
    this.pos += length
    return at
  }

  /** The bytes from `from` to `to` (positions in the buffer, already read past) decoded as UTF-8. */
  text(from: number, to: number): string {
    return this.buf.toString('utf8', from, to)
  }

  /** `length` bytes, copied (the caller's buffer may be reused after decoding). */
  bytes(length: number, field: string): Buffer {
    this.need(length, field)
    const value = Buffer.from(this.buf.subarray(this.pos, this.pos + length))
    this.pos += length
    return value
  }

  skip(length: number, field: string): void {
    this.need(length, field)
    this.pos += length
  }

  /** Fails unless the whole message was consumed: trailing bytes mean we misread it. */
  end(): void {
    if (this.pos !== this.limit) {
      throw new PgoutputDecodeError('pgoutput_malformed', this.messageType, `${this.limit - this.pos} unexpected trailing byte(s) at offset ${this.offset}`)
    }
  }

  malformed(detail: string): PgoutputDecodeError {
    return new PgoutputDecodeError('pgoutput_malformed', this.messageType, `${detail} at offset ${this.offset}`)
  }

  private need(length: number, field: string): void {
    if (length < 0) throw this.malformed(`negative length ${length} for ${field}`)
    if (this.limit - this.pos < length) {
      throw this.truncated(`${field} needs ${length} byte(s) at offset ${this.offset}, ${this.limit - this.pos} left`)
    }
  }

  private truncated(detail: string): PgoutputDecodeError {
    return new PgoutputDecodeError('pgoutput_truncated', this.messageType, detail)
  }
}
