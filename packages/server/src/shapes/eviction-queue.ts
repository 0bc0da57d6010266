import type { LiveShape } from './live-shape.js'

/**
 * Which shape goes when a new one needs room past `--max-shapes`: the least
 * recently used ready shape that no live request waits on; failing that, the
 * least recently used ready shape with waiters (they get 409); never a shape
 * still being created (its creator is about to read it).
 *
 * Finding the oldest stamp among a million shapes per creation would cost a
 * scan each time, so one scan keeps the `BATCH` oldest candidates in order
 * and later evictions take from them. A candidate used since the scan is
 * skipped: its stamp grew, and every shape outside the batch was already
 * newer than it, so the order stays exact. The batch is rebuilt when empty.
 */

/** Candidates kept per scan. */
const BATCH = 64

interface Candidate {
  readonly shape: LiveShape
  readonly stamp: number
}

export class EvictionQueue {
  private batch: Candidate[] = []
  /** Whether the batch holds shapes with waiters (the last resort) rather than idle ones. */
  private busyBatch = false

  /**
   * The next shape to evict, or undefined when none may go. `inUse` says
   * whether live requests wait on a shape.
   */
  next(shapes: ReadonlyMap<string, LiveShape>, inUse: (handle: string) => boolean): LiveShape | undefined {
    for (let pass = 0; pass < 2; pass++) {
      while (this.batch.length > 0) {
        const { shape, stamp } = this.batch.shift()!
        if (shapes.get(shape.handle) !== shape || shape.lastUsed !== stamp || shape.log === undefined) continue
        // An idle candidate that has since got a waiter is no longer idle; a busy one may be taken as it is.
        if (!this.busyBatch && inUse(shape.handle)) continue
        return shape
      }
      if (pass === 0) this.scan(shapes, inUse)
    }
    return undefined
  }

  /** Forgets the batch (the shapes were all dropped). */
  clear(): void {
    this.batch = []
  }

  private scan(shapes: ReadonlyMap<string, LiveShape>, inUse: (handle: string) => boolean): void {
    const idle: Candidate[] = []
    const busy: Candidate[] = []
    for (const shape of shapes.values()) {
      if (shape.log === undefined) continue
      keepOldest(inUse(shape.handle) ? busy : idle, { shape, stamp: shape.lastUsed })
    }
    this.busyBatch = idle.length === 0
    this.batch = this.busyBatch ? busy : idle
  }
}

/** Inserts into a list kept sorted by stamp and at most BATCH long. */
function keepOldest(list: Candidate[], candidate: Candidate): void {
  if (list.length === BATCH && candidate.stamp >= list[BATCH - 1]!.stamp) return
  let i = list.length
  while (i > 0 && list[i - 1]!.stamp > candidate.stamp) i--
  list.splice(i, 0, candidate)
  if (list.length > BATCH) list.pop()
}
