import { describe, expect, it } from 'vitest'
import { DEFAULT_BACKOFF, backoffDelay, parseRetryAfter } from '../src/index.js'

describe('backoffDelay', () => {
  const options = { ...DEFAULT_BACKOFF, initialDelayMs: 100, maxDelayMs: 1600, multiplier: 2 }

  it('doubles per attempt up to the cap, within [base/2, base]', () => {
    const table: Array<[number, number]> = [[1, 100], [2, 200], [3, 400], [4, 800], [5, 1600], [6, 1600], [40, 1600]]
    for (const [attempt, base] of table) {
      expect(backoffDelay(attempt, options, undefined, () => 0)).toBe(base / 2)
      expect(backoffDelay(attempt, options, undefined, () => 1)).toBe(base)
      const mid = backoffDelay(attempt, options, undefined, () => 0.5)
      expect(mid).toBe(base * 0.75)
    }
  })

  it('retry-after is a floor, even above the cap', () => {
    expect(backoffDelay(1, options, 5000, () => 1)).toBe(5000)
    expect(backoffDelay(5, options, 10, () => 0)).toBe(800)
  })

  it('defaults: 1 s doubling to 32 s, retrying for ever', () => {
    expect(DEFAULT_BACKOFF.initialDelayMs).toBe(1000)
    expect(DEFAULT_BACKOFF.maxDelayMs).toBe(32000)
    expect(DEFAULT_BACKOFF.maxRetries).toBe(Number.POSITIVE_INFINITY)
    expect(backoffDelay(100, DEFAULT_BACKOFF, undefined, () => 1)).toBe(32000)
  })
})

describe('parseRetryAfter', () => {
  const now = Date.parse('2025-01-01T00:00:00Z')
  const cases: Array<[string | null, number | undefined]> = [
    [null, undefined],
    ['5', 5000],
    [' 10 ', 10000],
    ['0', 0],
    ['1.5', 1500],
    ['Wed, 01 Jan 2025 00:00:30 GMT', 30000],
    ['Tue, 31 Dec 2024 23:59:00 GMT', undefined],
    ['soon', undefined],
    ['-3', undefined],
  ]
  for (const [header, expected] of cases) {
    it(`${JSON.stringify(header)} → ${expected}`, () => {
      expect(parseRetryAfter(header, now)).toBe(expected)
    })
  }
})
