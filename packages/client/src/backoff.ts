/**
 * Retry timing for responses worth retrying (network errors, 5xx, 429): a
 * jittered exponential delay, never shorter than what the server asked for in
 * `retry-after`. Retries go on for ever by default: a sync client outlives
 * server restarts and network outages; the caller's AbortSignal ends it.
 *
 * Jitter is "equal jitter": the delay is uniform in [base/2, base], so many
 * clients cut off at once come back spread out, yet none retries at once.
 */
export interface BackoffOptions {
  /** Base delay of the first retry. */
  readonly initialDelayMs: number
  /** Cap on the base delay (a `retry-after` above it still wins). */
  readonly maxDelayMs: number
  readonly multiplier: number
  /** Give up after this many consecutive failures (the error then reaches `onError`); default: never. */
  readonly maxRetries: number
}

/** 1 s doubling to 32 s, as docs/protocol.md §5.4 describes the official client. */
export const DEFAULT_BACKOFF: BackoffOptions = Object.freeze({
  initialDelayMs: 1_000,
  maxDelayMs: 32_000,
  multiplier: 2,
  maxRetries: Number.POSITIVE_INFINITY,
})

/**
 * Delay before retry number `attempt` (1 for the first retry).
 * `random` is `Math.random` unless a test pins it.
 */
export function backoffDelay(
  attempt: number,
  options: BackoffOptions,
  retryAfterMs: number | undefined,
  random: () => number = Math.random,
): number {
  const exponent = Math.max(0, attempt - 1)
  const base = Math.min(options.maxDelayMs, options.initialDelayMs * options.multiplier ** exponent)
  const jittered = base / 2 + random() * (base / 2)
  return Math.max(jittered, retryAfterMs ?? 0)
}

/**
 * `retry-after` in milliseconds: delta-seconds (`5`) or an HTTP date; an absent
 * or unreadable header, or a date in the past, is `undefined`.
 */
export function parseRetryAfter(header: string | null, nowMs: number): number | undefined {
  if (header === null) return undefined
  const text = header.trim()
  if (/^\d+(\.\d+)?$/.test(text)) return Number(text) * 1000
  const date = Date.parse(text)
  if (Number.isNaN(date)) return undefined
  const delta = date - nowMs
  return delta > 0 ? delta : undefined
}
