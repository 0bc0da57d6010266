import type { ColumnSchema } from '@sluice/protocol'
import { describe, expect, it } from 'vitest'
import { InvalidArrayLiteralError, ParserNullValueError, columnParser, createRowParser, parseArrayLiteral } from '../src/index.js'
import { createRowParserInPlace } from '../src/value-parser.js'

const col = (type: string, extra: Partial<ColumnSchema> = {}): ColumnSchema => ({ type, ...extra })

describe('type names that are also names of Object members', () => {
  it('an enum or domain named constructor, toString or __proto__ is text like any type without a parser', () => {
    const schema = { a: col('constructor'), b: col('toString'), c: col('__proto__'), d: col('hasOwnProperty', { dims: 1 }) }
    const row = createRowParser(schema)({ a: 'hello', b: 'x', c: 'y', d: '{p,q}' })
    expect(row).toEqual({ a: 'hello', b: 'x', c: 'y', d: ['p', 'q'] })
    expect(typeof row.a).toBe('string')
    expect(columnParser('a', col('valueOf'))('v')).toBe('v')
  })
})

describe('scalar values by type (docs/protocol.md §7.1)', () => {
  const cases: Array<[string, ColumnSchema, string | null, unknown]> = [
    ['int2', col('int2'), '-32768', -32768],
    ['int4', col('int4'), '2147483647', 2147483647],
    ['float4', col('float4'), '1.5', 1.5],
    ['float8', col('float8'), '4.5', 4.5],
    ['float8 NaN', col('float8'), 'NaN', Number.NaN],
    ['float8 Infinity', col('float8'), 'Infinity', Number.POSITIVE_INFINITY],
    ['float8 -Infinity', col('float8'), '-Infinity', Number.NEGATIVE_INFINITY],
    ['float4 exponent', col('float4'), '1e+30', 1e30],
    ['int8 max', col('int8'), '9223372036854775807', 9223372036854775807n],
    ['int8 min', col('int8'), '-9223372036854775808', -9223372036854775808n],
    ['bool t', col('bool'), 't', true],
    ['bool f', col('bool'), 'f', false],
    ['bool true', col('bool'), 'true', true],
    ['bool false', col('bool'), 'false', false],
    ['json', col('json'), '{"a":[1,2,{"b":null}]}', { a: [1, 2, { b: null }] }],
    ['jsonb', col('jsonb'), '{"foo": "bar"}', { foo: 'bar' }],
    ['jsonb scalar', col('jsonb'), '"s"', 's'],
    ['numeric stays text', col('numeric', { precision: 10, scale: 2 }), '12345678.90', '12345678.90'],
    ['text', col('text'), 'héllo', 'héllo'],
    ['uuid', col('uuid'), '0b0f8d2b-1f0c-4a4e-9d6e-1a2b3c4d5e6f', '0b0f8d2b-1f0c-4a4e-9d6e-1a2b3c4d5e6f'],
    ['timestamptz', col('timestamptz'), '2024-01-02 03:04:05.123456+00', '2024-01-02 03:04:05.123456+00'],
    ['bytea', col('bytea'), '\\x0001fffe', '\\x0001fffe'],
    ['enum', col('mood'), 'meh', 'meh'],
    ['null in nullable int4', col('int4'), null, null],
    ['null in nullable jsonb', col('jsonb'), null, null],
  ]
  for (const [name, schema, text, expected] of cases) {
    it(name, () => {
      expect(columnParser('c', schema)(text)).toEqual(expected)
    })
  }
})

describe('arrays of any dimension', () => {
  const cases: Array<[string, ColumnSchema, string, unknown]> = [
    ['int4[]', col('int4', { dims: 1 }), '{1,2,3}', [1, 2, 3]],
    ['empty', col('int4', { dims: 1 }), '{}', []],
    ['with NULL', col('int4', { dims: 1 }), '{1,NULL,3}', [1, null, 3]],
    ['lower-case null', col('text', { dims: 1 }), '{null,x}', [null, 'x']],
    ['quoted "NULL" is text', col('text', { dims: 1 }), '{"NULL",NULL}', ['NULL', null]],
    ['2-d', col('int4', { dims: 2 }), '{{1,2,3},{4,5,6}}', [[1, 2, 3], [4, 5, 6]]],
    ['3-d', col('int8', { dims: 3 }), '{{{1,2},{3,4}},{{5,6},{7,8}}}', [[[1n, 2n], [3n, 4n]], [[5n, 6n], [7n, 8n]]]],
    ['4-d', col('int2', { dims: 4 }), '{{{{1}}},{{{2}}}}', [[[[1]]], [[[2]]]]],
    ['quoting and escapes', col('text', { dims: 1 }), '{"a b","x\\"y","back\\\\slash","",plain,"c,d","{e}"}', ['a b', 'x"y', 'back\\slash', '', 'plain', 'c,d', '{e}']],
    ['2-d text with quotes', col('text', { dims: 2 }), '{{"a,1",b},{NULL,"}"}}', [['a,1', 'b'], [null, '}']]],
    ['float8[] specials', col('float8', { dims: 1 }), '{Infinity,-Infinity,NaN,1.5}', [Infinity, -Infinity, NaN, 1.5]],
    ['bool[]', col('bool', { dims: 1 }), '{t,f,t}', [true, false, true]],
    ['jsonb[]', col('jsonb', { dims: 1 }), '{"{\\"a\\": 1}","[1, 2]",NULL}', [{ a: 1 }, [1, 2], null]],
    ['composite[]', col('complex', { dims: 1 }), '{"(1.1,2.2)","(3.3,4.4)"}', ['(1.1,2.2)', '(3.3,4.4)']],
    ['domain[]', col('posint', { dims: 1 }), '{5,9,2}', ['5', '9', '2']],
    ['explicit bounds', col('int4', { dims: 1 }), '[0:2]={7,8,9}', [7, 8, 9]],
    ['box[] uses ;', col('box', { dims: 1 }), '{(1,1),(0,0);(2,2),(1,1)}', ['(1,1),(0,0)', '(2,2),(1,1)']],
    ['unicode', col('text', { dims: 1 }), '{"ñ ü",日本}', ['ñ ü', '日本']],
    ['NULL element in a NOT NULL array column', col('int4', { dims: 1, not_null: true }), '{1,NULL}', [1, null]],
  ]
  for (const [name, schema, text, expected] of cases) {
    it(name, () => {
      expect(columnParser('c', schema)(text)).toEqual(expected)
    })
  }

  const bad = ['', '{', '{1,2', '{1,2}x', '1,2', '{"a}', '{a"b}', '{1,,2}', '{{1},2', '[1:2]{1,2}', '{"a\\']
  for (const text of bad) {
    it(`rejects ${JSON.stringify(text)}`, () => {
      expect(() => parseArrayLiteral(text, (t) => t)).toThrow(InvalidArrayLiteralError)
    })
  }
})

