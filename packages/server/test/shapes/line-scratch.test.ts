import { describe, expect, it } from 'vitest'
import { LineScratch } from '../../src/shapes/line-scratch.js'

const text = (b: Uint8Array): string => Buffer.from(b).toString('utf8')

describe('LineScratch', () => {
  it('encodes lines as UTF-8, non-ASCII and escapes included, each in its own bytes', () => {
    const s = new LineScratch()
    const samples = ['{"a":1}', '{"t":"żółw 🐢 \\u0000"}', '', 'x'.repeat(1000)]
    const lines = samples.map((t) => s.put(t))
    lines.forEach((l, i) => expect(text(l)).toBe(samples[i]))
    expect(lines[1]!.length).toBe(Buffer.byteLength(samples[1]!))
  })

  it('reuses the same memory after reset, so no allocation grows with the stream', () => {
    const s = new LineScratch()
    const first = s.put('{"n":1}')
    s.reset()
    const again = s.put('{"n":2}')
    expect(again.buffer).toBe(first.buffer)
    expect(again.byteOffset).toBe(first.byteOffset)
    // The old view now shows the new line: why targets must copy what they keep.
    expect(text(first)).toBe('{"n":2}')
    for (let round = 0; round < 50; round++) {
      s.reset()
      for (let i = 0; i < 2000; i++) s.put(`{"round":${round},"i":${i},"pad":"${'p'.repeat(300)}"}`)
    }
    expect(s.retainedBytes).toBeLessThanOrEqual(4 * 256 * 1024)
  })

  it('keeps earlier lines of a transaction intact across slabs', () => {
    const s = new LineScratch()
    const lines: Array<[Uint8Array, string]> = []
    for (let i = 0; i < 5000; i++) {
      const t = `{"i":${i},"v":"${'é'.repeat(i % 97)}"}`
      lines.push([s.put(t), t])
    }
    for (const [bytes, t] of lines) expect(text(bytes)).toBe(t)
    expect(s.retainedBytes).toBeGreaterThan(256 * 1024)
  })

  it('gives lines past its bound and lines bigger than a slab buffers of their own', () => {
    const s = new LineScratch()
    const big = 'b'.repeat(200_000)
    const own = s.put(big)
    expect(text(own)).toBe(big)
    expect(s.retainedBytes).toBe(0)
    const kept: Array<[Uint8Array, string]> = []
    // About 30 MiB of lines in one transaction: the scratch stops at its bound, the rest stay correct.
    for (let i = 0; i < 30_000; i++) {
      const t = `${i}:${'z'.repeat(1000)}`
      kept.push([s.put(t), t])
    }
    expect(s.retainedBytes).toBeLessThanOrEqual(8 * 1024 * 1024)
    for (let i = 0; i < kept.length; i += 997) expect(text(kept[i]![0])).toBe(kept[i]![1])
    expect(text(kept.at(-1)![0])).toBe(kept.at(-1)![1])
  })
})
