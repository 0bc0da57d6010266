import { afterEach, describe, expect, it, vi } from 'vitest'
import {
  CRITICAL_RELEASE_MAX_HEAP_BYTES,
  HEAP_TRIM_INTERVAL_MS,
  IDLE_CHECK_MS,
  IDLE_UTILIZATION,
  IDLE_WATCH_MS,
  CREATED_SHAPES_FOR_COLLECTION,
  CREATION_QUIET_MS,
  CREATION_RECHECK_MS,
  CREATION_RECHECKS,
  SLACK_MIN_BYTES,
  LARGE_TRANSACTION_QUIET_MS,
  MALLOC_ARENAS,
  RELEASE_TRIM_DELAY_MS,
  COMPACTION_MAX_HEAP_BYTES,
  RETIRED_COMPACTION_DELAY_MS,
  RETIRED_SHAPES_FOR_COLLECTION,
  RETIREMENT_QUIET_MS,
} from '../../src/defaults.js'
import { type MemoryRelease, type MemoryReturner, heapTrimWith, limitMallocArenas } from '../../src/heap-trim.js'

/** Records what the heap trim asks of the addon (the addon's own effect is tested in @sluice/sendfile). */
function recorder(): MemoryReturner & { trims: number; pressures: boolean[] } {
  const calls = {
    trims: 0,
    pressures: [] as boolean[],
    trimHeap: () => {
      calls.trims++
      return true
    },
    memoryPressure: (critical = false) => {
      calls.pressures.push(critical)
      return true
    },
  }
  return calls
}

