import { InvalidOptionsError } from './errors.js'
import { decodePersistedShape, encodePersistedShape } from './storage-codec.js'
import type { PersistedShape, ShapeStorage } from './storage.js'

/** The part of the Web Storage API this adapter uses (so any compatible store works). */
export interface StringStorage {
  getItem(key: string): string | null
  setItem(key: string, value: string): void
  removeItem(key: string): void
}

/**
 * Persists shapes in `localStorage` (or any Web Storage): one entry per shape,
 * encoded by `storage-codec.ts` so int8, NaN and dates survive. localStorage is
 * synchronous and holds a few MB per origin: fine for small shapes; prefer
 * IndexedDB for large ones. A full store (`QuotaExceededError`) drops the
 * entry instead of failing the sync: the next load then starts from `-1`.
 */
export class LocalStorageShapeStorage implements ShapeStorage {
  readonly #storage: StringStorage
  readonly #prefix: string

  constructor(options: { storage?: StringStorage; prefix?: string } = {}) {
    const storage = options.storage ?? (globalThis as { localStorage?: StringStorage }).localStorage
    if (storage === undefined) throw new InvalidOptionsError('localStorage is not available here; pass options.storage')
    this.#storage = storage
    this.#prefix = options.prefix ?? 'sluice:shape:'
  }

  async load(key: string): Promise<PersistedShape | undefined> {
    const text = this.#storage.getItem(this.#prefix + key)
    return text === null ? undefined : decodePersistedShape(text)
  }

  async save(key: string, shape: PersistedShape): Promise<void> {
    try {
      this.#storage.setItem(this.#prefix + key, encodePersistedShape(shape))
    } catch (error) {
      if (!isQuotaError(error)) throw error
      this.#storage.removeItem(this.#prefix + key)
    }
  }

  async remove(key: string): Promise<void> {
    this.#storage.removeItem(this.#prefix + key)
  }
}

function isQuotaError(error: unknown): boolean {
  return typeof error === 'object' && error !== null && 'name' in error && (error.name === 'QuotaExceededError' || error.name === 'NS_ERROR_DOM_QUOTA_REACHED')
}
