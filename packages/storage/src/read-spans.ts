import type { LogRead } from './contract.js'
import { nodeFs, readFully } from './fs-port.js'
import type { FsPort } from './fs-port.js'

/**
 * Copies the bytes of a read into one buffer (pread for file spans). The HTTP
 * layer sends spans without this copy; tests, tools and benchmarks use it.
 */
export function readSpans(read: LogRead, fs: FsPort = nodeFs): Buffer {
  const out = Buffer.allocUnsafe(read.byteLength)
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
  return out
}

/** Async variant: reads file spans on the thread pool, so many readers overlap. */
export async function readSpansAsync(read: LogRead, fs: FsPort = nodeFs): Promise<Buffer> {
  const out = Buffer.allocUnsafe(read.byteLength)
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
  return out
}
