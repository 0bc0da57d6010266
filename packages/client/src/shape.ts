import { ShapeStream } from './shape-stream.js'
import type { ShapeStreamOptions } from './stream-options.js'
import { AbortedError, InvalidOptionsError, InvalidTxidError, StorageCodecError, StorageSaveError, SubscriberError } from './errors.js'
import { type Message, isChangeMessage, isControlMessage, isEventMessage } from './messages.js'
import { MemoryShapeStorage, PERSISTED_SHAPE_VERSION, type PersistedShape, type ShapeStorage } from './storage.js'
import { TagTracker } from './tag-tracker.js'
import { type SnapshotVisibility, type Txid, lowXid, snapshotVisibility, toXid8, visibleInSnapshot } from './txid.js'
import type { Row } from './value-parser.js'

/**
 * A shape's rows, materialised from a ShapeStream into a Map keyed by row key
 * and kept current: inserts set, updates merge (a `replica=default` update
 * carries only the key and the changed columns), deletes remove, and a
 * `must-refetch` empties the Map before the new snapshot arrives.
 *
 * Shapes whose where clause has a subquery also follow each row's tags: a
 * `move-out` event removes the rows it takes out of the shape, a `move-in`
 * restores conditions of rows still held, and the rows that enter arrive as
 * the inserts after it (`tag-tracker.ts`). The rows then equal what the where
 * clause selects in Postgres, which a client that ignores the events does not.
 *
 * Subscribers are told at up-to-date points only, when the rows are a
 * consistent picture of the database at one moment (never half a transaction
 * or half a snapshot). Waiting for a txid resolves at the same points.
 */
/**
 * What subscribers get. Both fields show the shape as it is when read, like
 * `Shape.rows`/`Shape.value`: `value` is the live Map, and `rows` is built on
 * first read after a change (read it in the callback to see that update's rows).
 */
export interface ShapeData<T extends Row> {
  readonly rows: readonly T[]
  readonly value: ReadonlyMap<string, T>
}

export interface ShapeOptions {
  /** Persist `(handle, offset, rows)` at each up-to-date; see `storage.ts`. */
  readonly storage?: ShapeStorage
  /** Names the shape in `storage`; derived from the stream's URL and static params when omitted. */
  readonly storageKey?: string
  /** Rows and position loaded from storage (`Shape.open` passes them). */
  readonly initial?: PersistedShape
  /** How many synced txids are remembered for `waitForTxid` (oldest forgotten first). */
  readonly maxRememberedTxids?: number
  /**
   * Told what went wrong beside the stream, which goes on: a `SubscriberError`
   * (a subscriber threw; the other subscribers and the waits are still told)
   * or a `StorageSaveError` (the rows are current, but were not saved).
   * `console.error` by default.
   */
  readonly reportError?: (error: SubscriberError | StorageSaveError) => void
}

export interface OpenShapeOptions extends ShapeStreamOptions {
  /** Default: one process-wide in-memory store. */
  readonly storage?: ShapeStorage
  readonly storageKey?: string
  /** As `ShapeOptions.reportError`. */
  readonly reportError?: (error: SubscriberError | StorageSaveError) => void
}

/** Enough for a busy app's recent writes; each is one small number. */
const DEFAULT_MAX_REMEMBERED_TXIDS = 100_000

const defaultStorage = new MemoryShapeStorage()

interface TxidWaiter {
  readonly xid: Txid
  readonly resolve: () => void
  readonly reject: (error: unknown) => void
}

export class Shape<T extends Row = Row> {
  readonly stream: ShapeStream<T>
  readonly #rows = new Map<string, T>()
  readonly #tags = new TagTracker()
  #rowList: T[] | undefined
  readonly #subscribers = new Set<(data: ShapeData<T>) => void>()
  readonly #storage: ShapeStorage | undefined
  readonly #storageKey: string | undefined
  #upToDate = false
  #lastSyncedAt: number | undefined
  /** 32-bit xids seen in changes, oldest first (a Set keeps insertion order). */
  readonly #txids = new Set<number>()
  /** xids seen since the last up-to-date: confirmed once their transactions are complete. */
  readonly #pendingTxids: number[] = []
  readonly #maxTxids: number
  readonly #reportError: (error: SubscriberError | StorageSaveError) => void
  /**
   * The latest snapshot-end seen (by xmax): a snapshot taken later sees every
   * transaction an earlier one saw, so it answers for all of them, and a
   * subquery shape, which gets one per move-in, keeps one instead of a list
   * that grows for as long as it runs.
   */
  #snapshot: SnapshotVisibility | undefined
  /**
   * Rows changed by batches since the last up-to-date: a response may end
   * without one (a catch-up in chunks), and the one that brings it may hold
   * nothing else, yet subscribers and storage must still hear of the changes.
   */
  #changedSinceHead = false
  readonly #waiters = new Set<TxidWaiter>()
  readonly #readyWaiters = new Set<{ resolve: () => void; reject: (error: unknown) => void }>()
  #error: unknown
  readonly #unsubscribe: () => void
  readonly #unwatch: () => void

