import { describe, expect, it } from 'vitest'
import {
  BEFORE_ALL,
  InvalidOffsetError,
  LAST_VIRTUAL,
  type LogOffset,
  OP_INF,
  SluiceError,
  U64_MAX,
  compareOffsets,
  formatOffset,
  formatRequestOffset,
  isBeforeAll,
  isVirtual,
  makeOffset,
  offsetsEqual,
  parseOffset,
  parseRequestOffset,
} from '../src/index.js'

describe('parseOffset / formatOffset', () => {
  const canonical: Array<[string, LogOffset]> = [
    ['-1', BEFORE_ALL],
    ['0_0', { tx: 0n, op: 0n }],
    ['0_5', { tx: 0n, op: 5n }],
    ['0_inf', LAST_VIRTUAL],
    ['1_0', { tx: 1n, op: 0n }],
    ['25993256_4', { tx: 25993256n, op: 4n }],
    ['7_inf', { tx: 7n, op: OP_INF }],
    // Above 2^53: a Number would silently round these.
    ['9007199254740993_9007199254740995', { tx: 9007199254740993n, op: 9007199254740995n }],
    ['18446744073709551615_18446744073709551615', { tx: U64_MAX, op: U64_MAX }],
  ]

  it.each(canonical)('round-trips %s', (text, offset) => {
    expect(parseOffset(text)).toEqual(offset)
    expect(formatOffset(parseOffset(text))).toBe(text)
    expect(formatOffset(offset)).toBe(text)
  })

  const normalised: Array<[string, string]> = [
    ['0_02', '0_2'],
    ['00_0', '0_0'],
    ['000000000000000000000000000001_5', '1_5'],
    ['0018446744073709551615_0', '18446744073709551615_0'],
  ]

  it.each(normalised)('accepts leading zeros in %s and formats it as %s', (text, formatted) => {
    expect(formatOffset(parseOffset(text))).toBe(formatted)
  })

  const invalid: Array<[string, string]> = [
    ['', 'empty'],
    ['_', 'both parts empty'],
    ['1_', 'empty op'],
    ['_1', 'empty tx'],
    ['10', 'no separator'],
    ['1_2_3', 'two separators'],
    ['1__2', 'double separator'],
    [' 1_2', 'leading space'],
    ['1_2 ', 'trailing space'],
    ['1 _2', 'inner space'],
    ['\t1_2', 'tab'],
    ['+1_2', 'plus sign on tx'],
    ['1_+2', 'plus sign on op'],
    ['-1_5', 'negative tx other than -1'],
    ['-1_0', '-1 with an op'],
    ['-0', 'minus zero'],
    ['-2', 'other negative'],
    ['-5_0', 'negative tx'],
    ['1_-2', 'negative op'],
    ['1.5_2', 'decimal tx'],
    ['10_32.1', 'decimal op'],
    ['1e3_0', 'exponent'],
    ['0x1_0', 'hex'],
    ['inf_0', 'inf as tx'],
    ['0_INF', 'upper-case inf'],
    ['0_Inf', 'mixed-case inf'],
    ['0_infinity', 'long inf'],
    ['now', 'now is a request value only'],
    ['18446744073709551616_0', 'tx above u64'],
    ['0_18446744073709551616', 'op above u64'],
    ['123456789012345678901_0', '21 significant digits'],
    ['١_٢', 'non-ASCII digits'],
    ['１_２', 'full-width digits'],
    ['1_2\n', 'trailing newline'],
  ]

  it.each(invalid)('rejects %j (%s)', (text) => {
    expect(() => parseOffset(text)).toThrow(InvalidOffsetError)
  })

  it('reports the input and fits the error table', () => {
    try {
      parseOffset('nope')
      expect.unreachable()
    } catch (error) {
      expect(error).toBeInstanceOf(InvalidOffsetError)
      expect(error).toBeInstanceOf(SluiceError)
      const e = error as InvalidOffsetError
      expect(e.name).toBe('InvalidOffsetError')
      expect(e.code).toBe('invalid_offset')
      expect(e.status).toBe(400)
      expect(e.input).toBe('nope')
      expect(JSON.stringify(e.toBody())).toBe(
        '{"message":"Invalid request","errors":{"offset":["has invalid format"]}}',
      )
    }
  })
})

describe('parseRequestOffset', () => {
  it('accepts now and every offset', () => {
    expect(parseRequestOffset('now')).toBe('now')
    expect(parseRequestOffset('-1')).toBe(BEFORE_ALL)
    expect(parseRequestOffset('3_4')).toEqual({ tx: 3n, op: 4n })
    expect(formatRequestOffset('now')).toBe('now')
    expect(formatRequestOffset({ tx: 3n, op: 4n })).toBe('3_4')
  })

  it.each(['NOW', 'Now', ' now', 'now '])('rejects %j', (text) => {
    expect(() => parseRequestOffset(text)).toThrow(InvalidOffsetError)
  })
})

describe('compareOffsets', () => {
  const ordered = ['-1', '0_0', '0_5', '0_inf', '1_0', '1_inf', '10_2', '9007199254740993_0', '18446744073709551615_inf']

  it('orders -1 < 0_0 < 0_5 < 0_inf < 1_0 < 1_inf < 10_2 < … numerically, not as text', () => {
    const offsets = ordered.map(parseOffset)
    for (let i = 0; i < offsets.length; i++) {
      for (let j = 0; j < offsets.length; j++) {
        const a = offsets[i] as LogOffset
        const b = offsets[j] as LogOffset
        expect(compareOffsets(a, b), `${ordered[i]} vs ${ordered[j]}`).toBe(Math.sign(i - j))
        expect(offsetsEqual(a, b)).toBe(i === j)
      }
    }
    const shuffled = [...offsets].reverse().sort(compareOffsets)
    expect(shuffled.map(formatOffset)).toEqual(ordered)
  })

  it('distinguishes values that collide as Numbers', () => {
    const a = parseOffset('9007199254740992_0')
    const b = parseOffset('9007199254740993_0')
    expect(compareOffsets(a, b)).toBe(-1)
    expect(offsetsEqual(a, b)).toBe(false)
  })
})

describe('predicates and makeOffset', () => {
  it('classifies offsets', () => {
    expect(isBeforeAll(BEFORE_ALL)).toBe(true)
    expect(isBeforeAll(parseOffset('0_0'))).toBe(false)
    expect(isVirtual(parseOffset('0_3'))).toBe(true)
    expect(isVirtual(LAST_VIRTUAL)).toBe(true)
    expect(isVirtual(parseOffset('1_0'))).toBe(false)
    expect(isVirtual(BEFORE_ALL)).toBe(false)
  })

  it('builds valid pairs and refuses the rest', () => {
    expect(makeOffset(-1n, 0n)).toEqual(BEFORE_ALL)
    expect(makeOffset(0n, OP_INF)).toEqual(LAST_VIRTUAL)
    expect(makeOffset(U64_MAX, U64_MAX)).toEqual({ tx: U64_MAX, op: U64_MAX })
    const bad: Array<[bigint, bigint]> = [
      [-1n, 1n],
      [-2n, 0n],
      [0n, -1n],
      [U64_MAX + 1n, 0n],
      [0n, OP_INF + 1n],
    ]
    for (const [tx, op] of bad) expect(() => makeOffset(tx, op)).toThrow(RangeError)
  })
})
