/**
 * Splits the bytes of a Postgres connection into protocol messages, keeps
 * CopyData ('d') for itself and hands every other message on as bytes.
 *
 * Why: during replication nearly every message is CopyData, and pg-protocol's
 * parser made, for each, a message object and a Buffer view of its payload,
 * then pg emitted it as an event: with one-row transactions (Begin, Insert,
 * Commit) that was three of each per change, about 15% of what the pipeline
 * allocated and a few percent of its main thread. Here a CopyData payload is
 * reported as a range of the bytes it arrived in, valid only during the call.
 *
 * Everything else (ErrorResponse, CopyDone, CommandComplete, notices...) goes
 * to `other` as whole messages, in stream order, so pg's own parser sees a
 * stream of complete messages and answers its queries as before.
 *
 * A message split across socket chunks waits in a buffer of our own, grown by
 * doubling, so a huge message (a TOAST-sized row) is copied a bounded number
 * of times rather than once per chunk.
 */

const COPY_DATA = 0x64 // 'd'
/** Type byte and length (the length counts itself, not the type byte). */
const HEADER_BYTES = 5
const FIRST_BUFFER_BYTES = 64 * 1024

export interface CopyDataSink {
  /** A CopyData payload: `buf` from `start` to `end`, valid only during the call. */
  copyData(buf: Buffer, start: number, end: number): void
  /** One or more whole messages that are not CopyData, in order; the bytes are valid only during the call. */
  other(bytes: Buffer): void
}

export class CopyDataFramer {
  /** Bytes of a message not yet whole (always from 0). */
  private pending: Buffer | undefined
  private pendingLength = 0
  /** Bytes that were not a message came: from then on everything goes to `other` as it is, for pg to report. */
  private broken = false

  constructor(private readonly sink: CopyDataSink) {}

  push(chunk: Buffer): void {
    if (this.broken) {
      this.sink.other(chunk)
      return
    }
    if (this.pendingLength === 0) {
      const used = this.frame(chunk, chunk.length)
      if (used < chunk.length) this.keep(chunk, used, chunk.length)
      return
    }
    this.append(chunk)
    const pending = this.pending!
    const used = this.frame(pending, this.pendingLength)
    // What is left is less than one message: moved to the front.
    if (used > 0) pending.copyWithin(0, used, this.pendingLength)
    this.pendingLength -= used
    this.shrinkIfIdle()
  }

  /** Bytes held of a message not yet whole (for tests and diagnostics). */
  get buffered(): number {
    return this.pendingLength
  }

  /** Reports the whole messages in `buf` up to `length`; returns where the first incomplete one starts. */
  private frame(buf: Buffer, length: number): number {
    let at = 0
    let othersFrom = -1
    while (length - at >= HEADER_BYTES) {
      const size = buf.readUInt32BE(at + 1)
      if (size < 4) {
        // A length below its own four bytes is not a message: this and all after it go to pg's parser untouched, for it to report.
        this.broken = true
        if (othersFrom < 0) othersFrom = at
        at = length
        break
      }
      const end = at + 1 + size
      if (end > length) break
      if (buf[at] === COPY_DATA) {
        if (othersFrom >= 0) {
          this.sink.other(buf.subarray(othersFrom, at))
          othersFrom = -1
        }
        this.sink.copyData(buf, at + HEADER_BYTES, end)
      } else if (othersFrom < 0) {
        othersFrom = at
      }
      at = end
    }
    if (othersFrom >= 0) this.sink.other(buf.subarray(othersFrom, at))
    return at
  }

  private keep(chunk: Buffer, from: number, to: number): void {
    const length = to - from
    let pending = this.pending
    if (pending === undefined || pending.length < length) {
      pending = Buffer.allocUnsafe(Math.max(FIRST_BUFFER_BYTES, this.wantedFor(chunk, from, to)))
      this.pending = pending
    }
    chunk.copy(pending, 0, from, to)
    this.pendingLength = length
  }

  private append(chunk: Buffer): void {
    const need = this.pendingLength + chunk.length
    let pending = this.pending!
    if (need > pending.length) {
      let size = pending.length * 2
      while (size < need) size *= 2
      const grown = Buffer.allocUnsafe(size)
      pending.copy(grown, 0, 0, this.pendingLength)
      pending = grown
      this.pending = grown
    }
    chunk.copy(pending, this.pendingLength)
    this.pendingLength = need
  }

  /** Room for the incomplete message at `from`: its whole length when the header says it, else what is there. */
  private wantedFor(chunk: Buffer, from: number, to: number): number {
    if (to - from < HEADER_BYTES) return to - from
    return Math.max(to - from, 1 + chunk.readUInt32BE(from + 1))
  }

  /** A buffer grown for one huge message is not kept once it is done. */
  private shrinkIfIdle(): void {
    if (this.pendingLength === 0 && this.pending !== undefined && this.pending.length > FIRST_BUFFER_BYTES * 16) this.pending = undefined
  }
}
