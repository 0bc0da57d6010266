import { setImmediate as nextTurn } from 'node:timers/promises'
import { BEFORE_ALL, type LogOffset } from '@sluice/protocol'
import type { ShapeLog, ShapeLogStore } from '@sluice/storage'
import type { LiveShape } from '../live-shape.js'
import type { ShapeTarget } from '../route-contracts.js'
import type { ShapeLogger } from '../shape-manager.js'
import { StitchingTarget } from '../shape-targets.js'
import { type CompactedLog, compactLog } from './compact-log.js'
import { compactedLogId, generationOfLogId, handleOfLogId } from './log-ids.js'
import { TeeTarget } from './tee-target.js'

/*
 * Background compaction (docs/architecture.md, compaction): which shapes are
 * due, one compaction at a time, and the switch from the old log to the
 * compacted one.
 *
 *   1. Between two routed transactions the shape's target becomes a tee: the
 *      old log keeps taking every part, a copy waits in memory.
 *   2. A flush publishes everything routed before the tee; the old log's head
 *      is then the compaction point, and compact-log.ts writes the new log
 *      from the prefix, hands it the waiting copies and finishes it (durable,
 *      renamed into shapes/ by a group commit).
 *   3. The shape serves the new log from then on (same handle, same offsets);
 *      the old one keeps taking copies for `retireAfterMs`, so a request that
 *      picked it up before the switch (a long-poll waiting on it) still reads a
 *      log that moves, and is then deleted.
 *
 * A crash anywhere leaves the old log (a new one that was not renamed in is
 * removed at open), or both, and restore keeps the newer (restore-shapes.ts).
 */

/** What the compactor needs of the shape manager. */
export interface CompactionShapes {
  /** Shapes whose log is ready. */
  readyShapes(): Iterable<LiveShape>
  /** The shape of `handle`, if its log is ready. */
  readyShape(handle: string): LiveShape | undefined
  /** Whether `shape` is still the manager's shape for its handle, with `log`. */
  holds(shape: LiveShape, log: ShapeLog): boolean
}

export interface CompactionRouter {
  retargetBetween(handle: string, make: (current: ShapeTarget) => ShapeTarget | undefined): Promise<boolean>
  /**
   * Whether routed transactions are held back from the store (a subquery
   * move-in runs): the flush before a compaction would not publish those
   * routed before the tee, and the compacted log would have neither them
   * nor their copies.
   */
  readonly advanceHeld?: boolean
}

export interface ShapeCompactorOptions {
  readonly store: ShapeLogStore
  readonly router: CompactionRouter
  readonly shapes: CompactionShapes
  /** A log is due when it holds `ratio` times the entries it had after its last compaction (or when first seen); 0: never. */
  readonly ratio: number
  /** …and at least this many entries more. */
  readonly minEntries: number
  /** How often the logs that grew are checked. */
  readonly intervalMs: number
  /** How long the old log keeps taking copies after the switch. */
  readonly retireAfterMs: number
  /** What one compaction may hold in memory: the merge's map, and the copies the tee holds (each). */
  readonly memoryBytes?: number
  readonly logger?: ShapeLogger | undefined
}

export interface CompactionStats {
  compactions: number
  failures: number
  /** Log bytes replaced by smaller compacted ones, summed. */
  bytesReclaimed: number
  /** Keys held by the largest merge so far (its memory). */
  peakKeys: number
  /** Bytes of routed parts held while the largest merge ran. */
  peakPendingBytes: number
  /** How long the last compaction took, from the tee to the switch. */
  lastDurationMs: number
  running: boolean
  /** Logs the scheduler has checked for being due, summed over its checks. */
  checked: number
}

/** Logs checked in one turn of the event loop (the first check after a start looks at every one). */
const CHECK_SLICE = 1000

/** Entries of the log's snapshot region (its chunks' ranges, no byte read). */
function snapshotEntries(log: ShapeLog): number {
  let count = 0
  let at: LogOffset = BEFORE_ALL
  for (;;) {
    const read = log.read(at)
    read.release()
    if (read.entryCount === 0 || read.nextOffset.tx !== 0n) return count
    count += read.entryCount
    at = read.nextOffset
    if (read.reachedHead) return count
  }
}

