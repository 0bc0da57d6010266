import { concurrentRequestLimitExceeded, type SluiceError } from '@sluice/protocol'

/**
 * Admission control (docs/protocol.md §5.4): a count of in-flight requests per kind.
 * `offset=-1` requests can each start a snapshot, so they get a small limit of
 * their own; every other `/v1/shape` request, long-polls included, counts
 * against the large one. Over the limit the request is refused at once with a
 * 503 whose `retry-after` is spread over a few seconds, so refused clients do
 * not return in lock step.
 *
 * How long to wait: spread at random from 1 s to twice the time the requests
 * in flight take to clear at the rate requests of that kind have been
 * completing (over the last two seconds), and never more than Electric's
 * 6-10 s. The refused clients then come back while slots free up, rather
 * than all after the burst has cleared and the server has gone idle, as they
 * did with a fixed 6-10 s (a thousand shapes asked for at once took several
 * such rounds); one that comes back too early is refused again, which costs
 * little. With nothing completing (a snapshot held by a lock, long-polls
 * parked) it is 6-10 s.
 */
export type RequestKind = 'initial' | 'existing'

/** Electric answers 6..10 s at random. */
const RETRY_AFTER_MIN_S = 6
const RETRY_AFTER_MAX_S = 10
/** Completions are counted in two buckets of this length: the rate is over the last one to two of them. */
const RATE_BUCKET_MS = 1000

export class Admission {
  private readonly inFlight = { initial: 0, existing: 0 }
  private readonly done = { initial: new CompletionRate(), existing: new CompletionRate() }

  constructor(
    private readonly limits: Readonly<Record<RequestKind, number>>,
    private readonly random: () => number = Math.random,
    private readonly now: () => number = () => performance.now(),
  ) {}

  /** A release function, or the 503 to answer with. Call the release exactly once. */
  acquire(kind: RequestKind): (() => void) | SluiceError {
    const limit = this.limits[kind]
    if (this.inFlight[kind] >= limit) return concurrentRequestLimitExceeded(kind, limit, this.retryAfter(kind))
    this.inFlight[kind]++
    let released = false
    return () => {
      if (released) return
      released = true
      this.inFlight[kind]--
      this.done[kind].add(this.now())
    }
  }

  get initial(): number {
    return this.inFlight.initial
  }

  get existing(): number {
    return this.inFlight.existing
  }

  private retryAfter(kind: RequestKind): number {
    const spread = this.random()
    const fallback = RETRY_AFTER_MIN_S + Math.floor(spread * (RETRY_AFTER_MAX_S - RETRY_AFTER_MIN_S + 1))
    const perSecond = this.done[kind].perSecond(this.now())
    if (perSecond <= 0) return fallback
    const clearS = this.inFlight[kind] / perSecond
    return Math.max(1, Math.min(fallback, Math.ceil(2 * clearS * spread)))
  }
}

/** Completions per second over the current and the previous bucket. */
class CompletionRate {
  private bucket = Number.NEGATIVE_INFINITY
  private current = 0
  private previous = 0

  add(at: number): void {
    this.roll(at)
    this.current++
  }

  perSecond(at: number): number {
    this.roll(at)
    const into = at - this.bucket * RATE_BUCKET_MS
    return ((this.previous + this.current) * 1000) / (RATE_BUCKET_MS + into)
  }

  private roll(at: number): void {
    const bucket = Math.floor(at / RATE_BUCKET_MS)
    if (bucket === this.bucket) return
    this.previous = bucket === this.bucket + 1 ? this.current : 0
    this.current = 0
    this.bucket = bucket
  }
}
