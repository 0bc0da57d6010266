import { performance } from 'node:perf_hooks'
import { getHeapStatistics } from 'node:v8'
import { loadNativeAddon } from './native-addon.js'
import {
  COMPACTION_MAX_HEAP_BYTES,
  CRITICAL_RELEASE_MAX_HEAP_BYTES,
  HEAP_TRIM_INTERVAL_MS,
  IDLE_CHECK_MS,
  MALLOC_ARENAS,
  IDLE_UTILIZATION,
  IDLE_WATCH_MS,
  CREATED_SHAPES_FOR_COLLECTION,
  CREATION_QUIET_MS,
  CREATION_RECHECK_MS,
  CREATION_RECHECKS,
  SLACK_MIN_BYTES,
  SLACK_RATIO,
  LARGE_TRANSACTION_QUIET_MS,
  RELEASE_TRIM_DELAY_MS,
  RETIRED_COMPACTION_DELAY_MS,
  RETIRED_SHAPES_FOR_COLLECTION,
  RETIREMENT_QUIET_MS,
} from './defaults.js'

/**
 * Why memory was given back at once (the interval's trims are not counted):
 * a large transaction became durable; the server went idle after one; an
 * expiry sweep ended; and, a moment after that, the compacting collections
 * that follow it; the server went idle after a burst of shape creation.
 */
export type ReleaseReason = 'large_transaction' | 'idle_after_transaction' | 'retired_shapes' | 'compacted_after_retirement' | 'idle_after_creation'

/** One release: a collection asked of V8, then the C heap trimmed. */
export interface MemoryRelease {
  readonly reason: ReleaseReason
  /** A full collection at once (true; repeated, compacting, for `compacted_after_retirement`), or incremental marking (false). */
  readonly critical: boolean
  /** How long the notification held the event loop (the whole collection, when critical). */
  readonly pauseMs: number
}

/** Gives memory back to the system while the server runs (see `startHeapTrim`). */
export interface HeapTrim {
  /** A shape was retired (expired, evicted, deleted, invalidated): counted towards a collection. */
  shapeRetired(): void
  /** A shape was created (its snapshot published): counted towards a collection once the server idles after a burst. */
  shapeCreated(): void
  /** A large transaction (streamed or spilled) is durable: its buffers are garbage once the server goes quiet. */
  largeTransactionDurable(): void
  /** Releases made so far, by reason. */
  readonly releases: Readonly<Record<ReleaseReason, number>>
  stop(): void
}

export interface HeapTrimOptions {
  readonly intervalMs?: number
  /** Hears each release (the server logs it). */
  readonly onRelease?: (release: MemoryRelease) => void
  /** Lets go of buffers kept for a busy stream (the store's `shedMemory`), called before each release after a large transaction. */
  readonly shed?: () => void
  /**
   * Empties the caches that remember requests (the HTTP layer's
   * `RequestCaches`), called before each release after retirements: they hold
   * the retired shapes' requests, and their compiled definitions through them.
   */
  readonly forget?: () => void
  /** V8's used heap in bytes; Node's own by default. */
  readonly heapUsedBytes?: () => number
  /** V8's committed heap in bytes (what it holds from the system); Node's own by default. */
  readonly heapTotalBytes?: () => number
  /** The event loop's utilization (0 to 1) since the previous call; Node's own by default. */
  readonly loopUtilization?: () => number
}

/** Node's event loop utilization, each call measuring the time since the previous one. */
function nodeLoopUtilization(): () => number {
  let last = performance.eventLoopUtilization()
  return () => {
    const now = performance.eventLoopUtilization()
    const { utilization } = performance.eventLoopUtilization(now, last)
    last = now
    return utilization
  }
}

