import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { UNCHANGED_TOAST } from '../../src/replication/index.js'
import { rowMaker } from '../../src/shapes/row-maker.js'

describe('rowMaker', () => {
  it('names each value by its column, NULL and unchanged TOAST as null', () => {
    const make = rowMaker(['id', 'title', 'note'])
    expect(make(['1', null, UNCHANGED_TOAST])).toEqual({ id: '1', title: null, note: null })
  })

  it('keeps hostile column names as plain keys, never as code', () => {
    const names = ['__proto__', 'constructor', "a'b", 'c"d', 'e\\f', '}); throw 1; ({', '\u2028', 'x\ny', '', 'toString', '1', '-0']
    const make = rowMaker(names)
    const row = make(names.map((_, i) => `v${i}`)) as Record<string, unknown>
    expect(Object.getPrototypeOf(row)).toBe(Object.prototype)
    expect(Object.keys(row).sort()).toEqual([...names].sort())
    names.forEach((name, i) => expect(Object.getOwnPropertyDescriptor(row, name)?.value).toBe(`v${i}`))
  })

  it('gives what filling an object by name gives, for any names and values', () => {
    fc.assert(
      fc.property(fc.uniqueArray(fc.string({ unit: 'binary', maxLength: 12 }), { maxLength: 10 }), fc.array(fc.oneof(fc.string(), fc.constant(null)), { maxLength: 10 }), (names, values) => {
        const tuple = names.map((_, i) => values[i] ?? null)
        const expected: Record<string, string | null> = {}
        names.forEach((name, i) => Object.defineProperty(expected, name, { value: tuple[i], enumerable: true, writable: true, configurable: true }))
        expect(rowMaker(names)(tuple)).toEqual(expected)
      }),
    )
  })
})
