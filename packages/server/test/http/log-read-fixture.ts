import type { LogRead, Span } from '@sluice/storage'

/** A storage read over `spans` (file ranges and memory bytes) for the body tests; counts its releases. */
export function readOf(spans: Span[]): LogRead & { releases: number } {
  const read = {
    spans,
    byteLength: spans.reduce((n, s) => n + (s.kind === 'bytes' ? s.bytes.length : s.length), 0),
    entryCount: 1,
    nextOffset: { tx: 1n, op: 0 },
    reachedHead: false,
    releases: 0,
    release() {
      read.releases++
    },
  }
  return read as unknown as LogRead & { releases: number }
}
