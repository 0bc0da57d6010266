import { describe, expect, it } from 'vitest'
import { LocalStorageShapeStorage, PERSISTED_SHAPE_VERSION, type PersistedShape, StorageCodecError, decodePersistedShape, encodePersistedShape } from '../src/index.js'

const shape: PersistedShape = {
  version: PERSISTED_SHAPE_VERSION,
  handle: '123-456',
  offset: '2634_4',
  schema: { id: { type: 'int8', pk_index: 0, not_null: true } },
  rows: [
    ['"public"."t"/"1"', { id: 1n, f: Number.NaN, g: Number.POSITIVE_INFINITY, h: Number.NEGATIVE_INFINITY, n: null, arr: [1n, null, [2n]] }],
    ['"public"."t"/"2"', { id: 2n, at: new Date('2024-01-02T03:04:05.678Z'), doc: { '\u0000': 'tricky', nested: { '\u0000': 'bigint', v: '1' } }, sparse: [undefined, 1] }],
  ],
  savedAt: 1700000000000,
}

describe('persisted-shape codec', () => {
  it('round-trips bigint, NaN, ±Infinity, Date, undefined in arrays and objects that look like tags', () => {
    const text = encodePersistedShape(shape)
    expect(decodePersistedShape(text)).toEqual(shape)
  })

  it('another version is ignored, garbage is an error', () => {
    expect(decodePersistedShape(JSON.stringify({ ...shape, rows: [], version: 99 }))).toBeUndefined()
    expect(() => decodePersistedShape('{nope')).toThrow(StorageCodecError)
    expect(() => decodePersistedShape('{"version":1}')).toThrow(StorageCodecError)
  })
})

/** A real Web Storage-shaped store with a byte quota, as browsers have. */
class QuotaStorage {
  readonly items = new Map<string, string>()
  constructor(private readonly quota: number) {}
  getItem(key: string): string | null {
    return this.items.get(key) ?? null
  }
  setItem(key: string, value: string): void {
    const used = [...this.items].reduce((n, [k, v]) => n + (k === key ? 0 : k.length + v.length), 0)
    if (used + key.length + value.length > this.quota) throw Object.assign(new Error('quota'), { name: 'QuotaExceededError' })
    this.items.set(key, value)
  }
  removeItem(key: string): void {
    this.items.delete(key)
  }
}

describe('LocalStorageShapeStorage', () => {
  it('saves, loads and removes under a prefix', async () => {
    const backing = new QuotaStorage(1_000_000)
    const storage = new LocalStorageShapeStorage({ storage: backing, prefix: 'p:' })
    await storage.save('k', shape)
    expect([...backing.items.keys()]).toEqual(['p:k'])
    expect(await storage.load('k')).toEqual(shape)
    await storage.remove('k')
    expect(await storage.load('k')).toBeUndefined()
  })

  it('a full store drops the entry rather than failing the sync', async () => {
    const backing = new QuotaStorage(50)
    const storage = new LocalStorageShapeStorage({ storage: backing })
    await storage.save('k', shape)
    expect(await storage.load('k')).toBeUndefined()
  })
})
