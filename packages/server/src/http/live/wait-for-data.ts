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
 */
import type { LogOffset } from '@sluice/protocol'
import { compareOffsets } from '@sluice/protocol'
import type { LogHead } from '@sluice/storage'
import type { AbortLike, LiveWaiters } from './live-waiters.js'

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

const DEFAULTS: WaitForDataOptions = Object.freeze({})

/** `log.id` is the shape's handle, what waiters and statuses are keyed by (a compacted log's store id is not). */
export async function waitForData(
  log: { readonly id: string; head(): Pick<LogHead, 'lastOffset'> },
  after: LogOffset,
  waiters: LiveWaiters,
  timeoutMs: number,
  signal?: AbortLike,
  options: WaitForDataOptions = DEFAULTS,
): Promise<LongPollResult> {
  const least = options.until === 'reach' ? 0 : 1
  const shapes = options.shapes
  const deadline = waiters.now() + timeoutMs
  for (;;) {
    if (shapes !== undefined && shapes.status(log.id) !== 'active') return 'invalidated'
    if (compareOffsets(log.head().lastOffset, after) >= least) return 'data'
    const remaining = deadline - waiters.now()
    if (remaining <= 0) return 'timeout'
    const result = await waiters.wait(log.id, { timeoutMs: remaining, signal })
    if (result !== 'advanced') return result
  }
}
