/**
 * Reconnect delays: exponential, capped, with "equal jitter" (half the delay
 * fixed, half random) so that many servers losing the same Postgres do not
 * come back in lock step, while none retries sooner than half its schedule.
 */
export interface BackoffPolicy {
  /** Delay before the first retry. */
  readonly initialMs: number
  /** No delay exceeds this. */
  readonly maxMs: number
  readonly multiplier: number
}

export const DEFAULT_BACKOFF: BackoffPolicy = {
  // A Postgres restart takes about a second here: first retries come quickly.
  initialMs: 250,
  maxMs: 30_000,
  multiplier: 2,
}

/** Delay before retry number `attempt` (0-based); `random` returns [0, 1). */
export function backoffDelay(attempt: number, policy: BackoffPolicy = DEFAULT_BACKOFF, random: () => number = Math.random): number {
  const base = Math.min(policy.maxMs, policy.initialMs * policy.multiplier ** Math.max(0, attempt))
  return Math.round(base / 2 + (random() * base) / 2)
}