/**
 * Gives memory back to the system, through `@sluice/sendfile` (the one native
 * module the server loads; loaded for this even with `--no-sendfile`):
 *
 * - every `intervalMs`, the C heap's free pages (glibc's malloc_trim): after a
 *   burst of large buffers (a huge transaction, big responses) glibc keeps the
 *   freed memory, so resident memory would stay at the burst's peak;
 * - once thousands of shapes were retired (an expiry sweep), retirements
 *   have stopped for a moment and the event loop is next idle, V8's memory
 *   pressure notification: their state is garbage now, and V8 collects only
 *   when allocation asks it to, so an idle server would keep it resident
 *   indefinitely. Moderate pressure: incremental marking, whose final pause
 *   compacts (see below), hence the idle loop; a server that stays busy
 *   allocates, and V8 collects it on its own. The request caches (`forget`)
 *   are emptied first: they hold the retired shapes' requests. Then,
 *   `RETIRED_COMPACTION_DELAY_MS` later, if what is left of the heap is at
 *   most `COMPACTION_MAX_HEAP_BYTES` and the loop has stayed idle since, V8's
 *   low memory notification: full, compacting collections until one frees
 *   nothing more. The survivors of thousands of shapes' state are spread thin
 *   over many pages, which stay resident until they are moved together; one
 *   collection moves only some of them;
 * - once thousands of shapes were created and creations have stopped for a
 *   moment, when the event loop is next idle: moderate pressure again. Making
 *   a shape (its request, query, snapshot and first write-back) allocates
 *   many times what the idle shape keeps, so after a burst most of the
 *   grown heap is garbage that an idle server would keep resident, spread
 *   over pages that only a collection which reduces memory gives back. The
 *   request caches stay: they hold the new shapes' requests, which their
 *   clients are about to repeat. The notification starts a collection only
 *   when none is running (one that allocation started during the burst
 *   shrinks nothing), so a moment later, while V8 still holds far more than it
 *   uses and the loop is still idle, it is sent again, a few times at most.
 *   Such a collection marks incrementally, but its final pause compacts to
 *   give pages back and grows with the live heap (100-170 ms at 400 MB, with
 *   100,000 shapes), which is why it waits for an idle loop each time;
 * - once a large transaction is durable and no other one followed for a
 *   moment, critical pressure (a full collection at once, which also frees the
 *   external buffers the dead objects held; moderate for a heap past
 *   `CRITICAL_RELEASE_MAX_HEAP_BYTES`, whose full collection would stall the
 *   server), then the C heap's trim: the
 *   spill, routing and write-back buffers of hundreds of MiB are garbage then,
 *   and without it they stay resident until V8's memory reducer gets to them,
 *   a minute or more later. The collection's pause is that of marking what is
 *   still live, a few tens of ms for a server's usual heap. Once more when the
 *   event loop is next idle (the clients' downloads of the transaction done).
 *
 * Where the addon cannot load nothing happens.
 */
export async function startHeapTrim(options: HeapTrimOptions = {}): Promise<HeapTrim> {
  const native: MemoryReturner | undefined = await loadNativeAddon()
  if (native === undefined) {
    return { shapeRetired: () => {}, shapeCreated: () => {}, largeTransactionDurable: () => {}, releases: noReleases(), stop: () => {} }
  }
  return heapTrimWith(native, options)
}

/**
 * Caps glibc's malloc arenas at `MALLOC_ARENAS` (the addon's `limitArenas`,
 * mallopt M_ARENA_MAX), unless the environment sets `MALLOC_ARENA_MAX`, which
 * stands. glibc gives every thread that allocates an arena of its own, up to
 * 8 per core, and each keeps the pages its surviving chunks sit on: the
 * thread pool's and V8's helper threads, busy while thousands of shapes are
 * made and removed, left several MiB resident for good. Threads that already
 * have an arena keep it, so the `sluice` command calls this first thing.
 * Returns the cap set, or undefined (none set: the environment's, another C
 * library, or no addon).
 */
export async function limitMallocArenas(arenas: number = MALLOC_ARENAS): Promise<number | undefined> {
  if (process.env.MALLOC_ARENA_MAX !== undefined) return undefined
  const native = await loadNativeAddon()
  return native !== undefined && native.limitArenas(arenas) ? arenas : undefined
}

/** What `startHeapTrim` uses of the addon. */
export interface MemoryReturner {
  trimHeap(): boolean
  memoryPressure(critical?: boolean): boolean
  /** V8's low memory notification; missing from an older addon (no compaction after retirements then). */
  lowMemory?(): boolean
}

