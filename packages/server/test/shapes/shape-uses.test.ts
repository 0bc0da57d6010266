import { describe, expect, it } from 'vitest'
import { EvictionQueue } from '../../src/shapes/eviction-queue.js'
import type { LiveShape } from '../../src/shapes/live-shape.js'
import { MAX_SWEEP_INTERVAL_MS, ShapeUses, sweepInterval } from '../../src/shapes/shape-uses.js'

describe('ShapeUses', () => {
  it('finds the stamps unused since the TTL from the marks of earlier sweeps', () => {
    const uses = new ShapeUses(0)
    const a = uses.stamp()
    uses.mark(100)
    const b = uses.stamp()
    uses.mark(200)
    const c = uses.stamp()
    uses.mark(300)
    // Nothing is a TTL of 500 old yet.
    expect(uses.unusedSince(300, 500)).toBe(-1)
    // At 350 with a TTL of 200, the cutoff is 150: a (stamped before the mark at 100) is unused since then, b is not.
    const threshold = uses.unusedSince(350, 200)
    expect(a <= threshold).toBe(true)
    expect(b <= threshold).toBe(false)
    // Later cutoffs still work after the marks they no longer need were dropped.
    const later = uses.unusedSince(520, 200)
    expect(b <= later && c <= later).toBe(true)
    expect(uses.current).toBe(c)
  })

  it('counts a start as a use: shapes stamped 0 become old only a TTL after it', () => {
    const uses = new ShapeUses(1000)
    expect(uses.unusedSince(1500, 600)).toBe(-1)
    uses.mark(1700)
    expect(uses.unusedSince(1700, 600)).toBe(0)
  })

  it.each([
    [80, 10],
    [8, 1],
    [1, 1],
    [24 * 3600 * 1000, MAX_SWEEP_INTERVAL_MS],
  ])('sweeps a TTL of %i ms every %i ms', (ttl, interval) => {
    expect(sweepInterval(ttl)).toBe(interval)
  })
})

describe('EvictionQueue', () => {
  const shape = (handle: string, lastUsed: number, ready = true): LiveShape =>
    ({ handle, lastUsed, log: ready ? ({} as LiveShape['log']) : undefined }) as LiveShape

  it('gives ready shapes in least recently used order, idle before waited-on, never one being created', () => {
    const shapes = new Map<string, LiveShape>()
    for (const s of [shape('a', 5), shape('b', 2), shape('c', 9), shape('d', 1, false), shape('e', 3)]) shapes.set(s.handle, s)
    const waited = new Set(['b'])
    const queue = new EvictionQueue()
    const order: string[] = []
    for (let next = queue.next(shapes, (h) => waited.has(h)); next !== undefined; next = queue.next(shapes, (h) => waited.has(h))) {
      order.push(next.handle)
      shapes.delete(next.handle)
    }
    expect(order).toEqual(['e', 'a', 'c', 'b'])
    expect(shapes.has('d')).toBe(true)
  })

  it('skips a candidate used since its scan, and one that got a waiter', () => {
    const shapes = new Map<string, LiveShape>()
    for (let i = 0; i < 100; i++) shapes.set(`s${i}`, shape(`s${i}`, i))
    const queue = new EvictionQueue()
    const waited = new Set<string>()
    expect(queue.next(shapes, (h) => waited.has(h))?.handle).toBe('s0')
    shapes.delete('s0')
    shapes.get('s1')!.lastUsed = 1000
    waited.add('s2')
    expect(queue.next(shapes, (h) => waited.has(h))?.handle).toBe('s3')
  })
})
