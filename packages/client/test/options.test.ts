import { describe, expect, it } from 'vitest'
import { InvalidOptionsError, ShapeStream, defaultStorageKey } from '../src/index.js'

describe('options that cannot work are refused at construction', () => {
  const url = 'http://127.0.0.1:1/v1/shape'

  it('a query parameter the stream owns', () => {
    for (const name of ['offset', 'handle', 'live', 'cursor', 'log', 'live_sse', 'cache-buster']) {
      expect(() => new ShapeStream({ url, params: { table: 't', [name]: 'x' } }), name).toThrow(InvalidOptionsError)
    }
  })

  it('an offset without the handle it belongs to', () => {
    expect(() => new ShapeStream({ url, params: { table: 't' }, offset: '10_2' })).toThrow(InvalidOptionsError)
    expect(() => new ShapeStream({ url, params: { table: 't' }, offset: 'now' })).not.toThrow()
    expect(new ShapeStream({ url, params: { table: 't' }, offset: '10_2', handle: 'h' }).state).toMatchObject({ offset: '10_2', handle: 'h' })
  })

  it('a storage key for a shape with a function-valued param must be given', () => {
    expect(() => defaultStorageKey({ url, params: { table: 't', where: () => 'x = 1' } })).toThrow(InvalidOptionsError)
    // Static params name the shape, whatever their order.
    expect(defaultStorageKey({ url, params: { table: 't', where: 'a = 1' } })).toBe(defaultStorageKey({ url, params: { where: 'a = 1', table: 't' } }))
    expect(defaultStorageKey({ url, params: { table: 't' }, log: 'changes_only' })).not.toBe(defaultStorageKey({ url, params: { table: 't' } }))
  })
})
