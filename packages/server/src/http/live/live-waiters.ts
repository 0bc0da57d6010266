/**
 * Live waiters: long-polls and SSE streams parked until their shape's durable
 * data moves (docs/protocol.md §4.4).
 *
 * Waking
 * ------
 * One `store.onFlush` listener for the whole process, registered while anyone
 * waits. Each flush names the logs whose published head moved (`advanced`);
 * the waiters of exactly those shapes resolve with `'advanced'`. Nothing
 * polls: a waiter costs nothing until its shape advances or its deadline
 * passes. While nobody waits the listener is off: finding which logs moved
 * costs the store a visit to every log appended since the last flush, which
 * with many busy shapes is a visible share of the pipeline's main thread.
 *
 * A flush that advances many shapes (one write into thousands of overlapping
 * shapes) wakes its waiters in slices of about `wakeSlice` (default 256), one
 * slice per turn of the event loop (`setImmediate`), in the order the flush
 * named the shapes. A slice ends only between shapes: the waiters of one
 * shape wake in the same turn, so they share one read of the new entries
 * (`SharedReads` keeps a read for a turn), however many they are. Woken all
 * at once, their continuations would run breadth-first as one stretch of
 * microtasks, each step of every response before the next step of any, so
 * the first client would get its response only when the last one was nearly
 * done, and no socket would be read meanwhile. In slices the
 * responses go out slice by slice, and the clients' re-polls are taken in
 * between. A waiter that is resolved otherwise (timeout, abort, close) while
 * its slice waits is simply skipped; a waiter that arrives after the flush
 * read the head after it, and is not in the list.
 *
 * Deadlines: a coarse timer wheel
 * -------------------------------
 * Deadlines are rounded *up* to a multiple of `resolutionMs` (default 100 ms)
 * and kept in one bucket per multiple. A single interval of `resolutionMs`
 * (unref'd, so it never keeps the process alive on its own) runs only while
 * at least one waiter exists, and each tick resolves the buckets whose time has
 * come. 10k waiters therefore cost one timer, and the work per tick is the
 * number of live buckets (at most `longest timeout / resolutionMs`, e.g. 600 for
 * 60 s SSE streams at 100 ms) plus the waiters actually resolved. A timeout is
 * never early and at most about `2 × resolutionMs` late (plus the turns below).
 *
 * The due waiters are resolved `expireSlice` (default 8) per turn of the event
 * loop, not all in the tick. Ten thousand clients on a 20 s timeout expire
 * about fifty per tick, and each answers its request; done in one stretch,
 * that held the loop for milliseconds every tick, and a commit arriving then
 * waited behind answers nobody was waiting for. Between slices the loop reads
 * its sockets, so a flush and the waiter it wakes go first, and late by a
 * few turns is nothing to a deadline of seconds.
 *
 * Resolution is exactly once per park: whichever of advanced / timeout /
 * invalidated / aborted comes first wins, and the waiter is removed from its
 * shape set and its bucket at that moment, before its `wake` runs (which may
 * park it again). A waiter is an object the caller supplies (`Waiter`): a
 * parked long-poll is its request's own object, with no promise or closure
 * of its own. `wait` is the same as a promise, with an abort signal whose
 * listener goes with the waiter (no leaks for waiters that never see their
 * signal fire).
 *
 * Races: the store calls flush listeners synchronously, so a caller that reads
 * the head and calls `wait` in the same synchronous step cannot miss a flush
 * (`waitForData` does exactly that). `invalidate` only wakes current waiters:
 * a caller must check that its shape still exists before waiting (handles are
 * unique forever, so remembering invalidated ones would only leak).
 */

export type WaitResult = 'advanced' | 'timeout' | 'invalidated' | 'aborted'

/** What the waiters need of a `ShapeLogStore`. */
export interface FlushSource {
  /** The listener reads `advanced` (a store must fill it for it: see ShapeLogStore.onFlush). */
  onFlush(listener: (result: { durableLsn: bigint; advanced: readonly string[] }) => void): () => void
}

export interface LiveWaitersOptions {
  readonly store: FlushSource
  /** Granularity of deadlines and period of the single timer; default 100 ms. */
  readonly resolutionMs?: number
  /** Monotonic clock in ms; default `performance.now`. */
  readonly now?: () => number
  /** Waiters woken per turn of the event loop after a flush (see Waking); default 256. */
  readonly wakeSlice?: number
  /** Waiters whose deadline passed resolved per turn of the event loop (see Deadlines); default 8. */
  readonly expireSlice?: number
}

/** What `wait` needs of a cancellation: an `AbortSignal`, or something lighter with the same three members. */
export interface AbortLike {
  readonly aborted: boolean
  addEventListener(type: 'abort', listener: () => void, options?: { once?: boolean }): void
  removeEventListener(type: 'abort', listener: () => void): void
}

export interface WaitOptions {
  readonly timeoutMs: number
  readonly signal?: AbortLike | undefined
}

