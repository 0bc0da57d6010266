import { concurrentRequestLimitExceeded, type SluiceError } from '@sluice/protocol'

/**
 * Admission control (docs/protocol.md §5.4): a count of in-flight requests per kind.
 * `offset=-1` requests can each start a snapshot, so they get a small limit of
 * their own; every other `/v1/shape` request, long-polls included, counts
 * against the large one. Over the limit the request is refused at once with a
 * 503 whose `retry-after` is spread over a few seconds, so refused clients do
 * not return in lock step.
 */
export type RequestKind = 'initial' | 'existing'

/** Electric answers 6..10 s at random. */
const RETRY_AFTER_MIN_S = 6
const RETRY_AFTER_MAX_S = 10

export class Admission {
  private readonly inFlight = { initial: 0, existing: 0 }

  constructor(private readonly limits: Readonly<Record<RequestKind, number>>, private readonly random: () => number = Math.random) {}

  /** A release function, or the 503 to answer with. Call the release exactly once. */
  acquire(kind: RequestKind): (() => void) | SluiceError {
    const limit = this.limits[kind]
    if (this.inFlight[kind] >= limit) {
      const retryAfter = RETRY_AFTER_MIN_S + Math.floor(this.random() * (RETRY_AFTER_MAX_S - RETRY_AFTER_MIN_S + 1))
      return concurrentRequestLimitExceeded(kind, limit, retryAfter)
    }
    this.inFlight[kind]++
    let released = false
    return () => {
      if (released) return
      released = true
      this.inFlight[kind]--
    }
  }

  get initial(): number {
    return this.inFlight.initial
  }

  get existing(): number {
    return this.inFlight.existing
  }
}