  /**
   * Opens a shape, resuming from `storage` when it holds one for this shape
   * (and no `offset` is given: an explicit offset starts there, and the rows
   * are saved as usual): the rows are there at once and the stream continues
   * from the saved offset instead of requesting `-1`.
   */
  static async open<T extends Row = Row>(options: OpenShapeOptions): Promise<Shape<T>> {
    const storage = options.storage ?? defaultStorage
    const storageKey = options.storageKey ?? defaultStorageKey(options)
    const loaded = options.offset === undefined ? await loadOrForget(storage, storageKey) : undefined
    // A record of another format (an older or newer client wrote it) is ignored, whichever storage kept it.
    const initial = loaded?.version === PERSISTED_SHAPE_VERSION ? loaded : undefined
    const stream = new ShapeStream<T>({
      ...options,
      ...(initial === undefined ? {} : { offset: initial.offset, handle: initial.handle }),
    })
    return new Shape<T>(stream, {
      storage,
      storageKey,
      ...(initial === undefined ? {} : { initial }),
      ...(options.reportError === undefined ? {} : { reportError: options.reportError }),
    })
  }

  constructor(stream: ShapeStream<T>, options: ShapeOptions = {}) {
    this.stream = stream
    this.#storage = options.storage
    this.#storageKey = options.storage === undefined ? undefined : (options.storageKey ?? defaultStorageKey(stream.options))
    this.#maxTxids = options.maxRememberedTxids ?? DEFAULT_MAX_REMEMBERED_TXIDS
    this.#reportError = options.reportError ?? reportToConsole
    if (options.initial !== undefined) {
      for (const [key, row] of options.initial.rows) this.#rows.set(key, row as T)
      if (options.initial.tags !== undefined) this.#tags.restore(options.initial.tags)
      this.#lastSyncedAt = options.initial.savedAt
    }
    this.#unsubscribe = stream.subscribe(
      (messages) => this.#process(messages),
      (error) => this.#fail(error),
    )
    // A stream stopped by its caller (this shape's stop(), the stream's own, its signal) tells no
    // subscriber: the waits it leaves behind would never settle.
    this.#unwatch = stream.onStateChange((state) => {
      if (state.kind === 'stopped' && state.reason === 'aborted') this.#abandoned()
    })
  }

  /** The rows, in the order they were first inserted. */
  get rows(): readonly T[] {
    this.#rowList ??= [...this.#rows.values()]
    return this.#rowList
  }

  get value(): ReadonlyMap<string, T> {
    return this.#rows
  }

  get isUpToDate(): boolean {
    return this.#upToDate
  }

  /** When the rows last matched the server's head (or were saved, for rows loaded from storage). */
  get lastSyncedAt(): number | undefined {
    return this.#lastSyncedAt
  }

  get error(): unknown {
    return this.#error
  }

  /** Called with the rows at each up-to-date that changed them; returns an unsubscribe function. */
  subscribe(callback: (data: ShapeData<T>) => void): () => void {
    this.#subscribers.add(callback)
    return () => {
      this.#subscribers.delete(callback)
    }
  }

  /** Resolves once the rows are up to date (at once if they are); rejects if the stream stops with an error. */
  ready(signal?: AbortSignal): Promise<void> {
    if (this.#upToDate) return Promise.resolve()
    if (this.#error !== undefined) return Promise.reject(this.#error)
    if (this.#isAborted()) return Promise.reject(new AbortedError('waiting for the shape'))
    return this.#wait(this.#readyWaiters, signal, 'waiting for the shape')
  }

  /**
   * Resolves once the changes of transaction `txid` are in the rows and the
   * rows are up to date: pass `pg_current_xact_id()` of the transaction that
   * made an optimistic write to know when the synced rows include it.
   * Resolves at once for a transaction already seen or in the snapshot;
   * rejects at once with `InvalidTxidError` for anything that is not a
   * transaction id.
   */
  waitForTxid(txid: Txid, options: { signal?: AbortSignal } = {}): Promise<void> {
    try {
      toXid8(txid)
    } catch (cause) {
      return Promise.reject(new InvalidTxidError(txid, { cause }))
    }
    if (this.#hasSynced(txid)) return Promise.resolve()
    if (this.#error !== undefined) return Promise.reject(this.#error)
    if (this.#isAborted()) return Promise.reject(new AbortedError(`waiting for txid ${String(txid)}`))
    return new Promise<void>((resolve, reject) => {
      const signal = options.signal
      const waiter: TxidWaiter = {
        xid: txid,
        resolve: () => {
          signal?.removeEventListener('abort', onAbort)
          resolve()
        },
        reject: (error) => {
          signal?.removeEventListener('abort', onAbort)
          reject(error)
        },
      }
      const onAbort = (): void => {
        this.#waiters.delete(waiter)
        reject(new AbortedError(`waiting for txid ${String(txid)}`))
      }
      if (signal?.aborted) return onAbort()
      signal?.addEventListener('abort', onAbort, { once: true })
      this.#waiters.add(waiter)
    })
  }

  /** Stops following the stream (and stops the stream itself). */
  async stop(): Promise<void> {
    this.#unsubscribe()
    await this.stream.stop()
  }

  #hasSynced(txid: Txid): boolean {
    if (!this.#upToDate) return false
    if (this.#txids.has(lowXid(txid))) return true
    return this.#snapshot !== undefined && visibleInSnapshot(txid, this.#snapshot)
  }

  async #process(messages: ReadonlyArray<Message<T>>): Promise<void> {
    let reachedHead = false
    let changed = this.#changedSinceHead
    for (const message of messages) {
      if (isChangeMessage(message)) {
        changed = true
        this.#apply(message.key, message.headers.operation, message.value)
        if (message.headers.operation === 'delete') this.#tags.remove(message.key)
        else this.#tags.change(message.key, message.headers, message.headers.operation === 'insert')
        const txids = message.headers.txids
        if (txids !== undefined) for (const xid of txids) this.#pendingTxids.push(xid)
      } else if (isEventMessage(message)) {
        const headers = message.headers
        if (headers.event === 'move-out') {
          for (const key of this.#tags.moveOut(headers.patterns)) changed = this.#rows.delete(key) || changed
        } else if (headers.event === 'move-in') this.#tags.moveIn(headers.patterns)
        // A transaction that touched only the inner table is synced once its move is applied.
        if (headers.txids !== undefined) for (const xid of headers.txids) this.#pendingTxids.push(xid)
      } else if (isControlMessage(message)) {
        const headers = message.headers
        if (headers.control === 'up-to-date') reachedHead = true
        else if (headers.control === 'must-refetch') {
          this.#rows.clear()
          this.#tags.clear()
          this.#upToDate = false
          this.#snapshot = undefined
          changed = true
        } else if (headers.control === 'snapshot-end') this.#snapshot = laterSnapshot(this.#snapshot, snapshotVisibility(headers))
      }
    }
    if (changed) this.#rowList = undefined
    this.#changedSinceHead = changed && !reachedHead
    if (!reachedHead) return
    const first = !this.#upToDate
    this.#upToDate = true
    this.#lastSyncedAt = this.stream.lastSyncedAt ?? Date.now()
    for (const xid of this.#pendingTxids) this.#remember(xid)
    this.#pendingTxids.length = 0
    if (this.#storage !== undefined && this.#storageKey !== undefined && (changed || first)) {
      try {
        await this.#save()
      } catch (cause) {
        // The rows are current; only their copy is stale. Subscribers and waits are still told.
        this.#report(new StorageSaveError(this.#storageKey, { cause }))
      }
    }
    if (changed || first) {
      // `rows` on demand: a subscriber that reads the Map should not pay for a fresh array of every row each time.
      const shape = this
      const data: ShapeData<T> = {
        get rows(): readonly T[] {
          return shape.rows
        },
        value: this.#rows,
      }
      for (const callback of this.#subscribers) {
        try {
          callback(data)
        } catch (cause) {
          this.#report(new SubscriberError({ cause }))
        }
      }
    }
    for (const resolve of this.#readyWaiters) resolve.resolve()
    this.#readyWaiters.clear()
    for (const waiter of this.#waiters) {
      if (this.#hasSynced(waiter.xid)) {
        this.#waiters.delete(waiter)
        waiter.resolve()
      }
    }
  }

  #apply(key: string, operation: 'insert' | 'update' | 'delete', value: T): void {
    switch (operation) {
      case 'insert':
        this.#rows.set(key, value)
        return
      case 'update': {
        const old = this.#rows.get(key)
        this.#rows.set(key, old === undefined ? value : { ...old, ...value })
        return
      }
      case 'delete':
        this.#rows.delete(key)
        return
    }
  }

  #remember(xid: number): void {
    this.#txids.delete(xid)
    this.#txids.add(xid)
    if (this.#txids.size > this.#maxTxids) {
      const oldest = this.#txids.values().next()
      if (oldest.done !== true) this.#txids.delete(oldest.value)
    }
  }

  async #save(): Promise<void> {
    const handle = this.stream.shapeHandle
    if (handle === undefined) return
    await this.#storage!.save(this.#storageKey!, {
      version: PERSISTED_SHAPE_VERSION,
      handle,
      offset: this.stream.lastOffset,
      schema: this.stream.schema,
      rows: [...this.#rows],
      ...(this.#tags.size === 0 ? {} : { tags: this.#tags.persist() }),
      savedAt: this.#lastSyncedAt ?? Date.now(),
    })
  }

  #report(error: SubscriberError | StorageSaveError): void {
    try {
      this.#reportError(error)
    } catch {
      // A reporter that throws has nobody left to tell.
    }
  }

  #isAborted(): boolean {
    const state = this.stream.state
    return state.kind === 'stopped' && state.reason === 'aborted'
  }

  /** The stream was stopped: what waits for rows it will never bring is told so. */
  #abandoned(): void {
    this.#unwatch()
    for (const waiter of this.#readyWaiters) waiter.reject(new AbortedError('waiting for the shape'))
    this.#readyWaiters.clear()
    for (const waiter of this.#waiters) waiter.reject(new AbortedError(`waiting for txid ${String(waiter.xid)}`))
    this.#waiters.clear()
  }

  #fail(error: unknown): void {
    if (!this.stream.isStopped) {
      // This shape's own processing of a batch threw: its rows may hold part of the batch, and
      // going on from them would build on a wrong state, so the shape stops, as for a stream error.
      this.#unwatch()
      this.#unsubscribe()
      void this.stream.stop()
    }
    this.#error = error
    for (const waiter of this.#readyWaiters) waiter.reject(error)
    this.#readyWaiters.clear()
    for (const waiter of this.#waiters) waiter.reject(error)
    this.#waiters.clear()
  }

  #wait(set: Set<{ resolve: () => void; reject: (error: unknown) => void }>, signal: AbortSignal | undefined, what: string): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      const entry = {
        resolve: () => {
          signal?.removeEventListener('abort', onAbort)
          resolve()
        },
        reject: (error: unknown) => {
          signal?.removeEventListener('abort', onAbort)
          reject(error)
        },
      }
      const onAbort = (): void => {
        set.delete(entry)
        reject(new AbortedError(what))
      }
      if (signal?.aborted) return onAbort()
      signal?.addEventListener('abort', onAbort, { once: true })
      set.add(entry)
    })
  }
}

/**
 * A storage key naming the shape: the URL and every static parameter. A
 * parameter given as a function has no fixed value, so such shapes need an
 * explicit `storageKey`.
 */
export function defaultStorageKey(options: ShapeStreamOptions): string {
  const params: Record<string, unknown> = {}
  for (const name of Object.keys(options.params).sort()) {
    const value = options.params[name]
    if (typeof value === 'function') throw new InvalidOptionsError(`params.${name} is a function: give the Shape a storageKey`)
    params[name] = value
  }
  return JSON.stringify([options.url, options.log ?? 'full', params])
}

/** Of two snapshots, the one taken later: the higher xmax, then the higher xmin, then the fewer transactions in progress. */
function laterSnapshot(a: SnapshotVisibility | undefined, b: SnapshotVisibility): SnapshotVisibility {
  if (a === undefined || b.xmax > a.xmax) return b
  if (b.xmax < a.xmax) return a
  if (b.xmin !== a.xmin) return b.xmin > a.xmin ? b : a
  return b.xip.size <= a.xip.size ? b : a
}

function reportToConsole(error: SubscriberError | StorageSaveError): void {
  console.error(error)
}

/**
 * The stored record of a shape, or nothing when there is none or it cannot be
 * decoded (truncated, written by a broken client): an unreadable record is
 * removed, so the shape syncs afresh instead of failing to open on every load.
 */
async function loadOrForget(storage: ShapeStorage, key: string): Promise<PersistedShape | undefined> {
  try {
    return await storage.load(key)
  } catch (error) {
    if (!(error instanceof StorageCodecError)) throw error
    await storage.remove(key)
    return undefined
  }
}
