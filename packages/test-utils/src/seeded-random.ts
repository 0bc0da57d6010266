/**
 * The one seeded generator of the workloads, tests and benchmarks: the same
 * seed gives the same sequence on every machine, so a failing run can be
 * replayed from the seed it printed, and every engine in a benchmark stores the
 * same bytes. mulberry32: one 32-bit word of state, good enough to pick
 * operations and values; not for anything that needs statistical quality.
 */

/** Uniform numbers in [0, 1), from `seed`. */
export function seededRandom(seed: number): () => number {
  let a = seed >>> 0
  return () => {
    a = (a + 0x6d2b79f5) >>> 0
    let t = a
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
}

/** The same generator with the helpers a workload wants. */
export class SeededRandom {
  /** Uniform in [0, 1). */
  readonly next: () => number

  constructor(readonly seed: number) {
    this.next = seededRandom(seed)
  }

  /** Integer in [min, max]. */
  int(min: number, max: number): number {
    return min + Math.floor(this.next() * (max - min + 1))
  }

  chance(p: number): boolean {
    return this.next() < p
  }

  pick<T>(items: readonly T[]): T {
    return items[Math.floor(this.next() * items.length)] as T
  }

  /** Between `min` and `max` distinct items, in random order. */
  some<T>(items: readonly T[], min: number, max: number): T[] {
    const pool = [...items]
    const n = this.int(min, Math.min(max, pool.length))
    const out: T[] = []
    for (let i = 0; i < n; i++) out.push(pool.splice(Math.floor(this.next() * pool.length), 1)[0] as T)
    return out
  }

  /** A child generator (for one writer), deterministic from this one. */
  fork(): SeededRandom {
    return new SeededRandom(Math.floor(this.next() * 2 ** 32))
  }
}