describe('heap trim', () => {
  afterEach(() => {
    vi.useRealTimers()
  })

  it('trims the C heap on its interval', () => {
    vi.useFakeTimers()
    const addon = recorder()
    const trim = heapTrimWith(addon)
    vi.advanceTimersByTime(HEAP_TRIM_INTERVAL_MS * 3)
    expect(addon.trims).toBe(3)
    trim.stop()
    vi.advanceTimersByTime(HEAP_TRIM_INTERVAL_MS * 3)
    expect(addon.trims).toBe(3)
  })

  it('asks V8 to collect once, after a burst of retired shapes has paused and the loop is idle, and not for a few', () => {
    vi.useFakeTimers()
    const addon = recorder()
    const trim = heapTrimWith(addon, { loopUtilization: () => 0 })
    for (let i = 0; i < RETIRED_SHAPES_FOR_COLLECTION - 1; i++) trim.shapeRetired()
    vi.advanceTimersByTime(RETIREMENT_QUIET_MS * 2)
    expect(addon.pressures).toEqual([])

    // A sweep retiring thousands, a shape every few ms: nothing while it goes on...
    for (let i = 0; i < 3 * RETIRED_SHAPES_FOR_COLLECTION; i++) {
      trim.shapeRetired()
      vi.advanceTimersByTime(1)
    }
    expect(addon.pressures).toEqual([])
    // ...one moderate notification once it has stopped, at the next look at an idle loop.
    vi.advanceTimersByTime(RETIREMENT_QUIET_MS)
    expect(addon.pressures).toEqual([])
    vi.advanceTimersByTime(IDLE_CHECK_MS)
    expect(addon.pressures).toEqual([false])
    vi.advanceTimersByTime(RETIREMENT_QUIET_MS * 5)
    expect(addon.pressures).toEqual([false])

    // The count starts again: the next thousand make the next collection.
    for (let i = 0; i < RETIRED_SHAPES_FOR_COLLECTION - 1; i++) trim.shapeRetired()
    vi.advanceTimersByTime(RETIREMENT_QUIET_MS * 2)
    expect(addon.pressures).toEqual([false])
    trim.shapeRetired()
    trim.stop()
    vi.advanceTimersByTime(RETIREMENT_QUIET_MS * 2)
    expect(addon.pressures).toEqual([false])
  })

  it('empties the request caches just before the collection after retirements, and not for a large transaction', () => {
    vi.useFakeTimers()
    const addon = recorder()
    const order: string[] = []
    const memoryPressure = addon.memoryPressure
    addon.memoryPressure = (critical) => {
      order.push('collect')
      return memoryPressure(critical)
    }
    const trim = heapTrimWith(addon, { forget: () => order.push('forget'), shed: () => order.push('shed'), loopUtilization: () => 0 })
    for (let i = 0; i < RETIRED_SHAPES_FOR_COLLECTION; i++) trim.shapeRetired()
    vi.advanceTimersByTime(RETIREMENT_QUIET_MS + IDLE_CHECK_MS)
    expect(order).toEqual(['forget', 'collect'])
    trim.largeTransactionDurable()
    vi.advanceTimersByTime(LARGE_TRANSACTION_QUIET_MS)
    expect(order).toEqual(['forget', 'collect', 'shed', 'collect'])
    trim.stop()
  })

  it('compacts what survived a sweep with the low memory notification once the heap has shrunk, then trims; not while the heap is large', () => {
    vi.useFakeTimers()
    const addon = recorder()
    const low: number[] = []
    const withLow: MemoryReturner = {
      trimHeap: addon.trimHeap,
      memoryPressure: addon.memoryPressure,
      lowMemory: () => {
        low.push(Date.now())
        return true
      },
    }
    let used = 200 * 1024 * 1024
    const released: MemoryRelease[] = []
    const trim = heapTrimWith(withLow, { heapUsedBytes: () => used, intervalMs: 3_600_000, onRelease: (r) => released.push(r), loopUtilization: () => 0 })
    const sweep = (): void => {
      for (let i = 0; i < RETIRED_SHAPES_FOR_COLLECTION; i++) trim.shapeRetired()
      vi.advanceTimersByTime(RETIREMENT_QUIET_MS + IDLE_CHECK_MS)
    }
    sweep()
    expect(addon.pressures).toEqual([false])
    // The incremental collection has left the heap at what is live: compacted once, then the C heap trimmed.
    used = COMPACTION_MAX_HEAP_BYTES
    vi.advanceTimersByTime(RETIRED_COMPACTION_DELAY_MS - 1)
    expect(low).toEqual([])
    vi.advanceTimersByTime(1)
    expect(low).toHaveLength(1)
    expect(addon.trims).toBe(0)
    vi.advanceTimersByTime(RELEASE_TRIM_DELAY_MS)
    expect(addon.trims).toBe(1)
    expect(released.map((r) => [r.reason, r.critical])).toEqual([
      ['retired_shapes', false],
      ['compacted_after_retirement', true],
    ])

    // A heap still large after the sweep (many shapes live): no full collections.
    used = COMPACTION_MAX_HEAP_BYTES + 1
    sweep()
    vi.advanceTimersByTime(RETIRED_COMPACTION_DELAY_MS * 2)
    expect(low).toHaveLength(1)
    expect(trim.releases).toEqual({ large_transaction: 0, idle_after_transaction: 0, retired_shapes: 2, compacted_after_retirement: 1, idle_after_creation: 0 })
    trim.stop()
  })

  it('after a sweep, waits for an idle loop to collect and gives up on one that stays busy; compacts only if the loop stayed idle', () => {
    vi.useFakeTimers()
    const addon = recorder()
    const low: number[] = []
    const withLow: MemoryReturner = { ...addon, lowMemory: () => low.push(Date.now()) > 0 }
    let load = 1
    const looks: number[] = []
    const trim = heapTrimWith(withLow, {
      intervalMs: 3_600_000,
      heapUsedBytes: () => 0,
      loopUtilization: () => {
        looks.push(Date.now())
        return load
      },
    })
    const sweep = (): void => {
      for (let i = 0; i < RETIRED_SHAPES_FOR_COLLECTION; i++) trim.shapeRetired()
      vi.advanceTimersByTime(RETIREMENT_QUIET_MS)
    }
    // Clients keep the loop busy for ten looks: nothing; then it idles, and the collection follows at the next look.
    sweep()
    vi.advanceTimersByTime(IDLE_CHECK_MS * 10)
    expect(addon.pressures).toEqual([])
    load = 0
    vi.advanceTimersByTime(IDLE_CHECK_MS)
    expect(addon.pressures).toEqual([false])
    // Clients back before the compaction's look: no full collections.
    load = 0.5
    vi.advanceTimersByTime(RETIRED_COMPACTION_DELAY_MS)
    expect(low).toEqual([])
    expect(trim.releases.compacted_after_retirement).toBe(0)

    // A loop busy for the whole watch: given up, no collection at all, and nothing is looked at after it.
    sweep()
    load = 1
    vi.advanceTimersByTime(IDLE_WATCH_MS)
    const seen = looks.length
    load = 0
    vi.advanceTimersByTime(IDLE_WATCH_MS)
    expect(looks).toHaveLength(seen)
    expect(addon.pressures).toEqual([false])
    expect(trim.releases.retired_shapes).toBe(1)

    // A sweep while the previous one's watch goes on replaces it: one collection for both.
    load = 1
    sweep()
    sweep()
    load = 0
    vi.advanceTimersByTime(IDLE_WATCH_MS)
    expect(addon.pressures).toEqual([false, false])
    trim.stop()
  })

  it('collects at once and then trims, once large transactions have stopped becoming durable', () => {
    vi.useFakeTimers()
    const addon = recorder()
    const heard: MemoryRelease[] = []
    // No interval trim within the test's span: every trim counted comes from a release.
    // A loop kept busy: no second release while the transaction is being served.
    const trim = heapTrimWith(addon, { intervalMs: 3_600_000, onRelease: (r) => heard.push(r), loopUtilization: () => 1, heapUsedBytes: () => 0 })

    // Three in a row, each before the quiet time is up: nothing yet...
    for (let i = 0; i < 3; i++) {
      trim.largeTransactionDurable()
      vi.advanceTimersByTime(LARGE_TRANSACTION_QUIET_MS - 1)
    }
    expect(addon.pressures).toEqual([])
    // ...one critical collection once they stopped, the C heap trimmed after V8 has freed the dead buffers.
    vi.advanceTimersByTime(1)
    expect(addon.pressures).toEqual([true])
    expect(addon.trims).toBe(0)
    vi.advanceTimersByTime(RELEASE_TRIM_DELAY_MS)
    expect(addon.trims).toBe(1)
    expect(trim.releases).toEqual({ large_transaction: 1, idle_after_transaction: 0, retired_shapes: 0, compacted_after_retirement: 0, idle_after_creation: 0 })
    expect(heard.map((r) => [r.reason, r.critical])).toEqual([['large_transaction', true]])

    // The next one is released again; stop cancels what is pending.
    trim.largeTransactionDurable()
    vi.advanceTimersByTime(LARGE_TRANSACTION_QUIET_MS)
    expect(addon.pressures).toEqual([true, true])
    trim.stop()
    vi.advanceTimersByTime(RELEASE_TRIM_DELAY_MS * 2)
    expect(addon.trims).toBe(1)
    trim.largeTransactionDurable()
    vi.advanceTimersByTime(LARGE_TRANSACTION_QUIET_MS * 2)
    expect(addon.pressures).toEqual([true, true])
  })

  it('releases once more when the event loop is next idle after a large transaction, and gives up on a loop that stays busy', () => {
    vi.useFakeTimers()
    const addon = recorder()
    const load: number[] = []
    // What is shed, and when: before each collection, so that the buffers let go are collected by it.
    const order: string[] = []
    const trim = heapTrimWith(
      { trimHeap: addon.trimHeap, memoryPressure: (critical) => (order.push('pressure'), addon.memoryPressure(critical)) },
      { intervalMs: 3_600_000, loopUtilization: () => load.shift() ?? 0, shed: () => order.push('shed'), heapUsedBytes: () => 0 },
    )
    trim.largeTransactionDurable()
    // The release reads the utilization once to start its window, then clients download for three seconds.
    load.push(0.9, 0.8, 0.6, 0.3, IDLE_UTILIZATION / 2)
    vi.advanceTimersByTime(LARGE_TRANSACTION_QUIET_MS)
    expect(trim.releases).toEqual({ large_transaction: 1, idle_after_transaction: 0, retired_shapes: 0, compacted_after_retirement: 0, idle_after_creation: 0 })
    vi.advanceTimersByTime(IDLE_CHECK_MS * 3)
    expect(trim.releases.idle_after_transaction).toBe(0)
    vi.advanceTimersByTime(IDLE_CHECK_MS)
    expect(trim.releases).toEqual({ large_transaction: 1, idle_after_transaction: 1, retired_shapes: 0, compacted_after_retirement: 0, idle_after_creation: 0 })
    expect(addon.pressures).toEqual([true, true])
    vi.advanceTimersByTime(IDLE_WATCH_MS)
    expect(addon.pressures).toEqual([true, true])
    expect(order).toEqual(['shed', 'pressure', 'shed', 'pressure'])

    // Busy throughout the watch: no second release, and no checks after it.
    let checks = 0
    const busy = heapTrimWith(addon, {
      intervalMs: 3_600_000,
      heapUsedBytes: () => 0,
      loopUtilization: () => {
        checks++
        return 1
      },
    })
    busy.largeTransactionDurable()
    vi.advanceTimersByTime(LARGE_TRANSACTION_QUIET_MS + IDLE_WATCH_MS * 2)
    expect(busy.releases).toEqual({ large_transaction: 1, idle_after_transaction: 0, retired_shapes: 0, compacted_after_retirement: 0, idle_after_creation: 0 })
    expect(checks).toBe(1 + IDLE_WATCH_MS / IDLE_CHECK_MS)
    trim.stop()
    busy.stop()
  })

  it('collects incrementally once the event loop idles after a burst of shape creation, keeping the request caches, and not for a few', () => {
    vi.useFakeTimers()
    const addon = recorder()
    const load: number[] = []
    let forgotten = 0
    const trim = heapTrimWith(addon, {
      intervalMs: 3_600_000,
      loopUtilization: () => load.shift() ?? 0,
      heapUsedBytes: () => 0,
      heapTotalBytes: () => 0,
      forget: () => forgotten++,
    })
    for (let i = 0; i < CREATED_SHAPES_FOR_COLLECTION - 1; i++) trim.shapeCreated()
    vi.advanceTimersByTime(CREATION_QUIET_MS + IDLE_CHECK_MS * 5)
    expect(addon.pressures).toEqual([])

    // A burst of thousands, a shape every few ms: nothing while it goes on...
    for (let i = 0; i < 3 * CREATED_SHAPES_FOR_COLLECTION; i++) {
      trim.shapeCreated()
      vi.advanceTimersByTime(2)
    }
    expect(addon.pressures).toEqual([])
    // ...nor while the new shapes' clients keep the loop busy once it stopped (the first read starts the window)...
    load.push(0, 0.7, 0.4, IDLE_UTILIZATION / 2)
    vi.advanceTimersByTime(CREATION_QUIET_MS + IDLE_CHECK_MS * 2)
    expect(addon.pressures).toEqual([])
    // ...then one moderate notification, the caches left as they are.
    vi.advanceTimersByTime(IDLE_CHECK_MS)
    expect(addon.pressures).toEqual([false])
    expect(trim.releases.idle_after_creation).toBe(1)
    expect(forgotten).toBe(0)
    vi.advanceTimersByTime(IDLE_WATCH_MS * 2)
    expect(addon.pressures).toEqual([false])

    // The count starts again; stop cancels what is pending.
    for (let i = 0; i < CREATED_SHAPES_FOR_COLLECTION; i++) trim.shapeCreated()
    trim.stop()
    vi.advanceTimersByTime(CREATION_QUIET_MS + IDLE_WATCH_MS)
    expect(addon.pressures).toEqual([false])
  })

  it('after a burst of creation, asks again while V8 holds far more heap than it uses, a few times at most', () => {
    vi.useFakeTimers()
    const addon = recorder()
    const used = 100 * 1024 * 1024
    let total = used * 2
    const trim = heapTrimWith(addon, { intervalMs: 3_600_000, loopUtilization: () => 0, heapUsedBytes: () => used, heapTotalBytes: () => total })
    const burst = (): void => {
      for (let i = 0; i < CREATED_SHAPES_FOR_COLLECTION; i++) trim.shapeCreated()
      vi.advanceTimersByTime(CREATION_QUIET_MS + IDLE_CHECK_MS)
    }
    burst()
    expect(addon.pressures).toEqual([false])
    // The first collection left the heap as large (another was running): asked again, then shrunk.
    vi.advanceTimersByTime(CREATION_RECHECK_MS)
    expect(addon.pressures).toEqual([false, false])
    total = used + used / 8
    vi.advanceTimersByTime(CREATION_RECHECK_MS * 5)
    expect(addon.pressures).toEqual([false, false])

    // A heap that never shrinks is asked CREATION_RECHECKS times more, then left alone.
    total = used * 2
    burst()
    vi.advanceTimersByTime(CREATION_RECHECK_MS * (CREATION_RECHECKS + 5))
    expect(addon.pressures).toHaveLength(2 + 1 + CREATION_RECHECKS)
    expect(trim.releases.idle_after_creation).toBe(2 + 1 + CREATION_RECHECKS)

    // A small slack is no reason, whatever its ratio.
    const small = heapTrimWith(recorder(), { intervalMs: 3_600_000, loopUtilization: () => 0, heapUsedBytes: () => 1024, heapTotalBytes: () => SLACK_MIN_BYTES })
    for (let i = 0; i < CREATED_SHAPES_FOR_COLLECTION; i++) small.shapeCreated()
    vi.advanceTimersByTime(CREATION_QUIET_MS + IDLE_CHECK_MS + CREATION_RECHECK_MS * 5)
    expect(small.releases.idle_after_creation).toBe(1)
    trim.stop()
    small.stop()
  })

  it('asks again after a burst of creation only while the event loop stays idle (clients back skip a look, and use it up)', () => {
    vi.useFakeTimers()
    const addon = recorder()
    const used = 100 * 1024 * 1024
    let load = 0
    let looks = 0
    const trim = heapTrimWith(addon, {
      intervalMs: 3_600_000,
      loopUtilization: () => {
        looks++
        return load
      },
      heapUsedBytes: () => used,
      heapTotalBytes: () => used * 2,
    })
    for (let i = 0; i < CREATED_SHAPES_FOR_COLLECTION; i++) trim.shapeCreated()
    vi.advanceTimersByTime(CREATION_QUIET_MS + IDLE_CHECK_MS)
    expect(addon.pressures).toEqual([false])

    // Busy for the next look: no collection then; idle again for the one after: asked again.
    load = 0.3
    vi.advanceTimersByTime(CREATION_RECHECK_MS)
    expect(addon.pressures).toEqual([false])
    load = 0
    vi.advanceTimersByTime(CREATION_RECHECK_MS)
    expect(addon.pressures).toEqual([false, false])
    // Busy for the rest: no more, and the looks stop after CREATION_RECHECKS of them.
    load = 0.3
    const looked = looks
    vi.advanceTimersByTime(CREATION_RECHECK_MS * (CREATION_RECHECKS + 5))
    expect(addon.pressures).toEqual([false, false])
    expect(looks - looked).toBe(CREATION_RECHECKS - 2)
    expect(trim.releases.idle_after_creation).toBe(2)
    trim.stop()
  })

  it('marks a large heap incrementally instead of collecting it at once, leaving the trim to the interval', () => {
    vi.useFakeTimers()
    const addon = recorder()
    let used = CRITICAL_RELEASE_MAX_HEAP_BYTES + 1
    const trim = heapTrimWith(addon, { intervalMs: 3_600_000, loopUtilization: () => 0, heapUsedBytes: () => used })
    trim.largeTransactionDurable()
    vi.advanceTimersByTime(LARGE_TRANSACTION_QUIET_MS + RELEASE_TRIM_DELAY_MS)
    expect(addon.pressures).toEqual([false])
    expect(addon.trims).toBe(0)
    // By the idle check the heap has shrunk: collected at once, then trimmed.
    used = CRITICAL_RELEASE_MAX_HEAP_BYTES
    vi.advanceTimersByTime(IDLE_CHECK_MS + RELEASE_TRIM_DELAY_MS)
    expect(addon.pressures).toEqual([false, true])
    expect(addon.trims).toBe(1)
    trim.stop()
  })

  it('caps the malloc arenas through the addon, unless MALLOC_ARENA_MAX in the environment says otherwise', async () => {
    const given = process.env.MALLOC_ARENA_MAX
    try {
      process.env.MALLOC_ARENA_MAX = '4'
      expect(await limitMallocArenas()).toBeUndefined()
      delete process.env.MALLOC_ARENA_MAX
      expect(await limitMallocArenas()).toBe(MALLOC_ARENAS)
    } finally {
      if (given === undefined) delete process.env.MALLOC_ARENA_MAX
      else process.env.MALLOC_ARENA_MAX = given
    }
  })
})