export const DEFAULT_WAIT_RESOLUTION_MS = 100
export const DEFAULT_WAKE_SLICE = 256
/** See `LiveWaitersOptions.expireSlice`. */
export const DEFAULT_EXPIRE_SLICE = 8

/**
 * One parked wait, as the waiters hold it: what a long-poll parks as (see
 * `DataWait`), so that a parked request is one object of its own and no
 * suspended call. `park` registers it, and it is woken exactly once per
 * registration, synchronously, from the flush listener, the timer tick,
 * `invalidate`, `cancel` or `close`; `wake` may park it again at once. `wake`
 * must not throw: the waiters of the same flush or tick are woken after it.
 */
export abstract class Waiter {
  /** Managed by `LiveWaiters` while parked: the shape, the deadline's bucket, and whether it is registered. */
  waitHandle = ''
  waitBucket = 0
  isParked = false
  abstract wake(result: WaitResult): void
}

/** The waiter of one `wait` call: resolves its promise, and listens to its signal while parked. */
class PromiseWaiter extends Waiter {
  onAbort: (() => void) | undefined = undefined
  constructor(
    private readonly resolve: (result: WaitResult) => void,
    private readonly signal: AbortLike | undefined,
  ) {
    super()
  }

  wake(result: WaitResult): void {
    if (this.onAbort !== undefined) {
      this.signal!.removeEventListener('abort', this.onAbort)
      this.onAbort = undefined
    }
    this.resolve(result)
  }
}

export class LiveWaiters {
  private readonly resolutionMs: number
  private readonly clock: () => number
  private readonly byHandle = new Map<string, Set<Waiter>>()
  private readonly buckets = new Map<number, Set<Waiter>>()
  private readonly store: FlushSource
  /** Set while the flush listener is registered: while `count > 0`. */
  private unsubscribe: (() => void) | undefined = undefined
  private timer: NodeJS.Timeout | undefined
  private count = 0
  private closed = false
  private readonly wakeSlice: number
  /** The waiters of each shape a flush advanced, still to be woken from `pendingAt` on (see Waking). */
  private pending: Waiter[][] = []
  private pendingAt = 0
  private draining: NodeJS.Immediate | undefined
  private readonly expireSlice: number
  /** Set while due waiters remain for a later turn. */
  private expiring: NodeJS.Immediate | undefined

  constructor(options: LiveWaitersOptions) {
    const resolutionMs = options.resolutionMs ?? DEFAULT_WAIT_RESOLUTION_MS
    if (!(resolutionMs > 0) || !Number.isFinite(resolutionMs)) throw new RangeError(`resolutionMs must be a positive number, got ${resolutionMs}`)
    this.resolutionMs = resolutionMs
    this.clock = options.now ?? (() => performance.now())
    this.store = options.store
    const slice = options.wakeSlice ?? DEFAULT_WAKE_SLICE
    if (!Number.isInteger(slice) || slice < 1) throw new RangeError(`wakeSlice must be a positive integer, got ${slice}`)
    this.wakeSlice = slice
    const expire = options.expireSlice ?? DEFAULT_EXPIRE_SLICE
    if (!Number.isInteger(expire) || expire < 1) throw new RangeError(`expireSlice must be a positive integer, got ${expire}`)
    this.expireSlice = expire
  }

  /**
   * From the first waiter on. A waiter's caller read its shape's head in the
   * same synchronous step (see Races), so no flush comes between that read
   * and the listener: the store then names the shape the first time its head
   * moves past what the caller saw.
   */
  private listen(): void {
    if (this.unsubscribe !== undefined) return
    this.unsubscribe = this.store.onFlush((result) => {
      for (const id of result.advanced) {
        const set = this.byHandle.get(id)
        if (set !== undefined) this.pending.push([...set])
      }
      if (this.draining === undefined) this.wakeSome()
    })
  }

  private unlisten(): void {
    const off = this.unsubscribe
    this.unsubscribe = undefined
    off?.()
  }

  /** The clock deadlines are measured on (the `now` option). SSE streams use it too. */
  now(): number {
    return this.clock()
  }

  /**
   * Resolves when the shape's published head moves ('advanced'), the timeout
   * passes ('timeout'), the shape is invalidated ('invalidated') or the signal
   * aborts ('aborted'). Never rejects.
   */
  wait(handle: string, options: WaitOptions): Promise<WaitResult> {
    const { signal } = options
    if (signal?.aborted) return Promise.resolve('aborted')
    return new Promise<WaitResult>((resolve) => {
      const waiter = new PromiseWaiter(resolve, signal)
      const now = this.park(waiter, handle, options.timeoutMs)
      if (now !== undefined) return resolve(now)
      if (signal) {
        waiter.onAbort = () => this.cancel(waiter)
        signal.addEventListener('abort', waiter.onAbort, { once: true })
      }
    })
  }

