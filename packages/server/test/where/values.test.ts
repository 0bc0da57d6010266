import { describe, expect, it } from 'vitest'
import { parseBool } from '../../src/where/values/bool.js'
import { formatDate, formatTimestamp, parseDate, parseTime, parseTimestamp } from '../../src/where/values/datetime.js'
import { floatToNumeric, formatFloat, parseFloat } from '../../src/where/values/float.js'
import { parseInteger } from '../../src/where/values/integer.js'
import { compareInterval, formatInterval, parseInterval } from '../../src/where/values/interval.js'
import { parseJson, parseJsonb } from '../../src/where/values/json.js'
import { compareNumeric, divide, divScale, formatNumeric, numericKey, parseNumeric } from '../../src/where/values/numeric.js'
import { compareText } from '../../src/where/values/text.js'
import { parseUuid } from '../../src/where/values/uuid.js'

describe('integer input', () => {
  it.each([
    ['int4', ' 42 ', 42],
    ['int4', '+7', 7],
    ['int4', '-2147483648', -2147483648],
    ['int4', '1_000', 1000],
    ['int4', '0x1F', 31],
    ['int8', '9223372036854775807', 9223372036854775807n],
    ['int2', '-32768', -32768],
  ] as const)('%s %j → %s', (type, text, value) => {
    expect(parseInteger(type, text)).toBe(value)
  })
  it.each([
    ['int4', '2147483648', 'value "2147483648" is out of range for type integer'],
    ['int2', '40000', 'value "40000" is out of range for type smallint'],
    ['int4', '1.5', 'invalid input syntax for type integer: "1.5"'],
    ['int4', '', 'invalid input syntax for type integer: ""'],
    ['int4', '_1', 'invalid input syntax for type integer: "_1"'],
    ['int8', '1__0', 'invalid input syntax for type bigint: "1__0"'],
  ] as const)('%s %j is refused', (type, text, message) => {
    expect(() => parseInteger(type, text)).toThrow(message)
  })
})

describe('numeric', () => {
  it.each([
    ['1.50', '1.50'],
    [' -0.000 ', '0.000'],
    ['1e3', '1000'],
    ['1.5e-3', '0.0015'],
    ['.5', '0.5'],
    ['5.', '5'],
    ['NaN', 'NaN'],
    ['-inf', '-Infinity'],
    ['Infinity', 'Infinity'],
    ['123456789012345678901234567890.000000000000000000001', '123456789012345678901234567890.000000000000000000001'],
  ])('%j reads back as %j', (text, printed) => {
    expect(formatNumeric(parseNumeric(text))).toBe(printed)
  })
  it.each(['abc', '1e', '--1', '+NaN', '1 2', '', '1e1001'])('%j is refused', (text) => {
    expect(() => parseNumeric(text)).toThrow(/invalid input syntax for type numeric/)
  })
  it('orders NaN above Infinity, equal to itself', () => {
    const values = ['NaN', 'Infinity', '1e1000', '1', '-1', '-Infinity'].map(parseNumeric)
    const sorted = [...values].sort(compareNumeric).map(formatNumeric)
    expect(sorted[0]).toBe('-Infinity')
    expect(sorted.slice(-2)).toEqual(['Infinity', 'NaN'])
    expect(compareNumeric(parseNumeric('NaN'), parseNumeric('nan'))).toBe(0)
    expect(numericKey(parseNumeric('1.500'))).toBe(numericKey(parseNumeric('1.5')))
  })
  it.each([
    ['1', '3', 20, '0.33333333333333333333'],
    ['1', '7000000', 24, '0.000000142857142857142857'],
    ['1000000', '7', 12, '142857.142857142857'],
    ['2', '3.00000', 20, '0.66666666666666666667'],
    ['12345678901234567890', '3', 0, '4115226300411522630'],
    ['-2', '3', 20, '-0.66666666666666666667'],
  ])('%s / %s has scale %d: %s', (a, b, scale, text) => {
    const x = parseNumeric(a)
    const y = parseNumeric(b)
    expect(divScale(x as never, y as never)).toBe(scale)
    expect(formatNumeric(divide(x, y))).toBe(text)
  })
})

