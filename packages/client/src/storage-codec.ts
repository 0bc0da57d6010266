import { StorageCodecError } from './errors.js'
import { PERSISTED_SHAPE_VERSION, type PersistedShape } from './storage.js'

/**
 * Persisted shapes as text, for string-only stores (localStorage). JSON loses
 * what parsed rows hold: bigint (int8), NaN and ±Infinity (floats), Date (a
 * custom parser's output) and `undefined`. Those become tagged objects,
 *
 *   {"\u0000":"bigint","v":"123"}   {"\u0000":"number","v":"NaN"}
 *   {"\u0000":"date","v":"2024-…Z"} {"\u0000":"undefined"}
 *
 * and a real object that happens to have a "\u0000" key is wrapped as
 * {"\u0000":"object","v":{…}}, so decoding is exact for any input.
 */
const TAG = '\u0000'

export function encodePersistedShape(shape: PersistedShape): string {
  return JSON.stringify(shape, function (this: Record<string, unknown>, key, value: unknown) {
    const raw = this[key]
    if (raw instanceof Date) return { [TAG]: 'date', v: raw.toISOString() }
    if (typeof value === 'bigint') return { [TAG]: 'bigint', v: value.toString() }
    if (typeof value === 'number' && !Number.isFinite(value)) return { [TAG]: 'number', v: String(value) }
    if (value === undefined && Array.isArray(this)) return { [TAG]: 'undefined' }
    if (typeof value === 'object' && value !== null && !Array.isArray(value) && Object.hasOwn(value, TAG) && !wrapped.has(value)) {
      // The copy is visited next, as the wrapper's `v`: it must not be wrapped again.
      const copy = { ...value }
      wrapped.add(copy)
      return { [TAG]: 'object', v: copy }
    }
    return value
  })
}

const wrapped = new WeakSet<object>()

export function decodePersistedShape(text: string): PersistedShape | undefined {
  let raw: unknown
  try {
    raw = JSON.parse(text)
  } catch (cause) {
    throw new StorageCodecError('persisted shape is not readable', { cause })
  }
  if (typeof raw !== 'object' || raw === null) throw new StorageCodecError('persisted shape is not an object')
  // An older or newer format (another client version, in another tab, may use it): start afresh rather than
  // guess, before reviving values whose tags this version may not know, and leave the record to its writer.
  if ((raw as { version?: unknown }).version !== PERSISTED_SHAPE_VERSION) return undefined
  let parsed: unknown
  try {
    parsed = revive(raw)
  } catch (cause) {
    throw new StorageCodecError('persisted shape is not readable', { cause })
  }
  const record = parsed as Partial<PersistedShape>
  if (typeof record.handle !== 'string' || typeof record.offset !== 'string' || !Array.isArray(record.rows)) {
    throw new StorageCodecError('persisted shape lacks handle, offset or rows')
  }
  return record as PersistedShape
}

/** Top-down, so the inside of an `object` wrapper is never mistaken for a tag. */
function revive(value: unknown): unknown {
  if (typeof value !== 'object' || value === null) return value
  if (Array.isArray(value)) return value.map(revive)
  const record = value as Record<string, unknown>
  if (!Object.hasOwn(record, TAG)) return reviveFields(record)
  const v = record.v
  switch (record[TAG]) {
    case 'bigint':
      return BigInt(v as string)
    case 'number':
      return Number(v)
    case 'date':
      return new Date(v as string)
    case 'undefined':
      return undefined
    case 'object':
      return reviveFields(v as Record<string, unknown>)
    default:
      throw new StorageCodecError(`unknown tag ${JSON.stringify(record[TAG])}`)
  }
}

function reviveFields(record: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = {}
  for (const [key, field] of Object.entries(record)) out[key] = revive(field)
  return out
}