describe('not_null', () => {
  it('a null for a not_null column is a ParserNullValueError naming the column', () => {
    const parse = createRowParser({ id: col('int4', { not_null: true, pk_index: 0 }) })
    expect(() => parse({ id: null })).toThrow(ParserNullValueError)
    try {
      parse({ id: null })
    } catch (error) {
      expect((error as ParserNullValueError).code).toBe('null_value')
      expect((error as ParserNullValueError).column).toBe('id')
    }
  })

  it('a null array for a not_null array column is an error too', () => {
    expect(() => columnParser('tags', col('text', { dims: 1, not_null: true }))(null)).toThrow(ParserNullValueError)
  })
})

describe('rows', () => {
  it('columns missing from the schema pass through; custom parsers override by type', () => {
    const parse = createRowParser(
      { id: col('int8'), at: col('timestamptz'), n: col('int4', { dims: 1 }) },
      { timestamptz: (text) => new Date(text.replace(' ', 'T')), int4: (text) => Number(text) * 10 },
    )
    expect(parse({ id: '1', at: '2024-01-02 03:04:05+00', n: '{1,2}', extra: 'x' })).toEqual({
      id: 1n,
      at: new Date('2024-01-02T03:04:05+00'),
      n: [10, 20],
      extra: 'x',
    })
  })

  it('custom parsers receive the column schema (modifiers included)', () => {
    const seen: ColumnSchema[] = []
    const parse = createRowParser({ v: col('varchar', { max_length: 10 }) }, { varchar: (text, column) => (seen.push(column), text) })
    parse({ v: 'x' })
    expect(seen).toEqual([{ type: 'varchar', max_length: 10 }])
  })
})

describe('parsing in place (the stream parses fresh JSON values into the same object)', () => {
  const schema = {
    id: col('int8', { not_null: true }),
    n: col('int4'),
    b: col('bool'),
    doc: col('jsonb'),
    tags: col('text', { dims: 1 }),
    title: col('text', { not_null: true }),
    at: col('timestamptz'),
  }

  it('gives the same row as the copying parser and returns the object it was given', () => {
    const values = { id: '7', n: '-3', b: 't', doc: '{"a": [1]}', tags: '{x,NULL}', title: 'T', at: '2024-01-02 03:04:05+00', extra: 'x' }
    const copied = createRowParser(schema)(values)
    const target: Record<string, unknown> = { ...values }
    const parsed = createRowParserInPlace(schema)(target)
    expect(parsed).toBe(target)
    expect(parsed).toEqual(copied)
    expect(parsed).toEqual({ id: 7n, n: -3, b: true, doc: { a: [1] }, tags: ['x', null], title: 'T', at: '2024-01-02 03:04:05+00', extra: 'x' })
  })

  it('the copying parser leaves the values it was given alone', () => {
    const values = { id: '7', n: '1', title: 'T' }
    createRowParser(schema)(values)
    expect(values).toEqual({ id: '7', n: '1', title: 'T' })
  })

  it('an update carrying some columns: the others stay absent; a null in a not_null text column is still refused', () => {
    expect(createRowParserInPlace(schema)({ id: '1', b: 'f' })).toEqual({ id: 1n, b: false })
    expect(() => createRowParserInPlace(schema)({ id: '1', title: null })).toThrow(ParserNullValueError)
    expect(() => createRowParser(schema)({ id: '1', title: null })).toThrow(ParserNullValueError)
  })

  it('columns named like Object.prototype members are parsed when present and skipped when absent', () => {
    const odd = { constructor: col('int4'), toString: col('bool'), __proto__x: col('int8') }
    expect(createRowParserInPlace(odd)({ constructor: '5' })).toEqual({ constructor: 5 })
    expect(createRowParser(odd)({ toString: 't' })).toEqual({ toString: true })
    const none = createRowParserInPlace(odd)({})
    expect(Object.keys(none)).toEqual([])
  })

  it('a custom parser for a type without a default one (text) is applied', () => {
    expect(createRowParserInPlace({ title: col('text') }, { text: (t) => t.toUpperCase() })({ title: 'abc' })).toEqual({ title: 'ABC' })
  })
})