describe('floats', () => {
  it.each([
    ['float8', 1e23, '9.999999999999999e+22'],
    ['float8', 0.1, '0.1'],
    ['float8', 1e15, '1e+15'],
    ['float8', 123456789012345.6, '123456789012345.6'],
    ['float8', 0.0001, '0.0001'],
    ['float8', 0.00001, '1e-05'],
    ['float8', -0, '-0'],
    ['float8', Number.NaN, 'NaN'],
    ['float8', -Infinity, '-Infinity'],
    ['float8', 5e-324, '5e-324'],
    ['float4', Math.fround(1.1), '1.1'],
    ['float4', Math.fround(-81805024), '-8.1805024e+07'],
    ['float4', Math.fround(1e6), '1e+06'],
    ['float4', Math.fround(123456.7), '123456.7'],
    ['float4', Math.fround(16777217), '1.6777216e+07'],
  ] as const)('%s %s prints as %j', (type, value, text) => {
    expect(formatFloat(type, value)).toBe(text)
  })
  it.each([
    ['float8', ' 1.5 ', 1.5],
    ['float8', '-Infinity', -Infinity],
    ['float8', 'inf', Infinity],
    ['float8', '4.9e-324', 5e-324],
    ['float4', '0.1', Math.fround(0.1)],
    ['float4', '16777217', 16777216],
    ['float4', '1.00000005960464477539062500000000001', 1.0000001192092896],
  ] as const)('%s %j reads as %s', (type, text, value) => {
    expect(parseFloat(type, text)).toBe(value)
  })
  it.each([
    ['float8', '1e400', '"1e400" is out of range for type double precision'],
    ['float8', '1e-400', '"1e-400" is out of range for type double precision'],
    ['float4', '1e39', '"1e39" is out of range for type real'],
    ['float8', 'x', 'invalid input syntax for type double precision: "x"'],
  ] as const)('%s %j is refused', (type, text, message) => {
    expect(() => parseFloat(type, text)).toThrow(message)
  })
  it('converts to numeric through %.15g / %.6g, rounding half to even', () => {
    expect(formatNumeric(floatToNumeric(0.1, 15))).toBe('0.1')
    expect(formatNumeric(floatToNumeric(1234567890123445, 15))).toBe('1234567890123440')
    expect(formatNumeric(floatToNumeric(1e20, 15))).toBe('100000000000000000000')
    expect(formatNumeric(floatToNumeric(1.5e-5, 15))).toBe('0.000015')
    expect(formatNumeric(floatToNumeric(Math.fround(1.1), 6))).toBe('1.1')
  })
})

describe('text order is code-point (UTF-8 byte) order', () => {
  it.each([
    ['a', 'b', -1],
    ['B', 'a', -1],
    ['a', 'a ', -1],
    ['\uffff', '𝄞', -1],
    ['é', 'z', 1],
    ['', '', 0],
  ])('%j vs %j', (a, b, sign) => {
    expect(Math.sign(compareText(a, b))).toBe(sign)
  })
})

