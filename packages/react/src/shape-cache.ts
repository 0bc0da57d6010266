import { InvalidOptionsError, Shape, ShapeStream, type Row, type ShapeStorage, type ShapeStreamOptions, type Txid } from '@sluice/client'
import { shapeKey } from './shape-key.js'

/** How long a shape nobody uses stays open: long enough to survive StrictMode, a route change and back. */
export const DEFAULT_GC_TIME_MS = 5_000

/** The clock for the grace period (a port, so tests and odd hosts can supply their own). */
export interface GcTimers {
  setTimeout(callback: () => void, ms: number): unknown
  clearTimeout(handle: unknown): void
}

const realGcTimers: GcTimers = {
  setTimeout(callback, ms) {
    const handle = setTimeout(callback, ms) as unknown as { unref?: () => void }
    // A shape waiting to be closed must not keep a server-rendering Node process alive.
    handle.unref?.()
    return handle
  },
  clearTimeout: (handle) => clearTimeout(handle as ReturnType<typeof setTimeout>),
}

export interface ShapeCacheOptions {
  /** Grace period after the last subscriber leaves before the shape is stopped. `Infinity`: never. */
  readonly gcTimeMs?: number
  /**
   * Stream options under every shape's own (fetch, headers, backoff…). Not
   * `params` (every shape gives its own) nor `signal` (a stream is shared).
   */
  readonly defaults?: Partial<Omit<ShapeStreamOptions, 'params' | 'signal'>>
  /** Where shapes are saved and resumed from; none by default. */
  readonly storage?: ShapeStorage
  readonly timers?: GcTimers
}

/**
 * A shape's stream options, without `signal`: the stream is shared by every
 * component using the shape, so one component's signal would stop it for all;
 * a component lets go of a shape by unmounting.
 */
export interface UseShapeOptions extends Omit<ShapeStreamOptions, 'signal'> {
  /** Use this cache instead of the provider's. */
  readonly cache?: ShapeCache
  /** The shape's identity when it cannot be derived (a param given as a function). */
  readonly shapeKey?: string
}

/** What a component renders from: immutable, replaced (never mutated) when the shape changes. */
export interface ShapeSnapshot<T extends Row = Row> {
  readonly rows: readonly T[]
  readonly isLoading: boolean
  readonly isError: boolean
  readonly error: unknown
  readonly lastSyncedAt: number | undefined
  readonly shape: Shape<T> | undefined
  readonly stream: ShapeStream<T> | undefined
}

/** Before a shape starts, and always on the server. */
export const LOADING_SNAPSHOT: ShapeSnapshot<Row> = Object.freeze({
  rows: Object.freeze([]) as readonly Row[],
  isLoading: true,
  isError: false,
  error: undefined,
  lastSyncedAt: undefined,
  shape: undefined,
  stream: undefined,
})

/** A cache used after `close()`. */
export class ShapeCacheClosedError extends Error {
  readonly code = 'cache_closed'
  constructor() {
    super('the ShapeCache was closed: give the tree a new cache (a cache per session)')
    this.name = 'ShapeCacheClosedError'
  }
}

/** What every key of a closed cache renders: no rows, and the error saying why. */
const CLOSED_SNAPSHOT: ShapeSnapshot<Row> = Object.freeze({ ...LOADING_SNAPSHOT, isLoading: false, isError: true, error: new ShapeCacheClosedError() })

/** The loading snapshot at any row type (it holds no rows, so it is every type's). */
export function loadingSnapshot<T extends Row>(): ShapeSnapshot<T> {
  return LOADING_SNAPSHOT as unknown as ShapeSnapshot<T>
}

/**
 * One shape in the cache. `holders` counts everything keeping it open (mounted
 * hooks, preloads, txid waits); at zero a timer starts, and the entry is
 * closed and forgotten when it fires with still nobody holding it.
 */
class Entry {
  snapshot: ShapeSnapshot<Row> = LOADING_SNAPSHOT
  holders = 0
  readonly listeners = new Set<() => void>()
  gcTimer: unknown = undefined
  closed = false
  shape: Shape<Row> | undefined
  readonly detach: Array<() => void> = []
  started!: Promise<Shape<Row>>

  constructor(readonly key: string) {}

