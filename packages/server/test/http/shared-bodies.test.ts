import { closeSync, openSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import type { Span } from '@sluice/storage'
import { useTempDir } from '@sluice/test-utils'
import { describe, expect, it } from 'vitest'
import { logBody } from '../../src/http/log-body.js'
import { SharedBodies } from '../../src/http/shared-bodies.js'
import { readOf } from './log-read-fixture.js'

const dirs = useTempDir('shared-bodies')

async function fileSpans(entries: number): Promise<{ spans: Span[]; close: () => void }> {
  const path = join(await dirs.make('log'), 'log.dat')
  const text = Array.from({ length: entries }, (_, i) => `{"key":"${i}","value":"${'v'.repeat(200)}"},`).join('')
  writeFileSync(path, text)
  const fd = openSync(path, 'r')
  return { spans: [{ kind: 'file', fd, position: 0, length: Buffer.byteLength(text) }], close: () => closeSync(fd) }
}

describe('SharedBodies', () => {
  it('gives reads of one key in flight together one buffer, reads once, and lets it go when the last is done', async () => {
    const { spans, close } = await fileSpans(600)
    try {
      const bodies = new SharedBodies()
      const reads = [readOf(spans), readOf(spans), readOf(spans)]
      const [a, b, c] = await Promise.all(reads.map((read) => bodies.body('h -1 0_600', read, undefined)))
      const built = await logBody(readOf(spans), undefined)
      // A copy: the built body's buffer goes back to the pool.
      const expected = Buffer.from(built.bytes)
      built.done()
      expect(a!.bytes.equals(expected)).toBe(true)
      expect(b!.bytes.buffer).toBe(a!.bytes.buffer)
      expect(c!.bytes.buffer).toBe(a!.bytes.buffer)
      expect(reads.map((r) => r.releases)).toEqual([1, 1, 1])
      expect(bodies.size).toBe(1)
      // Another key (here another tail) is another body.
      const other = await bodies.body('h -1 0_600 tail', readOf(spans), '{"headers":{"control":"up-to-date"}}')
      expect(other.bytes.buffer).not.toBe(a!.bytes.buffer)
      other.done()
      a!.done()
      a!.done()
      b!.done()
      // One holder left: a request arriving now still shares.
      const late = await bodies.body('h -1 0_600', readOf(spans), undefined)
      expect(late.bytes.buffer).toBe(a!.bytes.buffer)
      c!.done()
      late.done()
      expect(bodies.size).toBe(0)
      // Nothing is kept once no response holds it: the next request reads again, into the buffer given back.
      const again = await bodies.body('h -1 0_600', readOf(spans), undefined)
      expect(again.bytes.equals(expected)).toBe(true)
      expect(bodies.size).toBe(1)
      again.done()
      expect(bodies.size).toBe(0)
    } finally {
      close()
    }
  })

  it('a failed read fails every request sharing it and is not shared afterwards', async () => {
    const { spans, close } = await fileSpans(10)
    close()
    const bodies = new SharedBodies()
    // The descriptor is closed: the read fails.
    const results = await Promise.allSettled([bodies.body('k', readOf(spans), undefined), bodies.body('k', readOf(spans), undefined)])
    expect(results.map((r) => r.status)).toEqual(['rejected', 'rejected'])
    expect(bodies.size).toBe(0)
    const { spans: good, close: closeGood } = await fileSpans(10)
    try {
      const body = await bodies.body('k', readOf(good), undefined)
      expect(JSON.parse(body.bytes.toString('utf8'))).toHaveLength(10)
      body.done()
    } finally {
      closeGood()
    }
  })
})