describe('bool, uuid', () => {
  it.each([
    ['t', true],
    ['TRUE', true],
    [' yes ', true],
    ['on', true],
    ['1', true],
    ['f', false],
    ['of', false],
    ['no', false],
    ['0', false],
  ])('%j is %s', (text, value) => {
    expect(parseBool(text)).toBe(value)
  })
  it.each(['o', 'tru e', '', '2', 'yess'])('%j is not a boolean', (text) => {
    expect(() => parseBool(text)).toThrow('invalid input syntax for type boolean')
  })
  it.each([
    '{A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11}',
    'a0eebc999c0b4ef8bb6d6bb9bd380a11',
    'a0ee-bc99-9c0b-4ef8-bb6d-6bb9-bd38-0a11',
  ])('%j is a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', (text) => {
    expect(parseUuid(text)).toBe('a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11')
  })
  it.each(['a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a1', '{a0eebc999c0b4ef8bb6d6bb9bd380a11', 'a0eeb-c999c0b4ef8bb6d6bb9bd380a11', ' a0eebc999c0b4ef8bb6d6bb9bd380a11'])(
    '%j is not a uuid',
    (text) => {
      expect(() => parseUuid(text)).toThrow('invalid input syntax for type uuid')
    },
  )
})

describe('dates and timestamps', () => {
  it.each([
    ['2024-02-29', '2024-02-29'],
    ['0044-03-15 BC', '0044-03-15 BC'],
    ['4713-11-24 BC', '4713-11-24 BC'],
    ['5874897-12-31', '5874897-12-31'],
    ['epoch', '1970-01-01'],
    ['infinity', 'infinity'],
    ['2024-01-01 23:59:59', '2024-01-01'],
  ])('date %j prints as %j', (text, printed) => {
    expect(formatDate(parseDate(text))).toBe(printed)
  })
  it.each(['2023-02-29', '2024-00-10', '0000-01-01'])('date %j is out of range', (text) => {
    expect(() => parseDate(text)).toThrow('date/time field value out of range')
  })
  it.each([
    ['timestamp', '2024-01-01 12:34:56.789', '2024-01-01 12:34:56.789'],
    ['timestamp', '2024-01-01T12:34:56.000001', '2024-01-01 12:34:56.000001'],
    ['timestamp', '2024-01-01 12:34:56.0000005', '2024-01-01 12:34:56'],
    ['timestamp', '2024-01-01 12:34:56.0000015', '2024-01-01 12:34:56.000002'],
    ['timestamp', '2024-01-01 12:00:00+05', '2024-01-01 12:00:00'],
    ['timestamp', '2024-01-01 24:00:00', '2024-01-02 00:00:00'],
    ['timestamp', '0001-01-01 00:00:00 BC', '0001-01-01 00:00:00 BC'],
    ['timestamptz', '2024-01-01 12:00:00+05:30', '2024-01-01 06:30:00+00'],
    ['timestamptz', '2024-01-01 00:00:00-08', '2024-01-01 08:00:00+00'],
    ['timestamptz', '2024-01-01 00:00:00Z', '2024-01-01 00:00:00+00'],
    ['timestamptz', '2024-01-01', '2024-01-01 00:00:00+00'],
    ['timestamptz', '0044-03-15 12:00:00+00 BC', '0044-03-15 12:00:00+00 BC'],
    ['timestamptz', '-infinity', '-infinity'],
    ['timestamp', '294276-12-31 23:59:59.999999', '294276-12-31 23:59:59.999999'],
  ] as const)('%s %j prints as %j', (type, text, printed) => {
    expect(formatTimestamp(type, parseTimestamp(type, text))).toBe(printed)
  })
  it.each([
    ['timestamp', '294277-01-01 00:00:00', 'timestamp out of range'],
    ['timestamp', '2024-01-01 25:00:00', 'date/time field value out of range'],
    ['timestamptz', '2024-01-01 00:00:00+16', 'time zone displacement out of range'],
    ['timestamp', 'now', 'depends on the current time'],
    ['timestamp', 'Jan 1 2024', 'unsupported timestamp without time zone literal'],
  ] as const)('%s %j is refused (%s)', (type, text, message) => {
    expect(() => parseTimestamp(type, text)).toThrow(message)
  })
  // Postgres raises its own SQLSTATE for date and time input that does not parse (22007), not the 22P02 of other types.
  it.each([
    ['date', () => parseDate('12:00:00'), 'invalid input syntax for type date'],
    ['time', () => parseTime('2024-01-01'), 'invalid input syntax for type time without time zone'],
    ['timestamp', () => parseTimestamp('timestamp', '12:00'), 'invalid input syntax for type timestamp without time zone'],
  ] as const)('%s input that does not parse is invalid_datetime_format', (_type, parse, message) => {
    expect(parse).toThrow(message)
    expect(parse).toThrow(expect.objectContaining({ code: 'invalid_datetime_format' }))
  })
  it('times', () => {
    expect(parseTime('24:00:00')).toBe(86_400_000_000)
    expect(parseTime('allballs')).toBe(0)
    expect(parseTime('12:30')).toBe(45_000_000_000)
  })
})

