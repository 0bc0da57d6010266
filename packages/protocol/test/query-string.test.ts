import { describe, expect, it } from 'vitest'
import { type QueryObject, decodeQueryString } from '../src/index.js'

// Decoded objects have no prototype; compare them as plain data.
const plain = (value: QueryObject): unknown => JSON.parse(JSON.stringify(value))

describe('decodeQueryString', () => {
  const cases: Array<[string, string, unknown]> = [
    ['empty', '', {}],
    ['only a question mark', '?', {}],
    ['leading question mark', '?a=1', { a: '1' }],
    ['plain pairs', 'table=items&offset=-1', { table: 'items', offset: '-1' }],
    ['last plain key wins', 'a=1&a=2', { a: '2' }],
    ['key without =', 'live&offset=0_0', { live: '', offset: '0_0' }],
    ['empty value', 'live=', { live: '' }],
    ['empty segments skipped', '&&a=1&&', { a: '1' }],
    ['= inside a value', 'where=a%20=%201&x=a=b', { where: 'a = 1', x: 'a=b' }],
    ['plus is a space', 'where=a+%2B+b', { where: 'a + b' }],
    ['brackets', 'params[1]=a&params[2]=b', { params: { 1: 'a', 2: 'b' } }],
    ['encoded brackets (what the client sends)', 'params%5B1%5D=a&params%5B2%5D=b', { params: { 1: 'a', 2: 'b' } }],
    ['bracket values decoded', 'params[1]=%E2%82%AC%20x', { params: { 1: '€ x' } }],
    ['list', 'c[]=a&c[]=b', { c: ['a', 'b'] }],
    ['deep', 'p[a][b]=x', { p: { a: { b: 'x' } } }],
    ['later string replaces map', 'p[1]=x&p=y', { p: 'y' }],
    ['later map replaces string', 'p=y&p[1]=x', { p: { 1: 'x' } }],
    ['repeated bracket key: last wins', 'p[1]=x&p[1]=y', { p: { 1: 'y' } }],
    ['unclosed bracket kept whole', 'p[1=x', { 'p[1': 'x' }],
    ['stray close kept whole', 'p]=x', { 'p]': 'x' }],
    ['trailing text kept whole', 'p[1]x=y', { 'p[1]x': 'y' }],
    ['leading bracket kept whole', '[1]=x', { '[1]': 'x' }],
    ['empty key skipped', '=x&a=1', { a: '1' }],
    ['bad escape stays literal', 'where=100%&a=%zz', { where: '100%', a: '%zz' }],
    ['invalid UTF-8 becomes U+FFFD', 'a=%FF%41', { a: '\uFFFDA' }],
    ['mixed valid and invalid escapes', 'a=%E2%82%AC%G1', { a: '€%G1' }],
    ['quoted table', 'table=some_schema.%22issues%20for%20x_0_abc%22', { table: 'some_schema."issues for x_0_abc"' }],
  ]

  it.each(cases)('%s', (_name, query, expected) => {
    expect(plain(decodeQueryString(query))).toEqual(expected)
  })

  it('treats __proto__ and constructor as data', () => {
    const decoded = decodeQueryString('__proto__[x]=1&constructor=2&toString=3')
    expect(Object.getPrototypeOf(decoded)).toBeNull()
    expect(Object.keys(decoded)).toEqual(['__proto__', 'constructor', 'toString'])
    expect(plain(decoded['__proto__'] as QueryObject)).toEqual({ x: '1' })
    expect(decoded['constructor']).toBe('2')
    expect(({} as Record<string, unknown>)['x']).toBeUndefined()
  })
})
