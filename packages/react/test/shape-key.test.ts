import { InvalidOptionsError, type ShapeStreamOptions } from '@sluice/client'
import { describe, expect, it } from 'vitest'
import { shapeKey } from '../src/index.js'

const url = 'http://sluice/v1/shape'
const key = (options: Partial<ShapeStreamOptions> & { params: ShapeStreamOptions['params']; shapeKey?: string }): string => shapeKey({ url, ...options })

describe('shapeKey', () => {
  const same: Array<[string, Parameters<typeof key>[0], Parameters<typeof key>[0]]> = [
    ['params as array or object', { params: { table: 't', where: 'a = $1 and b = $2', params: ['1', '2'] } }, { params: { table: 't', where: 'a = $1 and b = $2', params: { 2: '2', 1: '1' } } }],
    ['columns in any order', { params: { table: 't', columns: ['b', 'a'] } }, { params: { table: 't', columns: ['a', 'b'] } }],
    ['default replica and log', { params: { table: 't' } }, { params: { table: 't', replica: 'default' }, log: 'full' }],
    ['headers and behaviour options', { params: { table: 't' }, headers: { authorization: 'a' } }, { params: { table: 't' }, headers: { authorization: 'b' }, liveSse: true }],
    ['custom params in any order', { params: { table: 't', tenant: 'x', region: 'y' } }, { params: { region: 'y', table: 't', tenant: 'x' } }],
  ]
  it.each(same)('%s give one key', (_name, a, b) => expect(key(a)).toBe(key(b)))

  const base = { params: { table: 't' } }
  const different: Array<[string, Parameters<typeof key>[0]]> = [
    ['url', { ...base, url: 'http://other/v1/shape' }],
    ['table', { params: { table: 'u' } }],
    ['where', { params: { table: 't', where: 'true' } }],
    ['params values', { params: { table: 't', where: 'a = $1', params: ['2'] } }],
    ['columns', { params: { table: 't', columns: ['a'] } }],
    ['replica', { params: { table: 't', replica: 'full' } }],
    ['log', { ...base, log: 'changes_only' }],
    ['offset', { ...base, offset: 'now' }],
    ['custom param', { params: { table: 't', tenant: 'x' } }],
  ]
  it.each(different)('a different %s gives another key', (_name, other) => expect(key(other)).not.toBe(key(base)))

  it('refuses a function param without an explicit shapeKey, and uses the one given', () => {
    const dynamic = { params: { table: 't', where: () => 'a = 1' } }
    expect(() => key(dynamic)).toThrow(InvalidOptionsError)
    expect(() => key(dynamic)).toThrow(/give useShape a shapeKey/)
    expect(key({ ...dynamic, shapeKey: 'mine' })).toBe(key({ params: { table: 'other' }, shapeKey: 'mine' }))
  })
})
