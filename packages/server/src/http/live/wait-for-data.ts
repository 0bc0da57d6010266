/**
 * The long-poll wait (PROTOCOL.md §4.4) for the `/v1/shape` route: answer at
 * once if the log already holds data past the request offset, else park on
 * `LiveWaiters` until it does, the timeout passes, the shape is invalidated or
 * the request goes away.
 *
 * The head check and the registration happen in one synchronous step (flush
 * listeners run synchronously), so a flush can never slip between them. A wake
 * that does not put data past `after` (an offset beyond the head waiting for the
 * log to catch up, §4.1) waits again for the rest of the time.
 */
import type { LogOffset } from '@sluice/protocol'
import { compareOffsets } from '@sluice/protocol'
import type { LogHead } from '@sluice/storage'
import type { LiveWaiters } from './live-waiters.js'

export type LongPollResult = 'data' | 'timeout' | 'invalidated' | 'aborted'

export async function waitForData(
  log: { readonly id: string; head(): Pick<LogHead, 'lastOffset'> },
  after: LogOffset,
  waiters: LiveWaiters,
  timeoutMs: number,
  signal?: AbortSignal,
): Promise<LongPollResult> {
  const deadline = waiters.now() + timeoutMs
  for (;;) {
    if (compareOffsets(log.head().lastOffset, after) > 0) return 'data'
    const remaining = deadline - waiters.now()
    if (remaining <= 0) return 'timeout'
    const result = await waiters.wait(log.id, { timeoutMs: remaining, signal })
    if (result !== 'advanced') return result
  }
}