export class ShapeCompactor {
  readonly stats: CompactionStats = { compactions: 0, failures: 0, bytesReclaimed: 0, peakKeys: 0, peakPendingBytes: 0, lastDurationMs: 0, running: false, checked: 0 }
  /** Entries of each log after its compaction, or when first seen. */
  private readonly baseline = new WeakMap<ShapeLog, number>()
  private readonly busy = new Set<string>()
  private timer: NodeJS.Timeout | undefined
  private readonly retiring = new Set<NodeJS.Timeout>()
  private readonly abort = new AbortController()
  private running: Promise<unknown> = Promise.resolve()
  private current: Promise<unknown> = Promise.resolve()
  /**
   * Ids of the logs whose published head moved since the last check: only a
   * log that grew can have become due, so a check is as long as the list of
   * logs written to, not of every shape (100k shapes took a few hundred ms).
   */
  private grown = new Set<string>()
  /** The next check looks at every ready shape: a start forgets the baselines, and a log due then need not grow again. */
  private sweepAll = true
  private unsubscribe: (() => void) | undefined

  constructor(private readonly options: ShapeCompactorOptions) {}

  start(): void {
    if (this.options.ratio <= 0 || this.timer !== undefined) return
    this.unsubscribe = this.options.store.onFlush((result) => {
      for (const id of result.advanced) this.grown.add(id)
    })
    const tick = (): void => {
      if (this.abort.signal.aborted) return
      this.timer = setTimeout(() => {
        this.running = this.runDue().finally(tick)
      }, this.options.intervalMs)
      this.timer.unref()
    }
    tick()
  }

  /**
   * Compacts every due shape, one after another; resolves with how many were
   * compacted. Looks at the shapes whose logs grew since the last call (every
   * ready shape the first time), a slice per turn of the event loop.
   */
  async runDue(): Promise<number> {
    const shapes = this.sweepAll ? [...this.options.shapes.readyShapes()] : this.grownShapes()
    this.sweepAll = false
    let done = 0
    for (let i = 0; i < shapes.length; i++) {
      if (i > 0 && i % CHECK_SLICE === 0) await nextTurn()
      if (this.abort.signal.aborted) break
      const shape = shapes[i]!
      const log = shape.log
      if (log === undefined) continue
      this.stats.checked++
      if (!this.isDue(log)) continue
      // Its last compaction's old log is still retiring: looked at again next time, grown or not.
      if (this.busy.has(shape.handle)) this.grown.add(log.id)
      else if ((await this.compact(shape)) !== undefined) done++
    }
    return done
  }

  /** The shapes still served by a log that grew since the last check (a log a compaction replaced is not theirs). */
  private grownShapes(): LiveShape[] {
    const ids = this.grown
    this.grown = new Set()
    const shapes: LiveShape[] = []
    for (const id of ids) {
      const shape = this.options.shapes.readyShape(handleOfLogId(id))
      if (shape !== undefined && shape.log?.id === id) shapes.push(shape)
    }
    return shapes
  }

  private isDue(log: ShapeLog): boolean {
    const entries = log.head().entryCount
    // Most logs never get there: they are not read at all (after a start, a server with 100k shapes checks them all).
    if (entries < this.options.minEntries) return false
    let base = this.baseline.get(log)
    if (base === undefined) {
      // First sight (a restart forgets): the snapshot region's entries, a log's rows before any history.
      base = snapshotEntries(log)
      this.baseline.set(log, base)
    }
    return entries >= base * this.options.ratio && entries - base >= this.options.minEntries
  }

  /** Compacts one shape now (also what the scheduler does); undefined when it could not (gone, busy, failed). */
  compact(shape: LiveShape): Promise<CompactedLog | undefined> {
    const run = this.compactOnce(shape)
    this.current = run
    return run
  }

