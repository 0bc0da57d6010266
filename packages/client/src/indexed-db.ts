import { InvalidOptionsError } from './errors.js'
import type { PersistedShape, ShapeStorage } from './storage.js'

/**
 * Persists shapes in IndexedDB, one record per shape in one object store.
 * IndexedDB stores values by structured clone, so bigint, NaN, Date and
 * nested JSON need no encoding. Browser only (Node has no IndexedDB); the
 * factory can be passed in for other environments that provide one.
 */
export class IndexedDbShapeStorage implements ShapeStorage {
  readonly #factory: IDBFactory
  readonly #name: string
  #db: Promise<IDBDatabase> | undefined

  constructor(options: { databaseName?: string; indexedDB?: IDBFactory } = {}) {
    const factory = options.indexedDB ?? (globalThis as { indexedDB?: IDBFactory }).indexedDB
    if (factory === undefined) throw new InvalidOptionsError('IndexedDB is not available here; pass options.indexedDB')
    this.#factory = factory
    this.#name = options.databaseName ?? 'sluice-shapes'
  }

  async load(key: string): Promise<PersistedShape | undefined> {
    const value = await this.#run('readonly', (store) => store.get(key))
    return (value as PersistedShape | undefined) ?? undefined
  }

  async save(key: string, shape: PersistedShape): Promise<void> {
    await this.#run('readwrite', (store) => store.put(shape, key))
  }

  async remove(key: string): Promise<void> {
    await this.#run('readwrite', (store) => store.delete(key))
  }

  /** Closes the connection (a later call reopens it). */
  async close(): Promise<void> {
    const db = this.#db
    this.#db = undefined
    if (db !== undefined) (await db).close()
  }

  #open(): Promise<IDBDatabase> {
    this.#db ??= new Promise<IDBDatabase>((resolve, reject) => {
      const request = this.#factory.open(this.#name, DB_VERSION)
      request.onupgradeneeded = () => {
        if (!request.result.objectStoreNames.contains(STORE)) request.result.createObjectStore(STORE)
      }
      request.onsuccess = () => resolve(request.result)
      request.onerror = () => reject(request.error)
    })
    return this.#db
  }

  async #run(mode: IDBTransactionMode, operation: (store: IDBObjectStore) => IDBRequest): Promise<unknown> {
    const db = await this.#open()
    return new Promise((resolve, reject) => {
      const tx = db.transaction(STORE, mode)
      const request = operation(tx.objectStore(STORE))
      // Resolve on commit, not on the request: a write is durable only then.
      tx.oncomplete = () => resolve(request.result)
      tx.onerror = () => reject(tx.error ?? request.error)
      tx.onabort = () => reject(tx.error ?? new Error('IndexedDB transaction aborted'))
    })
  }
}

/** Bump with a migration in `onupgradeneeded` if the store layout ever changes. */
const DB_VERSION = 1
const STORE = 'shapes'
