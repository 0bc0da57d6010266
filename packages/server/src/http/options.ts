import { DEFAULT_LONG_POLL_TIMEOUT_MS, DEFAULT_MAX_AGE_SECONDS, DEFAULT_STALE_AGE_SECONDS } from '@sluice/protocol'
import {
  DEFAULT_CLIENT_SHAPES_PER_MINUTE,
  DEFAULT_INITIAL_QUEUE_LENGTH,
  DEFAULT_INITIAL_QUEUE_WAIT_MS,
  DEFAULT_MAX_CONCURRENT_EXISTING,
  DEFAULT_MAX_CONCURRENT_INITIAL,
  DEFAULT_MAX_CREATING_SHAPES,
  DEFAULT_RANGE_CACHE_BYTES,
  DEFAULT_SEND_TIMEOUT_MS,
  DEFAULT_SENDFILE_MIN_BYTES,
  DEFAULT_SSE_TIMEOUT_MS,
} from '../defaults.js'

/**
 * Settings of the HTTP layer. The config schema (`src/config.ts`) maps flags and
 * env vars onto these; nothing here reads the environment.
 */
export interface HttpOptions {
  /** How long a `live=true` request is held without new data (docs/protocol.md §4.4). */
  readonly longPollTimeoutMs: number
  /** `max-age` of non-live, non-initial responses (§5.2). */
  readonly maxAge: number
  /** `stale-while-revalidate` of the same responses (§5.2). */
  readonly staleAge: number
  /** When set, every `/v1/shape` request except OPTIONS needs `secret=` (or `api_secret=`) equal to it. */
  readonly secret?: string | undefined
  /** Whether `DELETE /v1/shape` works; off by default, as in Electric. */
  readonly allowDelete: boolean
  /** Concurrent `offset=-1` requests before 503 (admission control, §5.4). */
  readonly maxConcurrentInitial: number
  /** `offset=-1` requests over `maxConcurrentInitial` that wait for a slot, in arrival order, before 503 (0: none wait). */
  readonly initialQueueLength: number
  /** The longest an `offset=-1` request waits in that queue before 503. */
  readonly initialQueueWaitMs: number
  /** Concurrent other `/v1/shape` requests (long-polls included) before 503. */
  readonly maxConcurrentExisting: number
  /** Shapes being created at once before a request that would create one more gets 503 (0: no limit). */
  readonly maxCreatingShapes: number
  /** New shapes per client per minute before 429 (0: no limit). */
  readonly clientShapesPerMinute: number
  /** The request header that tells clients apart for `clientShapesPerMinute` (lower case); unset: the peer address. */
  readonly clientIdHeader?: string | undefined
  /** Lifetime of an SSE stream (§5.5); also sets the SSE cache lifetime. */
  readonly sseTimeoutMs: number
  /** With a sendfile body path (`BuildAppOptions.bodyPath`): bodies with at least this many file-backed bytes use it. */
  readonly sendfileMinBytes: number
  /** A response body whose client takes none of it for this long (between one and two of it) is cut (`stalled-sends.ts`). */
  readonly sendTimeoutMs: number
  /** Bytes of recently served range bodies kept in memory (`range-cache.ts`); 0: none. */
  readonly rangeCacheBytes: number
  /**
   * The longest a client may take to send one whole request, headers and body
   * (a POST subset, a DELETE): one trickled a byte at a time is cut with 408.
   * Only the request's arrival is timed, never a long-poll's answer.
   */
  readonly requestTimeoutMs: number
  /**
   * Live long-polls that wait are parked outside node:http, by descriptor,
   * when the native addon is given (`BuildAppOptions.addon`): a fraction of
   * the memory per waiting client. False: they wait in node:http.
   */
  readonly parkLongPolls: boolean
}

/** Electric's defaults, except where docs/protocol.md says otherwise. */
export const DEFAULT_HTTP_OPTIONS: HttpOptions = Object.freeze({
  longPollTimeoutMs: DEFAULT_LONG_POLL_TIMEOUT_MS,
  maxAge: DEFAULT_MAX_AGE_SECONDS,
  staleAge: DEFAULT_STALE_AGE_SECONDS,
  allowDelete: false,
  maxConcurrentInitial: DEFAULT_MAX_CONCURRENT_INITIAL,
  initialQueueLength: DEFAULT_INITIAL_QUEUE_LENGTH,
  initialQueueWaitMs: DEFAULT_INITIAL_QUEUE_WAIT_MS,
  maxConcurrentExisting: DEFAULT_MAX_CONCURRENT_EXISTING,
  maxCreatingShapes: DEFAULT_MAX_CREATING_SHAPES,
  clientShapesPerMinute: DEFAULT_CLIENT_SHAPES_PER_MINUTE,
  sseTimeoutMs: DEFAULT_SSE_TIMEOUT_MS,
  sendfileMinBytes: DEFAULT_SENDFILE_MIN_BYTES,
  sendTimeoutMs: DEFAULT_SEND_TIMEOUT_MS,
  rangeCacheBytes: DEFAULT_RANGE_CACHE_BYTES,
  requestTimeoutMs: 60_000,
  parkLongPolls: true,
})

/**
 * `electric-server` on every response (docs/protocol.md §1). The version is the
 * Electric sync-service release whose behaviour this server reproduces
 * (the release docs/protocol.md describes), not Sluice's own.
 */
export const ELECTRIC_SERVER_VALUE = 'ElectricSQL/1.7.12'
