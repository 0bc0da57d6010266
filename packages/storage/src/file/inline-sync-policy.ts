/**
 * When an idle store's journal sync may run on the event loop's thread
 * (Journal.commit, FileStoreOptions.idleSyncInlineMaxMs): while the disk is
 * fast. Judged by the median of the last SAMPLES inline syncs, so one slow
 * sync among fast ones (a disk's occasional hiccup) does not send a fast
 * disk's idle syncs to the thread pool. Only inline syncs are timed: one
 * through the pool also counts the hop there and back and the wait for the
 * loop to take its completion, which on a busy loop exceeds a fast disk's
 * sync and, were it counted, would keep every idle sync off the loop.
 *
 * Once the median is over the limit, syncs go through the pool and one is
 * tried inline again after RETRY_MS, twice as long after each slow try (up
 * to RETRY_MAX_MS): a disk that is fast again gets its inline syncs back, a
 * slow one stalls the loop at most once per interval.
 */
const SAMPLES = 8
const RETRY_MS = 1000
const RETRY_MAX_MS = 60_000

export class InlineSyncPolicy {
  private readonly recent = new Float64Array(SAMPLES)
  private count = 0
  private slow = false
  private retryAt = 0
  private retryMs = RETRY_MS

  /** `maxMs`: the most the median inline sync may take; 0 never syncs inline. */
  constructor(private readonly maxMs: number) {}

  /** Whether the next idle sync, at `now` (performance.now()), runs inline. */
  mayTry(now: number): boolean {
    return this.maxMs > 0 && (!this.slow || now >= this.retryAt)
  }

  /** An inline sync took `ms`, ending at `now`. */
  record(ms: number, now: number): void {
    this.recent[this.count++ % SAMPLES] = ms
    const sorted = this.recent.slice(0, Math.min(this.count, SAMPLES)).sort()
    this.slow = sorted[sorted.length >> 1]! > this.maxMs
    if (!this.slow) {
      this.retryMs = RETRY_MS
      return
    }
    this.retryAt = now + this.retryMs
    this.retryMs = Math.min(2 * this.retryMs, RETRY_MAX_MS)
  }
}