  /**
   * Registers `waiter` on the shape until its head moves ('advanced'), the
   * timeout passes ('timeout'), the shape is invalidated ('invalidated'), or
   * `cancel` or `close` ('aborted'); then calls its `wake` once. Returns
   * undefined when parked; when the wait is over before it begins, the
   * result, and `wake` is not called ('aborted' once closed, 'timeout' for a
   * timeout of zero or less).
   */
  park(waiter: Waiter, handle: string, timeoutMs: number): 'aborted' | 'timeout' | undefined {
    if (waiter.isParked) throw new Error('this waiter is parked already')
    if (this.closed) return 'aborted'
    if (!(timeoutMs > 0)) return 'timeout'
    waiter.isParked = true
    waiter.waitHandle = handle
    waiter.waitBucket = Math.ceil((this.clock() + timeoutMs) / this.resolutionMs)
    addTo(this.byHandle, handle, waiter)
    addTo(this.buckets, waiter.waitBucket, waiter)
    this.count++
    this.listen()
    if (this.timer === undefined) {
      this.timer = setInterval(() => this.tick(), this.resolutionMs)
      this.timer.unref()
    }
    return undefined
  }

  /** Wakes a parked waiter with 'aborted' (its request went away); nothing if it is not parked. */
  cancel(waiter: Waiter): void {
    this.settle(waiter, 'aborted')
  }

  /** Wakes every waiter of the shape with 'invalidated' (rotated, truncated, deleted). */
  invalidate(handle: string): void {
    this.wake(handle, 'invalidated')
  }

  /** Whether any request waits on the shape (such a shape is in use: see ShapeManager.setInUse). */
  has(handle: string): boolean {
    return this.byHandle.has(handle)
  }

  /** Number of pending waiters. */
  get size(): number {
    return this.count
  }

  /** Resolves every waiter with 'aborted', stops the timer and the flush listener; later waits resolve 'aborted' at once. */
  close(): void {
    if (this.closed) return
    this.closed = true
    this.unlisten()
    for (const set of [...this.byHandle.values()]) for (const w of [...set]) this.settle(w, 'aborted')
    this.dropPending()
  }

  /** Wakes the next slice of the flushed waiters, and schedules the next slice if any remain. */
  private wakeSome(): void {
    this.draining = undefined
    const pending = this.pending
    let i = this.pendingAt
    // Waiters resolved otherwise meanwhile are skipped, not counted.
    for (let woken = 0; i < pending.length && woken < this.wakeSlice; i++) {
      for (const w of pending[i]!) {
        // Resolved otherwise since (and perhaps parked again: a spurious 'advanced' only makes it look again).
        if (!w.isParked) continue
        this.settle(w, 'advanced')
        woken++
      }
    }
    if (i < pending.length && this.pending === pending) {
      this.pendingAt = i
      this.draining = setImmediate(() => this.wakeSome())
    } else if (this.pending === pending) {
      this.dropPending()
    }
  }

  private dropPending(): void {
    if (this.draining !== undefined) clearImmediate(this.draining)
    this.draining = undefined
    this.pending = []
    this.pendingAt = 0
  }

  private wake(handle: string, result: WaitResult): void {
    const set = this.byHandle.get(handle)
    if (!set) return
    for (const w of [...set]) this.settle(w, result)
  }

  private tick(): void {
    if (this.expiring === undefined) this.expireSome()
  }

  /** Resolves up to `expireSlice` due waiters, and schedules the next turn's if more are due. */
  private expireSome(): void {
    this.expiring = undefined
    const due = Math.floor(this.clock() / this.resolutionMs)
    let settled = 0
    // Settling removes the waiter from its set (and an emptied set from the map), which
    // iteration allows; a waiter parked again by its wake goes to a bucket after `due`.
    for (const [bucket, set] of this.buckets) {
      if (bucket > due) continue
      for (const w of set) {
        if (settled === this.expireSlice) {
          this.expiring = setImmediate(() => this.expireSome())
          return
        }
        this.settle(w, 'timeout')
        settled++
      }
    }
  }

  private stopExpiring(): void {
    if (this.expiring !== undefined) clearImmediate(this.expiring)
    this.expiring = undefined
  }

  private settle(w: Waiter, result: WaitResult): void {
    if (!w.isParked) return
    w.isParked = false
    removeFrom(this.byHandle, w.waitHandle, w)
    removeFrom(this.buckets, w.waitBucket, w)
    this.count--
    w.wake(result)
    // After the wake, which may have parked it again (a wait for an offset the flush did not reach).
    if (this.count === 0) {
      // Nobody left to wake: the flushed list holds only resolved waiters.
      this.dropPending()
      this.stopExpiring()
      this.unlisten()
      if (this.timer !== undefined) {
        clearInterval(this.timer)
        this.timer = undefined
      }
    }
  }
}

function addTo<K>(map: Map<K, Set<Waiter>>, key: K, w: Waiter): void {
  let set = map.get(key)
  if (!set) map.set(key, (set = new Set()))
  set.add(w)
}

function removeFrom<K>(map: Map<K, Set<Waiter>>, key: K, w: Waiter): void {
  const set = map.get(key)
  if (!set) return
  set.delete(w)
  if (set.size === 0) map.delete(key)
}