describe('intervals', () => {
  it.each([
    ['1 day', 'P1D'],
    ['1 mon 2 days 03:04:05.5', 'P1M2DT3H4M5.5S'],
    ['@ 1 hour ago', 'PT-1H'],
    ['-1 day +02:00', 'P-1DT2H'],
    ['P1Y2M3DT4H5M6.000001S', 'P1Y2M3DT4H5M6.000001S'],
    ['PT-0.5S', 'PT-0.5S'],
    ['P1W', 'P7D'],
    ['0', 'PT0S'],
    ['1.5 seconds', 'PT1.5S'],
    ['2 weeks 1 millisecond', 'P14DT0.001S'],
    ['infinity', 'infinity'],
  ])('%j prints as %j', (text, printed) => {
    expect(formatInterval(parseInterval(text))).toBe(printed)
  })
  it('compares by span: a month is 30 days, a day 24 hours', () => {
    expect(compareInterval(parseInterval('1 mon'), parseInterval('30 days'))).toBe(0)
    expect(compareInterval(parseInterval('1 day'), parseInterval('24 hours'))).toBe(0)
    expect(compareInterval(parseInterval('1 day'), parseInterval('23:59:59.999999'))).toBe(1)
    expect(compareInterval(parseInterval('-infinity'), parseInterval('-178000000 years'))).toBe(-1)
  })
  it.each(['1.5 days', 'one day', '1 fortnight'])('%j is not supported', (text) => {
    expect(() => parseInterval(text)).toThrow(/unsupported interval literal/)
  })
})

describe('json and jsonb', () => {
  it.each([
    ['{"b": 1, "a": 2}', '{"a": 2, "b": 1}'],
    ['{"aa": 1, "b": 2}', '{"b": 2, "aa": 1}'],
    ['{"a": 1, "a": 2}', '{"a": 2}'],
    ['[1.50, 1e2, -0, true, null]', '[1.50, 100, 0, true, null]'],
    ['"\\u00e9\\n\\u0001"', '"é\\n\\u0001"'],
    ['  {"x" : [ ] }  ', '{"x": []}'],
  ])('jsonb %j prints as %j', (text, printed) => {
    expect(parseJsonb(text).text).toBe(printed)
  })
  it('compares jsonb numbers as numerics', () => {
    expect(parseJsonb('{"a": [1.0, 2]}').key).toBe(parseJsonb('{"a":[1,2.000]}').key)
    expect(parseJsonb('1').key).not.toBe(parseJsonb('[1]').key)
    expect(parseJsonb('"1"').key).not.toBe(parseJsonb('1').key)
  })
  it.each(['{', '[1,]', '01', '1.', '"\\x"', "{'a': 1}", 'tru', 'nul', '"a', '"\\ud800"', '1 2', '"\t"'])('%j is not JSON', (text) => {
    expect(() => parseJson(text)).toThrow(/invalid input syntax for type json/)
  })
  it('json accepts \\u0000 but jsonb does not', () => {
    expect(parseJson('"\\u0000"')).toBe('"\\u0000"')
    expect(() => parseJsonb('"\\u0000"')).toThrow('unsupported Unicode escape sequence')
  })
})
