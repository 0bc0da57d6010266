import { Readable } from 'node:stream'
import type { LogRead, Span } from '@sluice/storage'
import { nodeFs, readSpansInto, readSpansIntoAsync } from '@sluice/storage'

/**
 * Response bodies straight from stored bytes (docs/architecture.md §3).
 *
 * The store keeps each entry as `json,`, so a range's body is
 *
 *   `[` + stored bytes + up-to-date line + `]`   when the range ends at the head
 *   `[` + stored bytes minus the last `,` + `]`  otherwise
 *   `[]` / `[up-to-date]`                         for an empty range
 *
 * No JSON is parsed. The bytes are pread into one buffer per response; buffers
 * up to POOLED_BUFFER_BYTES come from a free list and return to it when the
 * response is done with them. This is the pread path; large ranges go out by
 * sendfile instead when the addon is loaded (`sendfile-body.ts`, chosen in
 * shape-routes.ts), with the same layout and so the same bytes.
 */

/** Responses up to this size reuse buffers (snapshot chunks in tests, most live batches). */
export const POOLED_BUFFER_BYTES = 64 * 1024
/** Free buffers kept; beyond that returned buffers are left to the GC. */
const POOL_CAPACITY = 256
/** Ranges above this are read on the thread pool so one large pread does not stall the event loop. */
const ASYNC_READ_BYTES = 256 * 1024

const OPEN = 0x5b
const CLOSE = 0x5d

const pool: Buffer[] = []

function take(size: number): { buffer: Buffer; pooled: boolean } {
  if (size > POOLED_BUFFER_BYTES) return { buffer: Buffer.allocUnsafe(size), pooled: false }
  return { buffer: pool.pop() ?? Buffer.allocUnsafe(POOLED_BUFFER_BYTES), pooled: true }
}

export interface LogBody {
  /** The body (a view into a possibly pooled buffer). */
  readonly bytes: Buffer
  /** Returns the buffer to the pool; call once the response no longer needs `bytes`. */
  readonly done: () => void
}

/**
 * Builds the body for `read`, followed by `tail` (the up-to-date line) when
 * given. Releases `read` in every case.
 */
export async function logBody(read: LogRead, tail: string | undefined): Promise<LogBody> {
  try {
    const tailBytes = tail === undefined ? 0 : Buffer.byteLength(tail)
    const size = read.byteLength + 2 + tailBytes
    const { buffer, pooled } = take(size)
    buffer[0] = OPEN
    const target = buffer.subarray(1, 1 + read.byteLength)
    if (read.byteLength > ASYNC_READ_BYTES) await readSpansIntoAsync(read, target)
    else readSpansInto(read, target)
    let end = 1 + read.byteLength
    if (tail !== undefined) end += buffer.write(tail, end, 'utf8')
    else if (read.byteLength > 0) end -= 1 // the last entry's separator
    buffer[end] = CLOSE
    const bytes = buffer.subarray(0, end + 1)
    let released = false
    return {
      bytes,
      done: () => {
        if (released || !pooled) return
        released = true
        if (pool.length < POOL_CAPACITY) pool.push(buffer)
      },
    }
  } finally {
    read.release()
  }
}

/**
 * Pieces a streamed body is read in: below glibc malloc's default mmap
 * threshold (128 KiB), so each one comes from malloc's free lists and goes
 * back to them.
 */
export const STREAM_PIECE_BYTES = 64 * 1024

export interface StreamedLogBody {
  /** Bytes the stream yields (the body's content-length). */
  readonly length: number
  readonly stream: Readable
}

const OPEN_BYTES = Buffer.from('[')
const CLOSE_BYTES = Buffer.from(']')

/**
 * The same body as `logBody`, as a stream of pieces of at most
 * STREAM_PIECE_BYTES, for ranges bigger than a pooled buffer. Why: one
 * buffer the size of the range (up to a chunk, 10 MiB by default) per
 * response made a client catching up on a huge transaction cost a fresh 10
 * MiB for every response; V8 frees them only at its next full collection, and
 * once malloc has handed one back it serves the next ones from its heap,
 * which then stays as large as they were at their worst. Releases `read`
 * when the stream ends or is destroyed.
 */
export function streamedLogBody(read: LogRead, tail: string | undefined): StreamedLogBody {
  const parts: Span[] = [{ kind: 'bytes', bytes: OPEN_BYTES }, ...read.spans]
  if (tail !== undefined) parts.push({ kind: 'bytes', bytes: Buffer.from(tail, 'utf8') })
  else if (read.byteLength > 0) dropLastByte(parts)
  parts.push({ kind: 'bytes', bytes: CLOSE_BYTES })
  let length = 0
  for (const part of parts) length += spanLength(part)
  let part = 0
  let within = 0
  let left = length
  let released = false
  const release = (): void => {
    if (released) return
    released = true
    read.release()
  }
  const stream = new Readable({
    highWaterMark: 4 * STREAM_PIECE_BYTES,
    read() {
      if (left === 0) return
      const piece = Buffer.allocUnsafeSlow(Math.min(STREAM_PIECE_BYTES, left))
      let at = 0
      try {
        while (at < piece.length) {
          const span = parts[part]!
          const n = Math.min(piece.length - at, spanLength(span) - within)
          if (span.kind === 'bytes') piece.set(span.bytes.subarray(within, within + n), at)
          else readExactly(span.fd, piece, at, n, span.position + within)
          at += n
          within += n
          if (within === spanLength(span)) {
            part++
            within = 0
          }
        }
      } catch (error) {
        this.destroy(error as Error)
        return
      }
      left -= piece.length
      this.push(piece)
      if (left === 0) {
        release()
        this.push(null)
      }
    },
    destroy(error, callback) {
      release()
      callback(error)
    },
  })
  return { length, stream }
}

/** A piece of a log file, from the page cache nearly always (as `readSpansInto` reads ranges up to 256 KiB). */
function readExactly(fd: number, into: Buffer, at: number, length: number, position: number): void {
  for (let done = 0; done < length; ) {
    const n = nodeFs.readSync(fd, into, at + done, length - done, position + done)
    if (n === 0) throw new Error(`short read of a log file: ${done} of ${length} bytes`)
    done += n
  }
}

function spanLength(span: Span): number {
  return span.kind === 'bytes' ? span.bytes.length : span.length
}

/** The last entry's separator (`,`) goes: the range does not end at the head. */
function dropLastByte(parts: Span[]): void {
  for (let i = parts.length - 1; i > 0; i--) {
    const span = parts[i]!
    if (spanLength(span) === 0) continue
    parts[i] = span.kind === 'bytes' ? { kind: 'bytes', bytes: span.bytes.subarray(0, span.bytes.length - 1) } : { ...span, length: span.length - 1 }
    return
  }
}
