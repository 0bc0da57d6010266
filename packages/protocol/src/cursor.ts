/**
 * The live cursor (docs/protocol.md §4.4), sent as `electric-cursor` on every
 * `live=true` response and echoed back by clients as `cursor=`.
 *
 * Time is cut into windows as long as the long-poll timeout, counted from a
 * fixed epoch; the cursor is the end of the current window. Clients polling in
 * the same window therefore build the same URL and a CDN collapses them into one
 * origin request, while the next window's URL is new, so a cached answer is
 * never replayed forever. If a client already holds a cursor at or past the
 * current window (it polled twice within one window, or its clock ran ahead),
 * it gets its own cursor plus a random jitter instead, which moves it off the
 * shared URL rather than letting it loop on a cached response.
 */

/** 2024-10-09T00:00:00Z: the epoch Electric counts windows from, kept so cursors match its own. */
export const CURSOR_EPOCH_MS = Date.UTC(2024, 9, 9)

/** Electric's default long-poll hold; the official client gives up at 45 s. */
export const DEFAULT_LONG_POLL_TIMEOUT_MS = 20_000

/** Jitter added to a colliding cursor: 1..3600 s, wide enough to spread lock-step clients for good. */
export const CURSOR_JITTER_MIN_SECONDS = 1
export const CURSOR_JITTER_MAX_SECONDS = 3600

export interface CursorInput {
  /** Wall-clock time, ms since the Unix epoch. */
  readonly nowMs: number
  readonly longPollTimeoutMs: number
  /** The request's `cursor` parameter, if any. */
  readonly requestCursor: string | undefined
  /** Uniform in [0, 1), like `Math.random`. */
  readonly random: () => number
}

const INTEGER = /^[+-]?[0-9]+$/

/**
 * The `electric-cursor` value for a live response.
 *
 * A request cursor that is not an integer (absent, empty, garbage) counts as 0.
 * Integers are compared as BigInt, so a client echoing an absurd value gets a
 * well-defined answer instead of a float.
 */
export function nextCursor(input: CursorInput): string {
  const intervalSeconds = BigInt(Math.floor(input.longPollTimeoutMs / 1000))
  if (intervalSeconds <= 0n) return '0'
  const elapsedSeconds = BigInt(Math.trunc((input.nowMs - CURSOR_EPOCH_MS) / 1000))
  const next = ceilDiv(elapsedSeconds, intervalSeconds) * intervalSeconds
  const previous = input.requestCursor !== undefined && INTEGER.test(input.requestCursor)
    ? BigInt(input.requestCursor)
    : 0n
  if (next > previous) return next.toString()
  const span = CURSOR_JITTER_MAX_SECONDS - CURSOR_JITTER_MIN_SECONDS + 1
  const jitter = CURSOR_JITTER_MIN_SECONDS + Math.min(span - 1, Math.floor(input.random() * span))
  return (previous + BigInt(jitter)).toString()
}

function ceilDiv(a: bigint, b: bigint): bigint {
  const q = a / b
  return a % b > 0n ? q + 1n : q
}
