import type { LiveShape, ShapeRemoval } from './live-shape.js'
import { EvictionQueue } from './eviction-queue.js'
import { ShapeError } from './shape-error.js'
import { ShapeUses, sweepInterval } from './shape-uses.js'

/** What the lifecycle needs of the shape manager that owns the shapes. */
export interface LifecycleHost {
  readonly shapes: ReadonlyMap<string, LiveShape>
  /** Retires a shape the way every invalidation does (409 to its clients, files deleted). */
  invalidate(handle: string, reason: ShapeRemoval): Promise<void>
  /** Drops the compiled definitions no live shape uses any more. */
  pruneDefinitions(): void
  readonly closed: () => boolean
  readonly onSweepError: (error: unknown) => void
}

export interface LifecycleOptions {
  /** Ready shapes no request used for this long expire (0: never). */
  readonly ttlMs: number
  /** Most shapes kept at once: past it the least recently used is evicted. */
  readonly maxShapes: number
  /** Milliseconds; `performance.now` unless a test moves time itself. */
  readonly clock: () => number
}

/**
 * How shapes leave when nothing removes them: expiry of the ones no request
 * used for the TTL (a sweep every TTL/8, at most a minute apart) and eviction
 * of the least recently used past `--max-shapes`. Shapes that live requests
 * wait on never expire and are evicted last; shapes still being created are
 * never taken. Uses are stamps from one counter (`ShapeUses`), so recording
 * one on the request path costs an increment.
 */
export class ShapeLifecycle {
  private readonly uses: ShapeUses
  private readonly evictions = new EvictionQueue()
  private inUse: (handle: string) => boolean = () => false
  private timer: NodeJS.Timeout | undefined
  private sweeping: Promise<void> | undefined
  /** Set when shapes were retired since the last sweep: their compiled definitions are then dropped. */
  private retiredSinceSweep = false
  private expiredCount = 0
  private evictedCount = 0

  constructor(
    private readonly host: LifecycleHost,
    private readonly options: LifecycleOptions,
  ) {
    this.uses = new ShapeUses(options.clock())
  }

  /** A new use: store it in the shape's `lastUsed`. */
  stamp(): number {
    return this.uses.stamp()
  }

  get expired(): number {
    return this.expiredCount
  }

  get evicted(): number {
    return this.evictedCount
  }

  /** Says which shapes live requests wait on (the HTTP layer's waiters). */
  setInUse(inUse: (handle: string) => boolean): void {
    this.inUse = inUse
  }

  waitedOn(handle: string): boolean {
    return this.inUse(handle)
  }

  /** A shape was retired: the next sweep prunes compiled definitions. */
  noteRetired(): void {
    this.retiredSinceSweep = true
  }

  start(): void {
    // Stamps are paired with the clock at each sweep; without a TTL, eviction needs no clock at all.
    if (!(this.options.ttlMs > 0)) return
    this.timer = setInterval(() => {
      this.sweep().catch(this.host.onSweepError)
    }, sweepInterval(this.options.ttlMs))
    this.timer.unref()
  }

  async stop(): Promise<void> {
    if (this.timer !== undefined) clearInterval(this.timer)
    await this.sweeping
  }

  /** Expires the shapes unused for the TTL now, rather than at the next sweep; resolves when they are gone. */
  sweep(): Promise<void> {
    if (this.sweeping !== undefined) return this.sweeping
    const run = this.expireUnused().finally(() => {
      this.sweeping = undefined
    })
    this.sweeping = run
    return run
  }

  /** Evicts the least recently used shape; `too_many_shapes` when none may go (every shape is being created). */
  async evictOne(): Promise<void> {
    const { maxShapes } = this.options
    const victim = this.evictions.next(this.host.shapes, this.inUse)
    if (victim === undefined) throw new ShapeError('too_many_shapes', `at most ${maxShapes} shapes, and none may be evicted now`)
    this.evictedCount++
    await this.host.invalidate(victim.handle, { kind: 'evicted', detail: `least recently used of ${maxShapes} shapes` })
  }

  private async expireUnused(): Promise<void> {
    const { ttlMs } = this.options
    const now = this.options.clock()
    this.uses.mark(now)
    const threshold = ttlMs > 0 ? this.uses.unusedSince(now, ttlMs) : -1
    const due: LiveShape[] = []
    if (threshold >= 0) {
      for (const shape of this.host.shapes.values()) if (this.expires(shape, threshold)) due.push(shape)
    }
    for (const shape of due) {
      if (this.host.closed()) break
      // Checked again: a request may have used it while earlier ones were deleted.
      if (this.host.shapes.get(shape.handle) !== shape || !this.expires(shape, threshold)) continue
      this.expiredCount++
      await this.host.invalidate(shape.handle, { kind: 'expired', detail: `unused for ${Math.round(ttlMs / 1000)} s` })
    }
    if (this.retiredSinceSweep) {
      this.retiredSinceSweep = false
      this.host.pruneDefinitions()
    }
  }

  /** Ready, unused since the threshold stamp, and no live request waits on it. */
  private expires(shape: LiveShape, threshold: number): boolean {
    return shape.log !== undefined && shape.lastUsed <= threshold && !this.inUse(shape.handle)
  }
}
