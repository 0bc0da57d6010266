import { describe, expect, it } from 'vitest'
import { CURSOR_EPOCH_MS, type CursorInput, DEFAULT_LONG_POLL_TIMEOUT_MS, nextCursor } from '../src/index.js'

const at = (seconds: number): number => CURSOR_EPOCH_MS + seconds * 1000
const never = (): number => {
  throw new Error('random must not be drawn')
}

function cursor(overrides: Partial<CursorInput>): string {
  return nextCursor({
    nowMs: at(1_000_000),
    longPollTimeoutMs: DEFAULT_LONG_POLL_TIMEOUT_MS,
    requestCursor: undefined,
    random: never,
    ...overrides,
  })
}

describe('nextCursor', () => {
  it('counts from 2024-10-09T00:00:00Z', () => {
    expect(CURSOR_EPOCH_MS).toBe(Date.parse('2024-10-09T00:00:00Z'))
  })

  it.each<[number, string]>([
    [1, '20'],
    [19, '20'],
    [20, '20'],
    [20.999, '20'],
    [21, '40'],
    [1_000_000, '1000000'],
    [1_000_001, '1000020'],
  ])('rounds %s s after the epoch up to %s', (seconds, expected) => {
    expect(cursor({ nowMs: at(seconds) })).toBe(expected)
  })

  it.each<[number, number, string]>([
    [30_000, 31, '60'],
    [1_500, 7, '7'], // interval is floor(1.5 s) = 1 s
    [999, 12345, '0'], // interval 0: always "0"
    [0, 12345, '0'],
  ])('timeout %s ms at %s s → %s', (timeoutMs, seconds, expected) => {
    expect(cursor({ longPollTimeoutMs: timeoutMs, nowMs: at(seconds) })).toBe(expected)
  })

  it.each<[string | undefined]>([[undefined], [''], ['abc'], ['12abc'], ['1.5'], [' 5'], ['999999'], ['-5']])(
    'keeps the window when the request cursor %j is not ahead of it',
    (requestCursor) => {
      expect(cursor({ requestCursor, nowMs: at(1_000_001) })).toBe('1000020')
    },
  )

  it.each<[string, number, string]>([
    ['1000020', 0, '1000021'], // jitter 1
    ['1000020', 0.5, '1001821'], // jitter 1801
    ['1000020', 0.999999, '1003620'], // jitter 3600
    ['1000020', 1, '1003620'], // a random() of exactly 1 still stays within 3600
    ['2000000', 0, '2000001'], // a cursor ahead of the clock gets jitter on top of itself
    ['+1000020', 0, '1000021'],
    ['99999999999999999999', 0, '100000000000000000000'], // no float rounding
  ])('adds jitter when the request cursor %s is not behind (random %s)', (requestCursor, r, expected) => {
    expect(cursor({ requestCursor, nowMs: at(1_000_001), random: () => r })).toBe(expected)
  })

  it('is pure: same inputs, same output', () => {
    const input: CursorInput = { nowMs: at(4242), longPollTimeoutMs: 20_000, requestCursor: '4260', random: () => 0.25 }
    expect(nextCursor(input)).toBe(nextCursor(input))
    expect(nextCursor(input)).toBe('5161')
  })
})
