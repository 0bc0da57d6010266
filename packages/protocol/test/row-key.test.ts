import { describe, expect, it } from 'vitest'
import { type RowValues, buildRowKey, rowKeyFromValue, rowKeyFromValues, rowKeyPrefix } from '../src/index.js'
import { compareCodePoints } from '../src/row-key.js'

const rel = (schema: string, name: string) => ({ schema, name })

describe('buildRowKey', () => {
  const cases: Array<[string, { schema: string; name: string }, RowValues, string[], string]> = [
    ['single pk', rel('public', 'items'), { id: '1', t: 'x' }, ['id'], '"public"."items"/"1"'],
    ['pk order, not column order', rel('hello', 'world'), { c: 'd', a: 'b' }, ['a', 'c'], '"hello"."world"/"b"/"d"'],
    ['pk order reversed', rel('hello', 'world'), { a: 'b', c: 'd' }, ['c', 'a'], '"hello"."world"/"d"/"b"'],
    ['slash doubled in a value', rel('hello', 'world'), { a: 'test/test', c: 'test' }, ['a', 'c'], '"hello"."world"/"test//test"/"test"'],
    ['quotes in a value left alone', rel('s', 't'), { id: 'say "hi"' }, ['id'], '"s"."t"/"say "hi""'],
    ['empty string is quoted', rel('s', 't'), { id: '' }, ['id'], '"s"."t"/""'],
    ['null is a bare underscore', rel('s', 't'), { a: '1', b: null }, ['a', 'b'], '"s"."t"/"1"/_'],
    ['the string "_" is quoted', rel('s', 't'), { a: '_' }, ['a'], '"s"."t"/"_"'],
    ['no pk: all columns by name', rel('hello', 'world'), { c: 'd', a: 'b' }, [], '"hello"."world"/"b"/"d"'],
    ['no pk with null', rel('hello', 'world'), { a: '1', b: null, c: '2' }, [], '"hello"."world"/"1"/_/"2"'],
    ['no pk with empty', rel('hello', 'world'), { a: '1', b: '', c: '2' }, [], '"hello"."world"/"1"/""/"2"'],
    ['dot in schema doubled', rel('a".\"b', 'c'), { a: '' }, [], '"a"..\"b"."c"/""'],
    ['dot in table doubled', rel('a', 'b".\"c'), { a: '' }, [], '"a"."b"..\"c"/""'],
    ['slash in table doubled', rel('a', 'b"/\"'), { a: '' }, [], '"a"."b"//\""/""'],
    ['two empty columns', rel('a', 'b'), { a: '', b: '' }, [], '"a"."b"/""/""'],
    ['spaces kept', rel('electric_test', 'issues for x'), { id: '0a1b' }, ['id'], '"electric_test"."issues for x"/"0a1b"'],
    ['unicode kept', rel('public', 'Ümläut'), { id: '€/€' }, ['id'], '"public"."Ümläut"/"€//€"'],
  ]

  it.each(cases)('%s', (_name, relation, record, pk, expected) => {
    expect(buildRowKey(relation, record, pk)).toBe(expected)
  })

  it('matches the prefix + values path', () => {
    const prefix = rowKeyPrefix(rel('x.y', 'a/b'))
    expect(prefix).toBe('"x..y"."a//b"')
    expect(rowKeyFromValues(prefix, ['1', null, 'a/b'])).toBe('"x..y"."a//b"/"1"/_/"a//b"')
    expect(rowKeyFromValues(prefix, [])).toBe(prefix)
  })

  it.each([['1'], [null], ['a/b'], ['//'], ['_'], [''], ['"q"'], ['€/😀']])('builds the one-value key of %j as the list path does', (value) => {
    const prefix = rowKeyPrefix(rel('s', 't'))
    expect(rowKeyFromValue(prefix, value)).toBe(rowKeyFromValues(prefix, [value]))
  })

  it('orders pk-less columns by code point, as Elixir sorts binaries', () => {
    // U+FF21 (BMP, after the surrogate block) sorts before U+1F600 (astral) by code point,
    // but after it in UTF-16 code units.
    const record = { '\u{1F600}': 'astral', '\uFF21': 'bmp', B: 'upper', a: 'lower' }
    expect(buildRowKey(rel('s', 't'), record, [])).toBe('"s"."t"/"upper"/"lower"/"bmp"/"astral"')
  })

  it('refuses a record missing a key column', () => {
    expect(() => buildRowKey(rel('s', 't'), { a: '1' }, ['id'])).toThrow(/id/)
  })
})

describe('compareCodePoints', () => {
  it.each<[string, string, number]>([
    ['a', 'b', -1],
    ['b', 'a', 1],
    ['a', 'a', 0],
    ['a', 'ab', -1],
    ['', 'a', -1],
    ['Z', 'a', -1],
    ['\uFF21', '\u{1F600}', -1],
    ['\u{1F600}', '\uFF21', 1],
    ['\u{1F600}', '\u{1F601}', -1],
    ['\u0100', '\u{10000}', -1],
  ])('%j vs %j', (a, b, sign) => {
    expect(Math.sign(compareCodePoints(a, b))).toBe(sign)
  })
})
