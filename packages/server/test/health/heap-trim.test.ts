import { afterEach, describe, expect, it, vi } from 'vitest'
import { HEAP_TRIM_INTERVAL_MS, RETIRED_SHAPES_FOR_COLLECTION, RETIREMENT_QUIET_MS } from '../../src/defaults.js'
import { type MemoryReturner, heapTrimWith } from '../../src/heap-trim.js'

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

  it('asks V8 to collect once, after a burst of retired shapes has paused, and not for a few', () => {
    vi.useFakeTimers()
    const addon = recorder()
    const trim = heapTrimWith(addon)
    for (let i = 0; i < RETIRED_SHAPES_FOR_COLLECTION - 1; i++) trim.shapeRetired()
    vi.advanceTimersByTime(RETIREMENT_QUIET_MS * 2)
    expect(addon.pressures).toEqual([])

    // A sweep retiring thousands, a shape every few ms: nothing while it goes on...
    for (let i = 0; i < 3 * RETIRED_SHAPES_FOR_COLLECTION; i++) {
      trim.shapeRetired()
      vi.advanceTimersByTime(1)
    }
    expect(addon.pressures).toEqual([])
    // ...one moderate notification once it has stopped.
    vi.advanceTimersByTime(RETIREMENT_QUIET_MS)
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
})
