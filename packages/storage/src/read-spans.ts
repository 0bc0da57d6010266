import type { LogRead } from './contract.js'
import { nodeFs, readFully } from './fs-port.js'
import type { FsPort } from './fs-port.js'

/**
 * Copies the bytes of a read into `out` (pread for file spans) and returns how
 * many were copied. A server answering many requests reads into pooled buffers
 * this way; large sealed ranges go out by sendfile instead.
 */
export function readSpansInto(read: LogRead, out: Uint8Array, fs: FsPort = nodeFs): number {
  checkRoom(read, out)
  let at = 0
  for (const span of read.spans) {
    if (span.kind === 'bytes') {
      out.set(span.bytes, at)
      at += span.bytes.length
    } else {
      const n = readFully(fs, span.fd, out, at, span.length, span.position)
      if (n !== span.length) throw new Error(`short read: ${n} of ${span.length} bytes`)
      at += n
    }
  }
  return at
}

/** Async variant: file spans are read on the thread pool, so many readers overlap. */
export async function readSpansIntoAsync(read: LogRead, out: Uint8Array, fs: FsPort = nodeFs): Promise<number> {
  checkRoom(read, out)
  let at = 0
  for (const span of read.spans) {
    if (span.kind === 'bytes') {
      out.set(span.bytes, at)
      at += span.bytes.length
      continue
    }
    let done = 0
    while (done < span.length) {
      const n = await fs.read(span.fd, out, at + done, span.length - done, span.position + done)
      if (n === 0) throw new Error(`short read: ${done} of ${span.length} bytes`)
      done += n
    }
    at += done
  }
  return at
}

/** Reads a `LogRead` into a new buffer. For tests and tools; servers use `readSpansInto`. */
export function readSpans(read: LogRead, fs: FsPort = nodeFs): Buffer {
  const out = Buffer.allocUnsafe(read.byteLength)
  readSpansInto(read, out, fs)
  return out
}

export async function readSpansAsync(read: LogRead, fs: FsPort = nodeFs): Promise<Buffer> {
  const out = Buffer.allocUnsafe(read.byteLength)
  await readSpansIntoAsync(read, out, fs)
  return out
}

function checkRoom(read: LogRead, out: Uint8Array): void {
  if (out.length < read.byteLength) throw new RangeError(`buffer of ${out.length} bytes for a read of ${read.byteLength}`)
}
