import { closeSync, openSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import type { Span } from '@sluice/storage'
import { useTempDir } from '@sluice/test-utils'
import { describe, expect, it } from 'vitest'
import {
  BUFFERED_BODY_MAX_BYTES,
  POOLED_BUFFER_BYTES,
  STREAM_PIECE_BYTES,
  logBody,
  pooledBodies,
  releasePooledBodies,
  streamedLogBody,
} from '../../src/http/log-body.js'
import { readOf } from './log-read-fixture.js'

const dirs = useTempDir('log-body')

async function collect(stream: NodeJS.ReadableStream): Promise<{ bytes: Buffer; pieces: number[] }> {
  const pieces: number[] = []
  const chunks: Buffer[] = []
  for await (const c of stream) {
    chunks.push(c as Buffer)
    pieces.push((c as Buffer).length)
  }
  return { bytes: Buffer.concat(chunks), pieces }
}

describe('logBody', () => {
  /** `count` stored entries (`json,`) of about `each` bytes, in a real file; the read covers them all. */
  async function fileRange(count: number, each: number): Promise<{ spans: Span[]; close: () => void }> {
    const dir = await dirs.make('pooled')
    const path = join(dir, 'log.dat')
    const text = Array.from({ length: count }, (_, i) => `{"key":"${i}","value":"${String(i % 10).repeat(each)}"},`).join('')
    writeFileSync(path, text)
    const fd = openSync(path, 'r')
    return { spans: [{ kind: 'file', fd, position: 0, length: Buffer.byteLength(text) }], close: () => closeSync(fd) }
  }

  it('builds bodies of every size class up to BUFFERED_BODY_MAX_BYTES in reused buffers, never one shared by two bodies in flight', async () => {
    const tail = '{"headers":{"control":"up-to-date","global_last_seen_lsn":"9"}}'
    // Bodies in each class, the smallest and largest near their class's edges (entries are just under 1,000 bytes).
    const sizes = [POOLED_BUFFER_BYTES - 2000, POOLED_BUFFER_BYTES + 2000, 143_000, 300_000, 700_000, BUFFERED_BODY_MAX_BYTES - 8000]
    for (const size of sizes) {
      const { spans, close } = await fileRange(Math.ceil(size / 1000), 960)
      expect(spans[0]!.kind === 'file' && spans[0]!.length < size).toBe(true)
      try {
        for (const withTail of [undefined, tail]) {
          const first = await logBody(readOf(spans), withTail)
          const second = await logBody(readOf(spans), withTail)
          const parsed = JSON.parse(first.bytes.toString('utf8')) as unknown[]
          expect(parsed).toHaveLength(Math.ceil(size / 1000) + (withTail === undefined ? 0 : 1))
          expect(second.bytes.equals(first.bytes)).toBe(true)
          // Both in flight: two buffers.
          expect(second.bytes.buffer).not.toBe(first.bytes.buffer)
          first.done()
          // The first's buffer is free again: the next body of its class is built in it, with its own bytes.
          const third = await logBody(readOf(spans), withTail)
          expect(third.bytes.buffer).toBe(first.bytes.buffer)
          expect(third.bytes.equals(second.bytes)).toBe(true)
          second.done()
          third.done()
        }
      } finally {
        close()
      }
    }
  })

  it('builds a body bigger than the largest class in a buffer of its own, which is not kept', async () => {
    const { spans, close } = await fileRange(1100, 980)
    try {
      const first = await logBody(readOf(spans), undefined)
      expect(first.bytes.length).toBeGreaterThan(BUFFERED_BODY_MAX_BYTES)
      expect(JSON.parse(first.bytes.toString('utf8'))).toHaveLength(1100)
      first.done()
      const second = await logBody(readOf(spans), undefined)
      expect(second.bytes.buffer).not.toBe(first.bytes.buffer)
      second.done()
    } finally {
      close()
    }
  })

  it('lets go of every free pooled buffer when asked, and builds in new ones after', async () => {
    const { spans, close } = await fileRange(40, 960)
    try {
      const bodies = await Promise.all([logBody(readOf(spans), undefined), logBody(readOf(spans), undefined)])
      for (const b of bodies) b.done()
      expect(pooledBodies()).toBeGreaterThanOrEqual(2)
      releasePooledBodies()
      expect(pooledBodies()).toBe(0)
      const next = await logBody(readOf(spans), undefined)
      expect(bodies.some((b) => b.bytes.buffer === next.bytes.buffer)).toBe(false)
      expect(JSON.parse(next.bytes.toString('utf8'))).toHaveLength(40)
      next.done()
    } finally {
      close()
    }
  })
})

describe('streamedLogBody', () => {
  it('yields the bytes logBody builds, in pieces of at most STREAM_PIECE_BYTES, across file and memory spans, and releases the read once', async () => {
    const dir = await dirs.make('files')
    const path = join(dir, 'log.dat')
    // Entries as the store keeps them (`json,`), with a span boundary inside a piece and ranges that are not piece-aligned.
    const line = (i: number) => `{"key":"${i}","value":{"id":"${i}","payload":"${'x'.repeat(i % 97)}"}},`
    const fileText = Array.from({ length: 3000 }, (_, i) => line(i)).join('')
    writeFileSync(path, `garbage-before${fileText}`)
    const memory = Buffer.from(Array.from({ length: 500 }, (_, i) => line(10_000 + i)).join(''))
    const fd = openSync(path, 'r')
    try {
      for (const tail of [undefined, '{"headers":{"control":"up-to-date","global_last_seen_lsn":"7"}}']) {
        const spans: Span[] = [
          { kind: 'file', fd, position: 14, length: Buffer.byteLength(fileText) },
          { kind: 'bytes', bytes: memory },
        ]
        const expected = await logBody(readOf(spans), tail)
        const read = readOf(spans)
        const body = streamedLogBody(read, tail)
        const { bytes, pieces } = await collect(body.stream)
        expect(bytes.equals(expected.bytes)).toBe(true)
        expect(body.length).toBe(expected.bytes.length)
        expect(Math.max(...pieces)).toBeLessThanOrEqual(STREAM_PIECE_BYTES)
        expect(pieces.length).toBeGreaterThan(2)
        expect(JSON.parse(bytes.toString('utf8'))).toHaveLength(3500 + (tail === undefined ? 0 : 1))
        expect(read.releases).toBe(1)
      }
    } finally {
      closeSync(fd)
    }
  })

  it('an empty range is `[]` or `[up-to-date]`', async () => {
    for (const tail of [undefined, '{"headers":{"control":"up-to-date"}}']) {
      const read = readOf([])
      const { bytes } = await collect(streamedLogBody(read, tail).stream)
      expect(bytes.toString('utf8')).toBe(tail === undefined ? '[]' : `[${tail}]`)
      expect(read.releases).toBe(1)
    }
  })

  it('releases the read when the response goes before the body is read', async () => {
    const read = readOf([{ kind: 'bytes', bytes: Buffer.alloc(4 * STREAM_PIECE_BYTES, 0x20) }])
    const body = streamedLogBody(read, undefined)
    body.stream.destroy()
    await new Promise((r) => setImmediate(r))
    expect(read.releases).toBe(1)
  })
})
