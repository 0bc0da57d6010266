import { HEAP_TRIM_INTERVAL_MS, RETIRED_SHAPES_FOR_COLLECTION, RETIREMENT_QUIET_MS } from './defaults.js'

/** Gives memory back to the system while the server runs (see `startHeapTrim`). */
export interface HeapTrim {
  /** A shape was retired (expired, evicted, deleted, invalidated): counted towards a collection. */
  shapeRetired(): void
  stop(): void
}

/**
 * Gives memory back to the system, through `@sluice/sendfile` (the one native
 * module the server loads; loaded for this even with `--no-sendfile`):
 *
 * - every `intervalMs`, the C heap's free pages (glibc's malloc_trim): after a
 *   burst of large buffers (a huge transaction, big responses) glibc keeps the
 *   freed memory, so resident memory would stay at the burst's peak;
 * - once thousands of shapes were retired (an expiry sweep) and retirements
 *   have stopped for a moment, V8's memory pressure notification: their state
 *   is garbage now, and V8 collects only when allocation asks it to, so an idle
 *   server would keep it resident indefinitely. Moderate pressure: incremental
 *   marking, no long pause.
 *
 * Where the addon cannot load nothing happens.
 */
export async function startHeapTrim(intervalMs: number = HEAP_TRIM_INTERVAL_MS): Promise<HeapTrim> {
  let native: MemoryReturner | undefined
  try {
    const { loadSendfile } = await import('@sluice/sendfile')
    const loaded = loadSendfile()
    if (loaded.available) native = loaded.sendfile
  } catch {
    // The optional package is missing: nothing to trim with.
  }
  if (native === undefined) return { shapeRetired: () => {}, stop: () => {} }
  return heapTrimWith(native, intervalMs)
}

/** What `startHeapTrim` uses of the addon. */
export interface MemoryReturner {
  trimHeap(): boolean
  memoryPressure(critical?: boolean): boolean
}

/** `startHeapTrim` over a loaded addon. */
export function heapTrimWith(addon: MemoryReturner, intervalMs: number = HEAP_TRIM_INTERVAL_MS): HeapTrim {
  const timer = setInterval(() => addon.trimHeap(), intervalMs).unref()
  let retired = 0
  let quiet: NodeJS.Timeout | undefined
  return {
    shapeRetired: () => {
      if (++retired < RETIRED_SHAPES_FOR_COLLECTION) return
      // Debounced: one collection after the sweep, not one per thousand shapes during it.
      clearTimeout(quiet)
      quiet = setTimeout(() => {
        retired = 0
        addon.memoryPressure(false)
      }, RETIREMENT_QUIET_MS).unref()
    },
    stop: () => {
      clearInterval(timer)
      clearTimeout(quiet)
    },
  }
}
