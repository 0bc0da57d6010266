import { type LogMode, QueryParam, type ReplicaMode } from '@sluice/protocol'
import type { BackoffOptions } from './backoff.js'
import { InvalidOptionsError } from './errors.js'
import type { Parsers } from './value-parser.js'

/**
 * What a ShapeStream is given: the shape's params, headers, where to start,
 * the transport and its timeouts, and the ports for time and randomness; with
 * their defaults and the check that custom params leave the stream's own alone.
 */

/** A value, or a function computing it afresh for each request. */
export type Dynamic<T> = T | (() => T | Promise<T>)

/** Positional where-clause values (`$1` is the first), or `{1: …, 2: …}`. */
export type WhereParams = readonly string[] | Readonly<Record<number | string, string>>

export interface ShapeParams {
  /** `table` or `schema.table`, quoted where case or special characters matter. */
  readonly table: Dynamic<string>
  readonly where?: Dynamic<string | undefined>
  /** Values for `$n` placeholders in `where`. */
  readonly params?: Dynamic<WhereParams | undefined>
  /** Column names, exactly as in the table (each is quoted on the wire). */
  readonly columns?: Dynamic<readonly string[] | undefined>
  readonly replica?: Dynamic<ReplicaMode | undefined>
  /** Anything else is sent as a query parameter of its own (e.g. for an auth proxy). */
  readonly [custom: string]: Dynamic<string | readonly string[] | WhereParams | undefined>
}

/** What `onError` may return to keep the stream going: options merged over the current ones. */
export interface RetryOptions {
  readonly params?: Partial<ShapeParams>
  readonly headers?: Readonly<Record<string, Dynamic<string>>>
}

export interface ShapeStreamOptions {
  /** The shape endpoint, e.g. `http://localhost:3000/v1/shape`. */
  readonly url: string
  readonly params: ShapeParams
  /** `changes_only` skips the initial snapshot (docs/protocol.md §2). Default `full`. */
  readonly log?: LogMode
  readonly headers?: Readonly<Record<string, Dynamic<string>>>
  /** Where to start: `-1` (default), `now`, or an offset saved earlier (with `handle`). */
  readonly offset?: string
  readonly handle?: string
  /** Use server-sent events for live updates, falling back to long-poll when they fail. */
  readonly liveSse?: boolean
  readonly fetch?: typeof fetch
  readonly signal?: AbortSignal
  /** Parsers by type name, over the defaults (`value-parser.ts`). */
  readonly parser?: Parsers
  /**
   * Called with an error that stops the stream (a 4xx other than 409/429, an
   * unusable response, a parse error). Return new params/headers to retry
   * with them; return nothing to let the stream stop.
   */
  readonly onError?: (error: Error) => void | RetryOptions | Promise<void | RetryOptions>
  readonly backoff?: Partial<BackoffOptions>
  /** A live long-poll that brings nothing (no answer, or a body that stops) for this long is abandoned and retried (server holds ~20 s). */
  readonly liveRequestTimeoutMs?: number
  /** An SSE request that brings nothing, not even a keep-alive (the server sends one every 21 s), for this long is abandoned and retried. */
  readonly sseIdleTimeoutMs?: number
  /** An SSE connection shorter than this that delivered nothing counts towards the fallback. */
  readonly minSseConnectionMs?: number
  /** The clock and the wait between retries; real ones by default (a port for tests). */
  readonly timers?: Timers
  /** Randomness for jitter and cache busters; `Math.random` by default. */
  readonly random?: () => number
}

export interface Timers {
  now(): number
  /** Resolves after `ms`, or rejects when `signal` aborts. */
  sleep(ms: number, signal: AbortSignal): Promise<void>
}

export const realTimers: Timers = {
  now: () => Date.now(),
  sleep: (ms, signal) =>
    new Promise<void>((resolve, reject) => {
      if (signal.aborted) return reject(signal.reason)
      const timer = setTimeout(() => {
        signal.removeEventListener('abort', onAbort)
        resolve()
      }, ms)
      const onAbort = (): void => {
        clearTimeout(timer)
        reject(signal.reason)
      }
      signal.addEventListener('abort', onAbort, { once: true })
    }),
}

/** The official client's watchdog: comfortably above the server's 20 s hold (§4.4). */
export const DEFAULT_LIVE_REQUEST_TIMEOUT_MS = 45_000
/** Over two of the server's 21 s SSE keep-alives. */
export const DEFAULT_SSE_IDLE_TIMEOUT_MS = 45_000
/** §5.5: connections shorter than this are suspicious. */
export const DEFAULT_MIN_SSE_CONNECTION_MS = 1_000

/** Query parameters the stream owns; a custom param may not use them. */
const RESERVED_PARAMS: ReadonlySet<string> = new Set([
  QueryParam.offset,
  QueryParam.handle,
  QueryParam.live,
  QueryParam.liveSse,
  QueryParam.experimentalLiveSse,
  QueryParam.cursor,
  QueryParam.log,
  QueryParam.cacheBuster,
  QueryParam.expiredHandle,
])

export function validateParams(params: ShapeParams): void {
  if (params.table === undefined) throw new InvalidOptionsError('params.table is required')
  for (const name of Object.keys(params)) {
    if (RESERVED_PARAMS.has(name)) throw new InvalidOptionsError(`"${name}" is managed by the stream and cannot be set in params`)
  }
}
