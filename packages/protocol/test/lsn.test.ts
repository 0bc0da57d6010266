import { describe, expect, it } from 'vitest'
import { InvalidLsnError, SluiceError, formatDecimalLsn, formatLsn, parseDecimalLsn, parseLsn } from '../src/index.js'

describe('parseLsn / formatLsn', () => {
  const cases: Array<[string, bigint]> = [
    ['0/0', 0n],
    ['0/1', 1n],
    ['0/16B3F70', 0x16b3f70n],
    ['16/B374D848', (0x16n << 32n) | 0xb374d848n],
    ['1/0', 1n << 32n],
    ['FFFFFFFF/FFFFFFFF', (1n << 64n) - 1n],
    ['7FFFFFFF/FFFFFFFF', (1n << 63n) - 1n],
  ]

  it.each(cases)('round-trips %s', (text, value) => {
    expect(parseLsn(text)).toBe(value)
    expect(formatLsn(value)).toBe(text)
  })

  it.each<[string, bigint]>([
    ['0/016b3f70', 0x16b3f70n], // Postgres 18 pads the low half
    ['00000000/00000000', 0n],
    ['a/b', 0xa0000000bn],
    ['dead/BEEF', (0xdeadn << 32n) | 0xbeefn],
  ])('accepts %s', (text, value) => {
    expect(parseLsn(text)).toBe(value)
  })

  it.each([
    '',
    '/',
    '0/',
    '/0',
    '0',
    '00',
    '0/0/0',
    '123456789/0',
    '0/123456789',
    ' 0/0',
    '0/0 ',
    '0 /0',
    '-1/0',
    '+1/0',
    '0x1/0',
    'G/0',
    '0/g',
    '0_0',
    '１/０',
  ])('rejects %j', (text) => {
    expect(() => parseLsn(text)).toThrow(InvalidLsnError)
  })

  it('refuses to format values outside u64', () => {
    expect(() => formatLsn(-1n)).toThrow(RangeError)
    expect(() => formatLsn(1n << 64n)).toThrow(RangeError)
  })
})

describe('decimal LSNs', () => {
  it.each<[string, bigint]>([
    ['0', 0n],
    ['23790184', 23790184n],
    ['18446744073709551615', (1n << 64n) - 1n],
  ])('round-trips %s', (text, value) => {
    expect(parseDecimalLsn(text)).toBe(value)
    expect(formatDecimalLsn(value)).toBe(text)
  })

  it('accepts leading zeros', () => {
    expect(parseDecimalLsn('007')).toBe(7n)
    expect(parseDecimalLsn('0000000000000000000000018446744073709551615')).toBe((1n << 64n) - 1n)
  })

  it.each(['', '-1', '+1', '1.0', '1e3', ' 1', '1 ', '0x10', '18446744073709551616', '0/0', '１'])(
    'rejects %j',
    (text) => {
      expect(() => parseDecimalLsn(text)).toThrow(InvalidLsnError)
    },
  )

  it('agrees with the Postgres form', () => {
    expect(formatDecimalLsn(parseLsn('16/B374D848'))).toBe('97500059720')
    expect(formatLsn(parseDecimalLsn('97500059720'))).toBe('16/B374D848')
  })

  it('is a typed SluiceError', () => {
    const error = (() => {
      try {
        parseLsn('x')
      } catch (e) {
        return e
      }
      return undefined
    })()
    expect(error).toBeInstanceOf(SluiceError)
    expect(error).toMatchObject({ name: 'InvalidLsnError', code: 'invalid_lsn', input: 'x', status: 500 })
  })
})