/** `startHeapTrim` over a loaded addon. */
export function heapTrimWith(addon: MemoryReturner, options: HeapTrimOptions = {}): HeapTrim {
  const timer = setInterval(() => addon.trimHeap(), options.intervalMs ?? HEAP_TRIM_INTERVAL_MS).unref()
  const releases = noReleases()
  const utilization = options.loopUtilization ?? nodeLoopUtilization()
  // The compaction's look covers the whole time since the release: a window of its own, not the one the other watchers share.
  const sinceRelease = options.loopUtilization ?? nodeLoopUtilization()
  const heapUsed = options.heapUsedBytes ?? (() => getHeapStatistics().used_heap_size)
  const heapTotal = options.heapTotalBytes ?? (() => getHeapStatistics().total_heap_size)
  const timers = new Set<NodeJS.Timeout>()
  let stopped = false
  const later = (ms: number, run: () => void): NodeJS.Timeout | undefined => {
    if (stopped) return undefined
    const t = setTimeout(() => {
      timers.delete(t)
      run()
    }, ms).unref()
    timers.add(t)
    return t
  }
  const cancel = (t: NodeJS.Timeout | undefined): void => {
    if (t === undefined) return
    clearTimeout(t)
    timers.delete(t)
  }
  const release = (reason: ReleaseReason, critical: boolean): void => {
    if (reason === 'large_transaction' || reason === 'idle_after_transaction') options.shed?.()
    else if (reason === 'retired_shapes') options.forget?.()
    const started = performance.now()
    if (reason === 'compacted_after_retirement') addon.lowMemory?.()
    else addon.memoryPressure(critical)
    const pauseMs = performance.now() - started
    releases[reason]++
    // After a full collection the dead buffers' memory is freed by V8's sweeper thread, so not at once.
    if (critical) later(RELEASE_TRIM_DELAY_MS, () => addon.trimHeap())
    options.onRelease?.({ reason, critical, pauseMs })
  }
  let retired = 0
  let created = 0
  let creationQuiet: NodeJS.Timeout | undefined
  let creationIdle: NodeJS.Timeout | undefined
  let retiredQuiet: NodeJS.Timeout | undefined
  let retiredIdle: NodeJS.Timeout | undefined
  let compaction: NodeJS.Timeout | undefined
  let transactionQuiet: NodeJS.Timeout | undefined
  let idleCheck: NodeJS.Timeout | undefined
  // Checks the loop every IDLE_CHECK_MS, for at most `left` ms, and runs `run` once it is idle; `keep` holds the pending check.
  const whenIdle = (left: number, keep: (check: NodeJS.Timeout | undefined) => void, run: () => void): void => {
    keep(
      later(IDLE_CHECK_MS, () => {
        if (utilization() < IDLE_UTILIZATION) run()
        else if (left > IDLE_CHECK_MS) whenIdle(left - IDLE_CHECK_MS, keep, run)
      }),
    )
  }
  // Serving a large transaction (clients downloading it) allocates afresh: once the loop is idle, that is garbage too.
  const watchIdle = (left: number): void =>
    whenIdle(left, (check) => (idleCheck = check), () => release('idle_after_transaction', heapUsed() <= CRITICAL_RELEASE_MAX_HEAP_BYTES))
  // Clients of new shapes follow their snapshots with catch-up and live requests: wait until those have quietened too.
  const watchIdleAfterCreation = (left: number): void =>
    whenIdle(left, (check) => (creationIdle = check), () => {
      release('idle_after_creation', false)
      recheckAfterCreation(CREATION_RECHECKS)
    })
  // A sweep runs on its timer, busy server or not: the collection's final pause (it compacts, and grows with the
  // heap) waits for an idle loop, as after creations; a server that stays busy is collected by V8 on its own.
  const watchIdleAfterRetirement = (left: number): void =>
    whenIdle(left, (check) => (retiredIdle = check), () => {
      release('retired_shapes', false)
      sinceRelease()
      cancel(compaction)
      // By then the incremental collection has run: the heap used is about what is live, which the pause grows with.
      // Full collections hold the loop for their whole length: only if it stayed idle since the release.
      compaction = later(RETIRED_COMPACTION_DELAY_MS, () => {
        if (addon.lowMemory !== undefined && sinceRelease() < IDLE_UTILIZATION && heapUsed() <= COMPACTION_MAX_HEAP_BYTES) {
          release('compacted_after_retirement', true)
        }
      })
    })
  const recheckAfterCreation = (left: number): void => {
    if (left <= 0) return
    creationIdle = later(CREATION_RECHECK_MS, () => {
      // Clients back since: the collection's final pause (it compacts, and grows with the heap) would hold
      // their requests, and V8 collects a busy heap on its own. Skipped, and counted.
      if (utilization() >= IDLE_UTILIZATION) return recheckAfterCreation(left - 1)
      const used = heapUsed()
      const slack = heapTotal() - used
      if (slack <= SLACK_MIN_BYTES || slack <= used * SLACK_RATIO) return
      release('idle_after_creation', false)
      recheckAfterCreation(left - 1)
    })
  }
  return {
    releases,
    shapeRetired: () => {
      if (++retired < RETIRED_SHAPES_FOR_COLLECTION) return
      // Debounced: one collection after the sweep, not one per thousand shapes during it.
      cancel(retiredQuiet)
      cancel(retiredIdle)
      retiredQuiet = later(RETIREMENT_QUIET_MS, () => {
        retired = 0
        utilization()
        watchIdleAfterRetirement(IDLE_WATCH_MS)
      })
    },
    shapeCreated: () => {
      if (++created < CREATED_SHAPES_FOR_COLLECTION) return
      cancel(creationQuiet)
      cancel(creationIdle)
      creationQuiet = later(CREATION_QUIET_MS, () => {
        created = 0
        utilization()
        watchIdleAfterCreation(IDLE_WATCH_MS)
      })
    },
    largeTransactionDurable: () => {
      // Debounced too: a run of large transactions is released once, after the last.
      cancel(transactionQuiet)
      cancel(idleCheck)
      transactionQuiet = later(LARGE_TRANSACTION_QUIET_MS, () => {
        release('large_transaction', heapUsed() <= CRITICAL_RELEASE_MAX_HEAP_BYTES)
        utilization()
        watchIdle(IDLE_WATCH_MS)
      })
    },
    stop: () => {
      stopped = true
      clearInterval(timer)
      for (const t of timers) clearTimeout(t)
      timers.clear()
    },
  }
}

function noReleases(): Record<ReleaseReason, number> {
  return { large_transaction: 0, idle_after_transaction: 0, retired_shapes: 0, compacted_after_retirement: 0, idle_after_creation: 0 }
}
