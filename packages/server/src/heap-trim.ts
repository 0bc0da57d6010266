import { HEAP_TRIM_INTERVAL_MS } from './defaults.js'

/**
 * Gives the C heap's free pages back to the kernel every `intervalMs`, through
 * `@sluice/sendfile`'s `trimHeap` (glibc's malloc_trim): after a burst of large
 * buffers (a huge transaction, big responses) glibc keeps the freed memory, so
 * resident memory would stay at the burst's peak. Independent of the body path:
 * the addon is loaded for this even with `--no-sendfile`. Where it cannot load
 * nothing happens. Returns the function that stops it.
 */
export async function startHeapTrim(intervalMs: number = HEAP_TRIM_INTERVAL_MS): Promise<() => void> {
  let trim: (() => boolean) | undefined
  try {
    const { loadSendfile } = await import('@sluice/sendfile')
    const loaded = loadSendfile()
    if (loaded.available) trim = () => loaded.sendfile.trimHeap()
  } catch {
    // The optional package is missing: nothing to trim with.
  }
  if (trim === undefined) return () => {}
  const run = trim
  const timer = setInterval(() => run(), intervalMs).unref()
  return () => clearInterval(timer)
}
