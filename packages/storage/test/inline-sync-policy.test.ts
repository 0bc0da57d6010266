import { describe, expect, it } from 'vitest'
import { InlineSyncPolicy } from '../src/file/inline-sync-policy.js'

describe('InlineSyncPolicy', () => {
  it('keeps syncing inline through one slow sync among fast ones: the median of the last eight decides', () => {
    const p = new InlineSyncPolicy(1)
    let t = 0
    for (const ms of [0.4, 0.5, 0.3, 6, 0.4, 0.6, 12, 0.5, 0.4]) {
      expect(p.mayTry(t)).toBe(true)
      p.record(ms, (t += 25))
    }
  })

  it('once most recent syncs are slow, sends syncs to the pool and retries after 1 s, 2 s, 4 s ... up to a minute; a fast retry resets it', () => {
    const p = new InlineSyncPolicy(1)
    let t = 0
    for (let i = 0; i < 4; i++) p.record(0.5, (t += 10))
    for (let i = 0; i < 4; i++) p.record(5, (t += 10))
    // Four fast, four slow: the median (upper middle of eight) is slow.
    expect(p.mayTry(t + 1)).toBe(false)
    expect(p.mayTry(t + 999)).toBe(false)
    expect(p.mayTry(t + 1000)).toBe(true)
    t += 1000
    p.record(5, t)
    expect(p.mayTry(t + 1999)).toBe(false)
    expect(p.mayTry(t + 2000)).toBe(true)
    let wait = 4000
    for (let i = 0; i < 6; i++) {
      p.record(5, (t += 1))
      expect(p.mayTry(t + wait - 1)).toBe(false)
      expect(p.mayTry(t + wait)).toBe(true)
      wait = Math.min(wait * 2, 60_000)
    }
    expect(wait).toBe(60_000)
    // The disk is fast again: five fast syncs bring the median back under the limit, and the next wait is 1 s again.
    for (let i = 0; i < 5; i++) p.record(0.3, (t += 60_000))
    expect(p.mayTry(t + 1)).toBe(true)
    // Inline syncs are tried only while allowed: slow ones until the median turns.
    while (p.mayTry(t)) p.record(5, (t += 10))
    expect(p.mayTry(t + 999)).toBe(false)
    expect(p.mayTry(t + 1000)).toBe(true)
  })

  it('0 never syncs inline', () => {
    expect(new InlineSyncPolicy(0).mayTry(0)).toBe(false)
  })
})
