import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { RangeCache } from '../../src/http/range-cache.js'

const body = (size: number, fill: number): Buffer => Buffer.alloc(size, fill)

/** Offers a body twice (what admits it). */
function keep(cache: RangeCache, logId: string, key: string, bytes: Buffer): void {
  cache.offer(logId, key, bytes)
  cache.offer(logId, key, bytes)
}

describe('RangeCache', () => {
  it('keeps a body on its second offer, as a copy of it', () => {
    const cache = new RangeCache(1024 * 1024)
    const bytes = body(1000, 1)
    cache.offer('h', 'h -1 0_0', bytes)
    expect(cache.get('h -1 0_0')).toBeUndefined()
    cache.offer('h', 'h -1 0_0', bytes)
    bytes.fill(2)
    expect(cache.get('h -1 0_0')).toEqual(body(1000, 1))
    expect(cache.stats()).toMatchObject({ entries: 1, bytes: 1000, hits: 1, misses: 1 })
  })

  it('forgets the keys offered once, keeping the bodies it holds', () => {
    const cache = new RangeCache(1024 * 1024)
    keep(cache, 'h', 'h -1 0_0', body(100, 1))
    cache.offer('g', 'g -1 0_0', body(100, 2))
    expect(cache.offeredOnce).toBe(1)
    cache.forgetOffered()
    expect(cache.offeredOnce).toBe(0)
    // The next offer is a first one again: not kept.
    cache.offer('g', 'g -1 0_0', body(100, 2))
    expect(cache.get('g -1 0_0')).toBeUndefined()
    expect(cache.get('h -1 0_0')).toEqual(body(100, 1))
  })

  it('answers each key with what was offered for it and holds at most its bound, for random offers and lookups', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 0, max: 64 * 1024 }),
        fc.array(fc.record({ key: fc.integer({ min: 0, max: 40 }), size: fc.integer({ min: 0, max: 12 * 1024 }), get: fc.boolean() }), { maxLength: 300 }),
        (maxBytes, steps) => {
          const cache = new RangeCache(maxBytes)
          // A key's bytes never change (as a log range's do not): the size and fill follow from the key.
          const sizeOf = new Map<number, number>()
          for (const step of steps) {
            const size = sizeOf.get(step.key) ?? step.size
            sizeOf.set(step.key, size)
            const key = `h ${step.key} x`
            if (step.get) {
              const got = cache.get(key)
              if (got !== undefined) expect(got.equals(body(size, step.key))).toBe(true)
            } else cache.offer('h', key, body(size, step.key))
            const stats = cache.stats()
            expect(stats.bytes).toBeLessThanOrEqual(maxBytes)
          }
        },
      ),
      { numRuns: process.env['SOAK'] === '1' ? 2000 : 200 },
    )
  })

  it('keeps a body served often while others pass through', () => {
    const cache = new RangeCache(80 * 1024)
    keep(cache, 'hot', 'hot -1 0_0', body(10 * 1024, 7))
    for (let i = 0; i < 100; i++) {
      expect(cache.get('hot -1 0_0')).toBeDefined()
      keep(cache, `h${i}`, `h${i} -1 0_0`, body(10 * 1024, 1))
    }
    expect(cache.get('hot -1 0_0')?.equals(body(10 * 1024, 7))).toBe(true)
    expect(cache.stats().evictions).toBeGreaterThan(80)
  })

  it('does not keep a body larger than an eighth of the cache', () => {
    const cache = new RangeCache(8 * 1024)
    keep(cache, 'h', 'big', body(1025, 1))
    keep(cache, 'h', 'small', body(1024, 1))
    expect(cache.get('big')).toBeUndefined()
    expect(cache.get('small')).toBeDefined()
  })

  it("drops a shape's bodies when it is dropped, and an older log's when a compacted log's body comes", () => {
    const cache = new RangeCache(1024 * 1024)
    keep(cache, 'h', 'h -1 0_0', body(100, 1))
    keep(cache, 'h', 'h 0_0 0_1', body(100, 2))
    keep(cache, 'g', 'g -1 0_0', body(100, 3))
    cache.dropShape('h')
    expect(cache.get('h -1 0_0')).toBeUndefined()
    expect(cache.get('h 0_0 0_1')).toBeUndefined()
    expect(cache.get('g -1 0_0')).toBeDefined()
    expect(cache.stats()).toMatchObject({ entries: 1, bytes: 100 })

    keep(cache, 'g_c1', 'g_c1 -1 0_0', body(50, 4))
    expect(cache.get('g -1 0_0')).toBeUndefined()
    expect(cache.get('g_c1 -1 0_0')).toBeDefined()
    // A request still reading the log the compaction replaced does not bring its bodies back.
    keep(cache, 'g', 'g 0_0 0_1', body(100, 5))
    expect(cache.get('g 0_0 0_1')).toBeUndefined()
    expect(cache.stats()).toMatchObject({ entries: 1, bytes: 50 })
  })
})
