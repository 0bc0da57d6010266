/**
 * When shapes were last used, kept cheap enough for every request to record.
 *
 * A use is a stamp from one counter (`stamp()`: an increment, stored in a
 * number field of the live shape), not a clock reading: a request pays no
 * clock call and allocates nothing, and stamps order uses exactly, which is
 * what least-recently-used eviction needs. Time enters only at sweeps:
 * each `mark(now)` pairs the wall-clock with the counter, so "unused for
 * `ttl`" becomes "stamp at or below the counter as it stood `ttl` ago"
 * (`unusedSince`). With a sweep every `ttl / SWEEPS_PER_TTL`, a shape expires
 * between `ttl` and `ttl + ttl / SWEEPS_PER_TTL` after its last use.
 *
 * Marks:  (t0, c0) (t1, c1) ... (tn, cn), times and counts both increasing.
 * A shape with stamp s was last used before the first mark whose count is
 * above s; the marks older than `now - ttl` but one are dropped.
 */

/** Sweeps per time-to-live: how late past its TTL a shape may expire, as a fraction of the TTL. */
export const SWEEPS_PER_TTL = 8

/** The longest gap between sweeps, whatever the TTL: a day-long TTL still sweeps every minute. */
export const MAX_SWEEP_INTERVAL_MS = 60_000

export function sweepInterval(ttlMs: number): number {
  return Math.max(1, Math.min(MAX_SWEEP_INTERVAL_MS, Math.floor(ttlMs / SWEEPS_PER_TTL)))
}

export class ShapeUses {
  private count = 0
  private readonly times: number[] = []
  private readonly counts: number[] = []

  /** Starts the history: everything stamped so far counts as used at `now` (a restart is a use). */
  constructor(now: number) {
    this.times.push(now)
    this.counts.push(0)
  }

  /** A new use: larger than every stamp before it. */
  stamp(): number {
    return ++this.count
  }

  /** The counter as it stands (the stamp of the latest use). */
  get current(): number {
    return this.count
  }

  /** Records where the counter stands at `now` (call at each sweep, with a clock that never goes back). */
  mark(now: number): void {
    this.times.push(now)
    this.counts.push(this.count)
  }

  /**
   * The stamp at or below which a shape has been unused since `now - ttlMs`
   * at least; -1 when the history does not reach back that far (nothing is
   * old enough). Drops marks no later call can need.
   */
  unusedSince(now: number, ttlMs: number): number {
    const cutoff = now - ttlMs
    let found = -1
    for (let i = 0; i < this.times.length && this.times[i]! <= cutoff; i++) found = i
    if (found < 0) return -1
    // Marks before the one found are older than any later cutoff needs.
    if (found > 0) {
      this.times.splice(0, found)
      this.counts.splice(0, found)
    }
    return this.counts[0]!
  }
}