  private async compactOnce(shape: LiveShape): Promise<CompactedLog | undefined> {
    const old = shape.log
    const handle = shape.handle
    if (old === undefined || this.busy.has(handle) || this.abort.signal.aborted) return undefined
    this.busy.add(handle)
    this.stats.running = true
    const began = performance.now()
    const tee = new TeeTarget(old, old.head().lastOffset.tx, this.options.memoryBytes)
    const entriesAtStart = old.head().entryCount
    let stitching: StitchingTarget | undefined
    const back = (to: ShapeTarget) => (current: ShapeTarget): ShapeTarget | undefined => {
      if (stitching !== undefined) {
        stitching.goLive(to)
        return stitching
      }
      return current === tee ? to : undefined
    }
    let switched = false
    try {
      const routed = await this.options.router.retargetBetween(handle, (current) => {
        // Between transactions, with nothing held: everything routed so far is promised to the store, so the
        // flush below publishes it all and the tee gets the rest. Held: not now (the next check tries again).
        if (this.options.router.advanceHeld === true) return undefined
        if (current === old) return tee
        // A restored shape still dropping what its snapshot holds: the tee goes behind the filter.
        if (current instanceof StitchingTarget) {
          stitching = current
          current.goLive(tee)
          return current
        }
        return undefined
      })
      if (!routed) return undefined
      await this.options.store.flush()
      const until = old.head().lastOffset
      const newId = compactedLogId(handle, generationOfLogId(old.id) + 1)
      const wanted = (): boolean => this.options.shapes.holds(shape, old)
      const result = await compactLog(this.options.store, old, until, newId, tee, this.abort.signal, this.options.memoryBytes, wanted)
      this.stats.peakPendingBytes = Math.max(this.stats.peakPendingBytes, tee.pendingBytes)
      // Invalidated or deleted meanwhile: its new log must not outlive it. Stopped meanwhile: the router and the
      // store are closing, and nothing is switched. A copy the new log refused while it was finished: incomplete.
      if (!this.options.shapes.holds(shape, old) || this.abort.signal.aborted || tee.failed !== undefined) {
        await this.options.store.deleteShape(result.log.id).catch((error: unknown) => {
          // Left behind, it would be restored as the shape after a restart: worth a line in the log.
          this.options.logger?.warn({ handle, log: result.log.id, err: error }, 'deleting an unused compacted shape log failed')
        })
        return undefined
      }
      tee.swap(result.log, old)
      shape.log = result.log
      shape.ready = undefined
      shape.retiring = old
      switched = true
      this.baseline.set(result.log, result.log.head().entryCount)
      this.stats.compactions++
      this.stats.lastDurationMs = performance.now() - began
      this.stats.bytesReclaimed += Math.max(0, result.bytesBefore - result.bytesAfter)
      this.stats.peakKeys = Math.max(this.stats.peakKeys, result.keys)
      this.options.logger?.info(
        { handle, changes: result.changes, keys: result.keys, bytesBefore: result.bytesBefore, bytesAfter: result.bytesAfter },
        'shape log compacted',
      )
      this.retire(shape, old, result.log, back)
      return result
    } catch (error) {
      this.stats.failures++
      // Not again at the next check: only once the log has grown by the ratio again (a log too big to merge, or too busy, would be re-read every interval).
      this.baseline.set(old, entriesAtStart)
      if (!this.abort.signal.aborted && this.options.shapes.holds(shape, old)) {
        this.options.logger?.warn({ handle, err: error }, 'shape log compaction failed; the log stays as it was')
      }
      return undefined
    } finally {
      if (!switched) {
        await this.options.router.retargetBetween(handle, back(old)).catch(() => false)
        this.busy.delete(handle)
      }
      this.stats.running = false
    }
  }

  /** After the grace period: the new log alone takes the parts, and the old one goes. */
  private retire(shape: LiveShape, old: ShapeLog, next: ShapeLog, back: (to: ShapeTarget) => (current: ShapeTarget) => ShapeTarget | undefined): void {
    const timer = setTimeout(() => {
      this.retiring.delete(timer)
      void (async () => {
        try {
          await this.options.router.retargetBetween(shape.handle, back(next))
          if (shape.retiring === old) shape.retiring = undefined
          await this.options.store.deleteShape(old.id)
        } catch (error) {
          this.options.logger?.warn({ handle: shape.handle, err: error }, 'deleting a compacted shape log failed')
        } finally {
          this.busy.delete(shape.handle)
        }
      })()
    }, this.options.retireAfterMs)
    timer.unref()
    this.retiring.add(timer)
  }

  /**
   * Stops: a running compaction is abandoned (its new log removed; the old
   * one stays), and old logs waiting out their grace period are left for the
   * next start's restore to remove.
   */
  async stop(): Promise<void> {
    clearTimeout(this.timer)
    this.unsubscribe?.()
    this.abort.abort()
    for (const t of this.retiring) clearTimeout(t)
    this.retiring.clear()
    await Promise.allSettled([this.running, this.current])
  }
}
