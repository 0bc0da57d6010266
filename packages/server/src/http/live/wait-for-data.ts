/**
 * The long-poll wait (docs/protocol.md §4.4), the one loop `/v1/shape` waits in:
 * answer at once if the log already holds what the request waits for, else
 * park on `LiveWaiters` until it does, the timeout passes, the shape is
 * invalidated or the request goes away.
 *
 * Two things are waited for: data strictly after the request offset (a
 * `live=true` long-poll, the default), or the head reaching an offset beyond it
 * (`until: 'reach'`, an offset the client got from another server that is
 * ahead, §4.1). A wake that does not get there waits again for the rest of the
 * time.
 *
 * The head check and the registration happen in one synchronous step (flush
 * listeners run synchronously), so a flush can never slip between them. The
 * shape's status is checked before every wait too: `LiveWaiters.invalidate`
 * only wakes current waiters.
 *
 * `DataWait` is the loop as an object: a request that parks is that object
 * and nothing else (no suspended calls, promises or closures), which is most
 * of what ten thousand parked long-polls cost beyond Node's own HTTP objects
 * (docs/performance-notes.md, "What a parked long-poll holds").
 * `waitForData` is the same loop as a promise.
 */
import type { LogOffset } from '@sluice/protocol'
import { compareOffsets } from '@sluice/protocol'
import type { LogHead } from '@sluice/storage'
import { type AbortLike, type LiveWaiters, Waiter, type WaitResult } from './live-waiters.js'

export type LongPollResult = 'data' | 'timeout' | 'invalidated' | 'aborted'

/** Whether a shape is still served (a `ShapeService` is one). */
export interface ShapeStatusSource {
  status(handle: string): string
}

export interface WaitForDataOptions {
  /** `'past'` (default): an entry strictly after `after`. `'reach'`: the head at or past `after`. */
  readonly until?: 'past' | 'reach'
  /** Checked before every wait: a shape no longer `'active'` ends the wait with `'invalidated'`. */
  readonly shapes?: ShapeStatusSource
}

/** What is waited on: a log's id and head. */
export type WaitedLog = { readonly id: string; head(): Pick<LogHead, 'lastOffset'> }

const DEFAULTS: WaitForDataOptions = Object.freeze({})

/**
 * One wait for data at a time: `waitForData` starts it, and its outcome comes
 * to `dataWaitEnded`, once, perhaps before `waitForData` returns (the data is
 * there already). `cancelDataWait` ends a parked wait with `'aborted'`.
 */
export abstract class DataWait<L extends WaitedLog = WaitedLog> extends Waiter {
  /** The log and offset of the last wait begun: kept past its end, for the answer. */
  protected waitedLog: L | undefined = undefined
  protected waitedAfter: LogOffset | undefined = undefined
  private waitOptions: WaitForDataOptions = DEFAULTS
  private waiters: LiveWaiters | undefined = undefined
  /** What waiters and statuses know the wait by: the shape's handle, which a compacted log's store id is not. */
  private waitedKey = ''
  /** Whole milliseconds, rounded up (never early), so that the field holds a small integer rather than a boxed double. */
  private deadline = 0

  protected abstract dataWaitEnded(result: LongPollResult): void

  /** Checked before each park: true ends the wait with 'aborted' instead (the request went away before it parked). */
  protected cancelled(): boolean {
    return false
  }

  /** `key`: the shape's handle when it is not `log.id` (a compacted log, shapes/compaction/log-ids.ts). */
  protected waitForData(log: L, after: LogOffset, waiters: LiveWaiters, timeoutMs: number, options: WaitForDataOptions = DEFAULTS, key: string = log.id): void {
    this.waitedLog = log
    this.waitedKey = key
    this.waitedAfter = after
    this.waitOptions = options
    this.waiters = waiters
    this.deadline = Math.ceil(waiters.now() + timeoutMs)
    this.look()
  }

  /** Ends a parked wait with 'aborted' (its `dataWaitEnded` is called now); nothing if none is parked. */
  protected cancelDataWait(): void {
    this.waiters?.cancel(this)
  }

  /** From LiveWaiters: looks again after a flush, else the wait is over. */
  wake(result: WaitResult): void {
    if (result === 'advanced') this.look()
    else this.end(result)
  }

  private look(): void {
    const log = this.waitedLog!
    const waiters = this.waiters!
    const { shapes, until } = this.waitOptions
    if (shapes !== undefined && shapes.status(this.waitedKey) !== 'active') return this.end('invalidated')
    let head: LogOffset
    try {
      head = log.head().lastOffset
    } catch {
      // The log this wait holds is gone under it (on a replica, a log the writer compacted and then deleted, read
      // by its successor's flush): its shape is to be looked up again, as after an invalidation. Never a throw
      // here: a wake runs inside the waiters' flush listener, which must not throw.
      return this.end('invalidated')
    }
    if (compareOffsets(head, this.waitedAfter!) >= (until === 'reach' ? 0 : 1)) return this.end('data')
    const remaining = this.deadline - waiters.now()
    if (remaining <= 0) return this.end('timeout')
    if (this.cancelled()) return this.end('aborted')
    const now = waiters.park(this, this.waitedKey, remaining)
    if (now !== undefined) this.end(now)
  }

  private end(result: LongPollResult): void {
    this.waiters = undefined
    this.dataWaitEnded(result)
  }
}

/** `DataWait` as a promise, with a signal to cancel it. */
class PromisedDataWait extends DataWait {
  private onAbort: (() => void) | undefined = undefined

  constructor(
    private readonly resolve: (result: LongPollResult) => void,
    private readonly signal: AbortLike | undefined,
  ) {
    super()
  }

  start(log: WaitedLog, after: LogOffset, waiters: LiveWaiters, timeoutMs: number, options: WaitForDataOptions): void {
    if (this.signal !== undefined) {
      this.onAbort = () => this.cancelDataWait()
      this.signal.addEventListener('abort', this.onAbort, { once: true })
    }
    this.waitForData(log, after, waiters, timeoutMs, options)
  }

  protected override cancelled(): boolean {
    return this.signal?.aborted === true
  }

  protected dataWaitEnded(result: LongPollResult): void {
    if (this.onAbort !== undefined) {
      this.signal!.removeEventListener('abort', this.onAbort)
      this.onAbort = undefined
    }
    this.resolve(result)
  }
}

export function waitForData(
  log: WaitedLog,
  after: LogOffset,
  waiters: LiveWaiters,
  timeoutMs: number,
  signal?: AbortLike,
  options: WaitForDataOptions = DEFAULTS,
): Promise<LongPollResult> {
  return new Promise<LongPollResult>((resolve) => new PromisedDataWait(resolve, signal).start(log, after, waiters, timeoutMs, options))
}