  publish(snapshot: ShapeSnapshot<Row>): void {
    this.snapshot = snapshot
    for (const listener of [...this.listeners]) listener()
  }
}

/**
 * Owns shapes for React: one `Shape` (and stream) per shape key, shared by
 * every subscriber, started by the first and stopped a grace period after the
 * last leaves. Create one per app (or per test, per session) and hand it down
 * with `ShapeCacheProvider`.
 */
export class ShapeCache {
  readonly #entries = new Map<string, Entry>()
  readonly #gcTimeMs: number
  readonly #defaults: Partial<ShapeStreamOptions>
  readonly #storage: ShapeStorage | undefined
  readonly #timers: GcTimers
  #closed = false

  constructor(options: ShapeCacheOptions = {}) {
    this.#gcTimeMs = options.gcTimeMs ?? DEFAULT_GC_TIME_MS
    this.#defaults = definedOnly(options.defaults ?? {})
    this.#storage = options.storage
    this.#timers = options.timers ?? realGcTimers
  }

  /** The shape key of these options over the cache's defaults (a default `log`, say, is part of it). */
  keyOf(options: UseShapeOptions): string {
    return shapeKey(this.#streamOptions(options))
  }

  get size(): number {
    return this.#entries.size
  }

  /** The started shape for these options, if the cache holds one. */
  get<T extends Row = Row>(options: UseShapeOptions): Shape<T> | undefined {
    return this.#entries.get(this.keyOf(options))?.shape as Shape<T> | undefined
  }

  snapshot<T extends Row = Row>(options: UseShapeOptions): ShapeSnapshot<T> {
    return this.snapshotOfKey<T>(this.keyOf(options))
  }

  /** Never starts anything: safe to call while rendering. */
  snapshotOfKey<T extends Row = Row>(key: string): ShapeSnapshot<T> {
    if (this.#closed) return CLOSED_SNAPSHOT as unknown as ShapeSnapshot<T>
    return (this.#entries.get(key)?.snapshot as ShapeSnapshot<T> | undefined) ?? loadingSnapshot<T>()
  }

  /**
   * Holds the shape (starting it if needed) and calls `onChange` at each new
   * snapshot; returns the release. On a closed cache nothing starts: the
   * snapshot says the cache is closed.
   */
  subscribe(options: UseShapeOptions, onChange: () => void): () => void {
    if (this.#closed) return () => {}
    const entry = this.#acquire(options)
    entry.listeners.add(onChange)
    let released = false
    return () => {
      if (released) return
      released = true
      entry.listeners.delete(onChange)
      this.#release(entry)
    }
  }

  /**
   * Starts the shape (or joins it) and resolves with it once up to date; the
   * signal gives up the wait (the shape then waits its grace period, as after
   * any preload).
   */
  async preload<T extends Row = Row>(options: UseShapeOptions, { signal }: { signal?: AbortSignal } = {}): Promise<Shape<T>> {
    if (this.#closed) throw new ShapeCacheClosedError()
    const entry = this.#acquire(options)
    try {
      const shape = await entry.started
      await shape.ready(signal)
      return shape as unknown as Shape<T>
    } finally {
      this.#release(entry)
    }
  }

  /**
   * Resolves once the shape's synced rows include transaction `txid`; holds
   * the shape meanwhile. A transaction that changes no row of the shape never
   * arrives in it: bound the wait with a signal (`AbortSignal.timeout(…)`).
   */
  async waitForTxid(options: UseShapeOptions, txid: Txid, { signal }: { signal?: AbortSignal } = {}): Promise<void> {
    if (this.#closed) throw new ShapeCacheClosedError()
    const entry = this.#acquire(options)
    try {
      const shape = await entry.started
      await shape.waitForTxid(txid, signal === undefined ? {} : { signal })
    } finally {
      this.#release(entry)
    }
  }

  /**
   * Stops every shape now, held or not, for good (a test's end, a logout):
   * mounted components render `ShapeCacheClosedError` with no rows, and
   * whatever asks this cache for a shape afterwards gets that error.
   */
  async close(): Promise<void> {
    this.#closed = true
    const entries = [...this.#entries.values()]
    for (const entry of entries) entry.publish(CLOSED_SNAPSHOT)
    await Promise.all(entries.map((entry) => this.#close(entry)))
  }

  #acquire(options: UseShapeOptions): Entry {
    const key = this.keyOf(options)
    let entry = this.#entries.get(key)
    if (entry === undefined) {
      entry = new Entry(key)
      this.#entries.set(key, entry)
      this.#start(entry, options)
    }
    entry.holders++
    if (entry.gcTimer !== undefined) {
      this.#timers.clearTimeout(entry.gcTimer)
      entry.gcTimer = undefined
    }
    return entry
  }

  #release(entry: Entry): void {
    entry.holders--
    if (entry.holders > 0 || entry.closed || this.#gcTimeMs === Infinity) return
    entry.gcTimer = this.#timers.setTimeout(() => {
      entry.gcTimer = undefined
      if (entry.holders === 0) void this.#close(entry)
    }, this.#gcTimeMs)
  }

  /** The shape's own options over the defaults; an own option left undefined does not hide its default. */
  #streamOptions(options: UseShapeOptions): ShapeStreamOptions & { shapeKey?: string } {
    if ((options as { signal?: unknown }).signal !== undefined) {
      throw new InvalidOptionsError('useShape options take no signal: the stream is shared by every component using the shape; unmounting lets go of it')
    }
    const { cache: _cache, ...own } = options
    return { ...this.#defaults, ...definedOnly(own) }
  }

  #start(entry: Entry, options: UseShapeOptions): void {
    const { shapeKey: _shapeKey, ...streamOptions } = this.#streamOptions(options)
    if (this.#storage === undefined) {
      try {
        const shape = new Shape(new ShapeStream(streamOptions))
        this.#attach(entry, shape)
        entry.started = Promise.resolve(shape)
      } catch (error) {
        this.#failToStart(entry, error)
      }
      return
    }
    // Loading a saved shape is asynchronous; the entry renders as loading meanwhile.
    entry.started = Shape.open({ ...streamOptions, storage: this.#storage, storageKey: entry.key }).then(
      async (shape) => {
        if (entry.closed) {
          await shape.stop()
          throw new Error('the shape was closed while it was being opened')
        }
        this.#attach(entry, shape)
        return shape
      },
      (error: unknown) => {
        if (!entry.closed) entry.publish(failedSnapshot(error))
        throw error
      },
    )
    // Nobody may be waiting on it; the snapshot carries the error to the components.
    entry.started.catch(() => {})
  }

  #failToStart(entry: Entry, error: unknown): void {
    entry.started = Promise.reject(error)
    entry.started.catch(() => {})
    entry.publish(failedSnapshot(error))
  }

  #attach(entry: Entry, shape: Shape<Row>): void {
    entry.shape = shape
    const update = (): void => {
      if (!entry.closed) entry.publish(snapshotOf(shape))
    }
    entry.detach.push(shape.subscribe(update))
    entry.detach.push(
      shape.stream.onStateChange((state) => {
        if (state.kind === 'stopped') update()
      }),
    )
    update()
  }

  async #close(entry: Entry): Promise<void> {
    if (entry.closed) return
    entry.closed = true
    if (entry.gcTimer !== undefined) this.#timers.clearTimeout(entry.gcTimer)
    if (this.#entries.get(entry.key) === entry) this.#entries.delete(entry.key)
    for (const detach of entry.detach) detach()
    entry.listeners.clear()
    const shape = entry.shape ?? (await entry.started.catch(() => undefined))
    await shape?.stop()
  }
}

function definedOnly<T extends object>(options: T): T {
  const out: Record<string, unknown> = {}
  for (const [name, value] of Object.entries(options)) if (value !== undefined) out[name] = value
  return out as T
}

function failedSnapshot(error: unknown): ShapeSnapshot<Row> {
  return { ...LOADING_SNAPSHOT, isLoading: false, isError: true, error }
}

function snapshotOf(shape: Shape<Row>): ShapeSnapshot<Row> {
  const error = shape.stream.error
  return {
    rows: shape.rows,
    isLoading: !shape.isUpToDate && error === undefined,
    isError: error !== undefined,
    error,
    lastSyncedAt: shape.lastSyncedAt,
    shape,
    stream: shape.stream,
  }
}
