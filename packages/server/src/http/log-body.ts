import type { LogRead } from '@sluice/storage'
import { readSpansInto, readSpansIntoAsync } from '@sluice/storage'

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
