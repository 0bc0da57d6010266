/**
 * Live mode for `/v1/shape`: long-poll waiting and SSE streaming (docs/protocol.md
 * §4.4, §5.5). Independent of fastify; the route wires it in.
 */
export {
  type AbortLike,
  DEFAULT_WAIT_RESOLUTION_MS,
  type FlushSource,
  LiveWaiters,
  type LiveWaitersOptions,
  type WaitOptions,
  type WaitResult,
  Waiter,
} from './live-waiters.js'
export { DataWait, type LongPollResult, type ShapeStatusSource, type WaitedLog, type WaitForDataOptions, waitForData } from './wait-for-data.js'
export {
  DEFAULT_SSE_KEEP_ALIVE_MS,
  DEFAULT_SSE_TIMEOUT_MS,
  type ServeSseOptions,
  type SseRead,
  type SseBatch,
  type SseEnded,
  type SseOutcome,
  readFromStore,
  serveSse,
  startSse,
} from './sse.js'
export { DEFAULT_SHARED_READ_BYTES, SharedRange, SharedReads, type SharedReadsOptions } from './shared-reads.js'
export {
  KEEP_ALIVE_COMMENT,
  MalformedEntriesError,
  forEachEntry,
  frameEntries,
  frameEvent,
  splitEntries,
} from './split-entries.js'
