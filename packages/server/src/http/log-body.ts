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
 * No JSON is parsed. The bytes are pread into one buffer per response, taken
 * from a free list of its size class (64 KiB up to BUFFERED_BODY_MAX_BYTES)
 * and returned to it when the response is done with it, so the hot path of a
 * cached read allocates no body memory: a fresh buffer past malloc's mmap
 * threshold (128 KiB) costs an mmap, page faults over all of it and an munmap
 * per response. Bigger ranges are streamed (`streamedLogBody`) or go out by
 * sendfile when the addon is loaded (`sendfile-body.ts`, chosen in
 * shape-responder.ts), with the same layout and so the same bytes.
 */

/** The smallest size class: snapshot chunks in tests, most live batches. */
export const POOLED_BUFFER_BYTES = 64 * 1024
/**
 * The largest body built in one pooled buffer; a range bigger than this is
 * streamed in pieces instead (see `streamedLogBody` for why).
 */
export const BUFFERED_BODY_MAX_BYTES = 1024 * 1024
/** Bytes of free buffers kept per size class (256 of 64 KiB ... 16 of 1 MiB); beyond that returned buffers are left to the GC. */
const POOL_BYTES_PER_CLASS = 16 * 1024 * 1024
/** Ranges above this are read on the thread pool so one large pread does not stall the event loop. */
const ASYNC_READ_BYTES = 256 * 1024

const OPEN = 0x5b
const CLOSE = 0x5d

/** Free buffers per size class: `pools[i]` holds buffers of `POOLED_BUFFER_BYTES << i` bytes. */
const pools: Buffer[][] = []
for (let size = POOLED_BUFFER_BYTES; size <= BUFFERED_BODY_MAX_BYTES; size *= 2) pools.push([])

function sizeClass(size: number): number {
  let index = 0
  for (let capacity = POOLED_BUFFER_BYTES; capacity < size; capacity *= 2) index++
  return index
}

/** A buffer of at least `size` bytes, from its class's free list when one is free; undefined class: not pooled. */
function take(size: number): { buffer: Buffer; pool: Buffer[] | undefined } {
  const index = sizeClass(size)
  const pool = pools[index]
  if (pool === undefined) return { buffer: Buffer.allocUnsafeSlow(size), pool: undefined }
  return { buffer: pool.pop() ?? Buffer.allocUnsafeSlow(POOLED_BUFFER_BYTES << index), pool }
}

/**
 * Lets go of every free pooled buffer. The pools fill to the peak of bodies
 * built at once and keep it; after a sweep retired thousands of shapes the
 * peak that filled them is over, and their memory (outside V8's heap, in the
 * C heap) goes back to the system at the next trim.
 */
export function releasePooledBodies(): void {
  for (const pool of pools) pool.length = 0
}

/** Free pooled buffers, for tests. */
export function pooledBodies(): number {
  let n = 0
  for (const pool of pools) n += pool.length
  return n
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
    const { buffer, pool } = take(size)
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
        if (released || pool === undefined) return
        released = true
        if ((pool.length + 1) * buffer.length <= POOL_BYTES_PER_CLASS) pool.push(buffer)
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
