import { describe, expect, it } from 'vitest'
import { Admission } from '../../src/http/admission.js'

/** The retry-after a refusal carries (the acquire must be refused). */
function refusedAfter(admission: Admission, kind: 'initial' | 'existing'): number {
  const answer = admission.acquire(kind)
  if (typeof answer === 'function') throw new Error('expected a refusal')
  expect(answer.code).toBe('concurrent_request_limit_exceeded')
  return Number(answer.retryAfter)
}

describe('Admission', () => {
  it('refuses past the limit with 6-10 s while nothing completes', () => {
    for (const spread of [0, 0.5, 0.999]) {
      const admission = new Admission({ initial: 3, existing: 3 }, () => spread, undefined, () => 5_000)
      for (let i = 0; i < 3; i++) expect(typeof admission.acquire('initial')).toBe('function')
      const after = refusedAfter(admission, 'initial')
      expect(after).toBeGreaterThanOrEqual(6)
      expect(after).toBeLessThanOrEqual(10)
    }
  })

  it('spreads refused clients from 1 s to twice the time the requests in flight take to clear at the rate they complete', () => {
    let now = 10_000
    let spread = 0
    const admission = new Admission({ initial: 300, existing: 10 }, () => spread, undefined, () => now)
    const releases = Array.from({ length: 300 }, () => admission.acquire('initial') as () => void)
    // 100 completions in the last second, each slot taken again: 300 in flight clear in three seconds.
    for (let i = 0; i < 100; i++) {
      now += 10
      releases[i]!()
      expect(typeof admission.acquire('initial')).toBe('function')
    }
    spread = 0
    expect(refusedAfter(admission, 'initial')).toBe(1)
    spread = 0.5
    const middle = refusedAfter(admission, 'initial')
    spread = 0.99
    const latest = refusedAfter(admission, 'initial')
    expect(middle).toBe(3)
    expect(latest).toBe(6)
    // The other kind's completions say nothing about this one.
    for (let i = 0; i < 10; i++) admission.acquire('existing')
    expect(refusedAfter(admission, 'existing')).toBeGreaterThanOrEqual(6)
    // Long after the last completion the rate is unknown again: 6-10 s.
    now += 5_000
    expect(refusedAfter(admission, 'initial')).toBeGreaterThanOrEqual(6)
  })

  it('never answers less than one second nor more than the 6-10 s it would give otherwise', () => {
    let now = 0
    const admission = new Admission({ initial: 2, existing: 2 }, () => 0, undefined, () => now)
    for (let i = 0; i < 1000; i++) {
      const release = admission.acquire('initial') as () => void
      now += 1
      release()
    }
    admission.acquire('initial')
    admission.acquire('initial')
    expect(refusedAfter(admission, 'initial')).toBe(1)
  })

  it('counts queued requests in the time to clear, and refuses with it once the queue is full', () => {
    let now = 10_000
    const admission = new Admission({ initial: 10, existing: 10 }, () => 0.5, undefined, () => now, { initial: { length: 20, waitMs: 60_000 } })
    const waiter = { admitted: () => {}, refused: () => {} }
    const releases: Array<() => void> = []
    for (let i = 0; i < 10; i++) releases.push(admission.acquire('initial') as () => void)
    // Each slot passed on at once as it completes.
    for (let i = 0; i < 10; i++) {
      now += 50
      releases[i]!()
      expect(admission.enterOrWait('initial', { ...waiter })).toBe(true)
    }
    for (let i = 0; i < 20; i++) expect(admission.enterOrWait('initial', { ...waiter })).toBe(false)
    const refused = admission.enterOrWait('initial', { ...waiter })
    if (typeof refused === 'boolean') throw new Error('expected a refusal')
    // 10 completions over the last 1.5 s (the rate's window): 6.7 per second. 10 in flight and 20 queued
    // clear in 4.5 s; spread 0.5 of twice that, rounded up: 5 (the 10 in flight alone would give 2).
    expect(refused.retryAfter).toBe(5)
    expect(admission.stats().refused.initial).toEqual({ limit: 0, queueFull: 1, queueWait: 0 })
    admission.close(() => new Error('closing'))
  })

  it('passes a freed slot to the oldest queued request, never to a newcomer, and skips one that left', () => {
    const admission = new Admission({ initial: 1, existing: 1 }, () => 0, undefined, undefined, { initial: { length: 5, waitMs: 60_000 } })
    const admitted: string[] = []
    const waiter = (name: string) => ({ admitted: () => admitted.push(name), refused: () => admitted.push(`${name} refused`) })
    expect(admission.enterOrWait('initial', waiter('first'))).toBe(true)
    const [a, b, c] = [waiter('a'), waiter('b'), waiter('c')]
    for (const w of [a, b, c]) expect(admission.enterOrWait('initial', w)).toBe(false)
    admission.cancel('initial', b)
    admission.leave('initial')
    expect(admitted).toEqual(['a'])
    expect(admission.enterOrWait('initial', waiter('late'))).toBe(false)
    admission.leave('initial')
    admission.leave('initial')
    expect(admitted).toEqual(['a', 'c', 'late'])
    expect([admission.initial, admission.queued('initial')]).toEqual([1, 0])
    admission.leave('initial')
    expect([admission.initial, admission.queued('initial')]).toEqual([0, 0])
  })
})
