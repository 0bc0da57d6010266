import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { HandleIssuer, MAX_HANDLE_LENGTH, formatHandle, handleMicros, isValidHandle, parseHandle } from '../../../src/shapes/definition/index.js'

const STORAGE_ID = /^[A-Za-z0-9_-]{1,128}$/

/** A clock the test moves by hand. */
function manualClock(start: number): { now: number; read: () => number } {
  const clock = { now: start, read: () => clock.now }
  return clock
}

describe('handles', () => {
  it('are <hash>-<unix microseconds> from the clock when it moves forward', () => {
    const clock = manualClock(1_763_837_400_123_456)
    const issuer = new HandleIssuer({ clock: clock.read })
    expect(issuer.issue('42')).toBe('42-1763837400123456')
    clock.now += 10
    expect(issuer.issue('42')).toBe('42-1763837400123466')
  })

  it('stay unique under a frozen clock, across hashes too', () => {
    const issuer = new HandleIssuer({ clock: () => 1_000_000 })
    const handles = Array.from({ length: 1000 }, (_, i) => issuer.issue(String(i % 3)))
    const micros = handles.map((h) => parseHandle(h)?.micros)
    expect(new Set(handles).size).toBe(1000)
    expect(new Set(micros).size).toBe(1000)
    expect(micros[999]).toBe(1_000_999)
  })

  it('never go backwards when the clock does', () => {
    const clock = manualClock(5_000_000)
    const issuer = new HandleIssuer({ clock: clock.read })
    const first = parseHandle(issuer.issue('1'))?.micros ?? 0
    clock.now = 1_000_000
    const second = parseHandle(issuer.issue('1'))?.micros ?? 0
    expect(second).toBe(first + 1)
  })

  it('a restarted issuer starts above the persisted floor even with an earlier clock', () => {
    const clock = manualClock(9_000_000)
    const before = new HandleIssuer({ clock: clock.read })
    const issued = [before.issue('7'), before.issue('7'), before.issue('7')]
    clock.now = 8_000_000 // the restarted machine's clock is behind
    const after = new HandleIssuer({ clock: clock.read, floor: before.floor })
    const next = after.issue('7')
    expect(issued).not.toContain(next)
    expect(parseHandle(next)?.micros).toBe(9_000_003)
  })

  it('observe raises the floor but never lowers it', () => {
    const issuer = new HandleIssuer({ clock: () => 10, floor: 100 })
    issuer.observe(50)
    expect(issuer.floor).toBe(100)
    issuer.observe(200)
    expect(issuer.issue('1')).toBe('1-201')
  })

  it('real clock: many in a row are unique and valid storage ids', () => {
    const issuer = new HandleIssuer()
    const handles = Array.from({ length: 2000 }, () => issuer.issue('18446744073709551615'))
    expect(new Set(handles).size).toBe(handles.length)
    for (const h of handles) {
      expect(h).toMatch(STORAGE_ID)
      expect(h.length).toBeLessThanOrEqual(MAX_HANDLE_LENGTH)
    }
  })

  it.each([
    ['1-2', { hash: '1', micros: 2 }],
    ['0-0', { hash: '0', micros: 0 }],
    ['18446744073709551615-1763837400123456', { hash: '18446744073709551615', micros: 1_763_837_400_123_456 }],
  ])('parses %s', (text, parsed) => {
    expect(parseHandle(text)).toEqual(parsed)
    expect(isValidHandle(text)).toBe(true)
  })

  it.each([
    '',
    '123',
    '-123',
    '123-',
    '1-2-3',
    '01-2',
    '1-02',
    'abc-123',
    '1_2',
    '1 -2',
    '18446744073709551616-1', // above 2^64 - 1
    '1-99999999999999999', // 17 digits
    '1-9007199254740993', // not a safe integer
    '../etc-1',
    '１-2', // full-width digit
    'x'.repeat(200),
  ])('rejects %j', (text) => {
    expect(parseHandle(text)).toBeUndefined()
    expect(isValidHandle(text)).toBe(false)
  })

  it('formatHandle refuses what parseHandle would reject', () => {
    expect(() => formatHandle('abc', 1)).toThrow(RangeError)
    expect(() => formatHandle('1', -1)).toThrow(RangeError)
  })
})

describe('handleMicros', () => {
  // The grammar as a regular expression (docs/protocol.md §2: no leading zeros but a lone 0, a hash of
  // at most 2^64 - 1, microseconds a safe integer), the oracle of the hand-written check parseHandle uses.
  const SPEC = /^(0|[1-9][0-9]{0,19})-(0|[1-9][0-9]{0,15})$/
  const spec = (text: string): number | undefined => {
    const m = SPEC.exec(text)
    if (m === null || (m[1]!.length === 20 && m[1]! > '18446744073709551615')) return undefined
    const micros = Number(m[2])
    return Number.isSafeInteger(micros) ? micros : undefined
  }
  const digits = fc.stringMatching(/^[0-9]{0,22}$/)
  const near = fc.oneof(
    fc.tuple(digits, fc.constantFrom('-', '--', '', '+', ' -'), digits).map(([a, dash, b]) => `${a}${dash}${b}`),
    fc.constantFrom(
      '0-0', '00-1', '1-00', '18446744073709551615-1', '18446744073709551616-1', '1-9007199254740991', '1-9007199254740992',
      '1-9999999999999999', '1-10000000000000000', '-1', '1-', '', '1-2-3', '١-٢', `${'1'.repeat(20)}-${'2'.repeat(16)}`,
    ),
    fc.string({ maxLength: 40 }),
  )
  it('accepts exactly the handles of the grammar, and parseHandle with it', () => {
    fc.assert(
      fc.property(near, (text) => {
        const micros = spec(text)
        expect(handleMicros(text)).toBe(micros)
        expect(parseHandle(text)).toEqual(micros === undefined ? undefined : { hash: text.split('-')[0], micros })
      }),
      { numRuns: process.env.SOAK === '1' ? 200_000 : 5_000 },
    )
  })
})
