/**
 * Turning a `LogRead` into bytes in memory, the way the benchmark's readers do.
 *
 * By default a reader copies each range into its own reusable buffer, as the
 * server does for ranges it does not sendfile (docs/architecture.md §2: "pread into a
 * pooled buffer"). `readSpans`/`readSpansAsync` from `@sluice/storage` allocate
 * a fresh buffer per range instead; with 10 MiB ranges a read's time then hinges
 * on whether the allocator hands back recycled or fresh, page-faulting memory,
 * which depends on when V8 last collected garbage, not on the engine. Seen here:
 * the same preads of the same ranges ran at 0.9 to 3.5 GB/s with fresh buffers,
 * the file engine and raw pread swapping places from run to run, and at a steady
 * 3.4-4.2 GB/s (within 10% of each other) with reused ones. `BENCH_FRESH=1`
 * switches the benchmark to `readSpans` to see that cost.
 */
import { readSpansInto, readSpansIntoAsync } from '@sluice/storage'
import type { LogRead } from '@sluice/storage'

/** A reader's destination buffer: grown when a range needs more, otherwise reused. */
export class ReadBuffer {
  private buf: Buffer = Buffer.alloc(0)

  /** At least `n` bytes; previous contents are not kept. */
  take(n: number): Buffer {
    // Zero-filled once when it grows, so its pages are faulted in before any timed read.
    if (this.buf.length < n) this.buf = Buffer.alloc(Math.ceil(n * 1.25))
    return this.buf
  }
}

/**
 * The bytes of `read` as one buffer: the span itself when the engine already
 * returned one in-memory buffer, otherwise a copy into `into`.
 */
export function copySpans(read: LogRead, into: ReadBuffer): Buffer {
  const first = read.spans[0]
  if (read.spans.length === 1 && first?.kind === 'bytes') return Buffer.from(first.bytes.buffer, first.bytes.byteOffset, first.bytes.byteLength)
  const out = into.take(read.byteLength)
  return out.subarray(0, readSpansInto(read, out))
}

/** The same, with file spans read on libuv's thread pool (`fs.read` with a callback). */
export async function copySpansAsync(read: LogRead, into: ReadBuffer): Promise<Buffer> {
  const first = read.spans[0]
  if (read.spans.length === 1 && first?.kind === 'bytes') return Buffer.from(first.bytes.buffer, first.bytes.byteOffset, first.bytes.byteLength)
  const out = into.take(read.byteLength)
  return out.subarray(0, await readSpansIntoAsync(read, out))
}
