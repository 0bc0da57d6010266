import { describe, expect, it } from 'vitest'
import { formatArray, parseArray } from '../../src/where/values/array.js'

const text = (s: string): string => s

describe('array literals (array_in)', () => {
  it.each([
    ['{}', [], [], []],
    ['{1,2,3}', [3], [1], ['1', '2', '3']],
    ['  { 1 , 2 }  ', [2], [1], ['1', '2']],
    ['{NULL,null,"NULL",""}', [4], [1], [null, null, 'NULL', '']],
    ['{"a,b","c\\"d","e\\\\f",g\\,h}', [4], [1], ['a,b', 'c"d', 'e\\f', 'g,h']],
    ['{ a b , c }', [2], [1], ['a b', 'c']],
    ['{a\\ ,b}', [2], [1], ['a ', 'b']],
    ['{{1,2},{3,4}}', [2, 2], [1, 1], ['1', '2', '3', '4']],
    ['{{{1},{2}},{{3},{4}}}', [2, 2, 1], [1, 1, 1], ['1', '2', '3', '4']],
    ['[0:2]={a,b,c}', [3], [0], ['a', 'b', 'c']],
    ['[-1:0][1:2]={{1,2},{3,4}}', [2, 2], [-1, 1], ['1', '2', '3', '4']],
    ['[3]={a,b,c}', [3], [1], ['a', 'b', 'c']],
    ['{"{}"}', [1], [1], ['{}']],
    ['{é,𝄞}', [2], [1], ['é', '𝄞']],
  ])('%j', (literal, dims, lbounds, items) => {
    expect(parseArray(literal, text)).toEqual({ dims, lbounds, items })
  })

  it.each([
    ['', 'Array value must start with "{"'],
    ['1,2', 'Array value must start with "{"'],
    ['{1,2', 'Unexpected end of input'],
    ['{1,,2}', 'Unexpected "," character'],
    ['{,}', 'Unexpected "," character'],
    ['{1,2}}', 'Junk after closing right brace'],
    ['{1,2} x', 'Junk after closing right brace'],
    ['{{1,2},3}', 'Unexpected array element'],
    ['{1,{2,3}}', 'Unexpected "{" character'],
    ['{{1,2},{3}}', 'matching dimensions'],
    ['{a"b"}', 'Unexpected """ character'],
    ['{"a"b}', 'Incorrectly quoted array element'],
    ['[1:2]={1,2,3}', 'do not match'],
    ['[2:1]={}', 'upper bound cannot be less than lower bound'],
    ['[1:2]{1,2}', 'Missing "=" after array dimensions'],
    ['{{{{{{{1}}}}}}}', 'exceeds the maximum allowed (6)'],
  ])('%j is refused (%s)', (literal, fragment) => {
    expect(() => parseArray(literal, text)).toThrow(fragment)
  })

  it('applies the element input function and its errors', () => {
    expect(parseArray('{1, 2}', (s) => Number(s))).toEqual({ dims: [2], lbounds: [1], items: [1, 2] })
    expect(() =>
      parseArray('{1,x}', (s) => {
        if (!/^\d+$/.test(s)) throw new Error(`bad ${s}`)
        return s
      }),
    ).toThrow('bad x')
  })

  it('bounds the element count', () => {
    expect(() => parseArray('{1,2,3}', text, 2)).toThrow('more than 2 elements')
  })
})

describe('array output (array_out)', () => {
  it.each([
    ['{}', '{}'],
    ['{1,2,NULL}', '{1,2,NULL}'],
    ['{"a b","",NULL,"NULL","null",x}', '{"a b","",NULL,"NULL","null",x}'],
    ['{"a,b","c\\"d","e\\\\f","{}"}', '{"a,b","c\\"d","e\\\\f","{}"}'],
    ['{{1,2},{3,4}}', '{{1,2},{3,4}}'],
    ['[0:1]={a,b}', '[0:1]={a,b}'],
    ['[1:1][-2:-1]={{a,b}}', '[1:1][-2:-1]={{a,b}}'],
    ['{" a"}', '{" a"}'],
  ])('%j prints as %j', (literal, expected) => {
    expect(formatArray(parseArray(literal, text), text)).toBe(expected)
  })
})
