import { concurrentRequestLimitExceeded, type SluiceError } from '@sluice/protocol'
import type { FastifyRequest } from 'fastify'
import { ServerError } from '../errors.js'
import type { CreationGate } from '../shape-service.js'
import { AdmissionQueue, type AdmissionWaiter, type QueueLimits, type QueueStats } from './admission-queue.js'

export type { AdmissionWaiter, QueueLimits, QueueStats } from './admission-queue.js'

/**
 * Admission control (docs/protocol.md §5.4): a count of in-flight requests per kind.
 * `offset=-1` requests can each start a snapshot, so they get a small limit of
 * their own; every other `/v1/shape` request, long-polls included, counts
 * against the large one. Over the limit a request of a kind with a queue
 * (`offset=-1` by default) waits in it for a slot, in arrival order
 * (`enterOrWait`, `admission-queue.ts`); one that finds the queue full, or
 * waits its longest, is refused, as is one over the limit of a kind without a
 * queue: a 503 whose `retry-after` is spread over a few seconds, so refused
 * clients do not return in lock step.
 *
 * Invariant: a kind's queue is empty unless all its slots are taken. A freed
 * slot goes straight to the head of the queue (`leave`), so the in-flight
 * count stays at the limit while anyone waits, and a newcomer finds it full
 * and queues behind them.
 *
 * New shapes are admitted apart (`creationGate`), since any kind of request
 * can create one (a request naming a retired handle gets its replacement):
 * - at most `maxCreating` shapes being created at once, server-wide: more
 *   wait for a creation slot in a queue of their own, with the initial
 *   queue's length and longest wait (an initial request admitted past the
 *   creation limit would otherwise be refused after all); past those, 503
 *   `creation_limit_exceeded`, retried within seconds;
 * - at most `clientPerMinute` new shapes per client, as a token bucket (that
 *   many at once, refilled evenly over a minute): more get 429
 *   `shape_rate_limited`, with `retry-after` when the next one is allowed.
 *
 * How long to wait: spread at random from 1 s to twice the time the requests
 * in flight and queued take to clear at the rate requests of that kind have been
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

/** Creations finish within seconds (a snapshot each), so refused ones come back sooner, also spread. */
const CREATION_RETRY_MIN_S = 1
const CREATION_RETRY_MAX_S = 5

/** Client buckets remembered at most; past it the full ones (clients idle for a minute) are dropped first. */
const MAX_CLIENT_BUCKETS = 100_000

const MINUTE_MS = 60_000

export interface CreationLimits {
  /** Shapes being created at once, server-wide (0: no limit). */
  readonly maxCreating: number
  /** New shapes per client per minute (0: no limit). */
  readonly clientPerMinute: number
}

/** A new shape refused by admission control: 429 `shape_rate_limited` or 503 `creation_limit_exceeded`. */
export class AdmissionError extends ServerError<'shape_rate_limited' | 'creation_limit_exceeded'> {
  override readonly name = 'AdmissionError'

  constructor(
    code: 'shape_rate_limited' | 'creation_limit_exceeded',
    message: string,
    /** Seconds for `retry-after`. */
    readonly retryAfter: number,
  ) {
    super(code, message)
  }
}

interface Bucket {
  tokens: number
  at: number
}

/** Requests of a kind refused with 503, by why: over the limit (no queue), the queue full, or waited too long. */
export interface RefusalCounts {
  limit: number
  queueFull: number
  queueWait: number
}

export interface AdmissionStats {
  readonly inFlight: Readonly<Record<RequestKind, number>>
  /** Per kind with a queue, and `creation`: new shapes waiting for a creation slot. */
  readonly queues: Partial<Record<RequestKind | 'creation', QueueStats>>
  readonly refused: Readonly<Record<RequestKind, Readonly<RefusalCounts>>>
}

export class Admission {
  private readonly inFlight = { initial: 0, existing: 0 }
  private readonly queues: Partial<Record<RequestKind, AdmissionQueue>> = {}
  private readonly refusals: Record<RequestKind, RefusalCounts> = {
    initial: { limit: 0, queueFull: 0, queueWait: 0 },
    existing: { limit: 0, queueFull: 0, queueWait: 0 },
  }
  private readonly done = { initial: new CompletionRate(), existing: new CompletionRate() }
  private creating = 0
  /** New shapes waiting for a creation slot (past `maxCreating`), when the initial requests have a queue. */
  private readonly creationQueue: AdmissionQueue | undefined
  private readonly buckets = new Map<string, Bucket>()
  /** Admits new shapes; its `evict` lets them evict the least recently used shape past the shape limit. */
  readonly creationGate: CreationGate
  /** The same, for a replacement the server makes on its own (a 409's new handle): it never evicts another shape. */
  readonly replacementGate: CreationGate

  constructor(
    private readonly limits: Readonly<Record<RequestKind, number>>,
    private readonly random: () => number = Math.random,
    private readonly creation: CreationLimits = { maxCreating: 0, clientPerMinute: 0 },
    private readonly now: () => number = () => performance.now(),
    /** Kinds whose requests over the limit wait; without one (or of length 0) they are refused at once. */
    queues: Partial<Record<RequestKind, QueueLimits>> = {},
  ) {
    for (const kind of ['initial', 'existing'] as const) {
      const limits = queues[kind]
      if (limits === undefined || limits.length <= 0) continue
      this.queues[kind] = new AdmissionQueue(limits, now, (waiter) => {
        this.refusals[kind].queueWait++
        waiter.refused(this.refusal(kind))
      })
    }
    const creationLimits = queues.initial
    if (creation.maxCreating > 0 && creationLimits !== undefined && creationLimits.length > 0) {
      this.creationQueue = new AdmissionQueue(creationLimits, now, (waiter) => waiter.refused(this.creationRefusal()))
    }
    const admit = (client: string | undefined): Promise<() => void> => this.admitCreation(client)
    this.creationGate = Object.freeze({ admit, evict: true })
    this.replacementGate = Object.freeze({ admit, evict: false })
  }

  /**
   * `creationGate` for one request: a wait for a creation slot ends when
   * `signal` aborts (its client went away), so a client that asks for shapes
   * and leaves at once cannot keep the creation queue full of shapes nobody
   * will read. Once admitted, the creation goes on (another request may want it).
   */
  creationGateFor(signal: AbortSignal): CreationGate {
    return { admit: (client) => this.admitCreation(client, signal), evict: true }
  }

  /** A release function, or the 503 to answer with. Call the release exactly once. */
  acquire(kind: RequestKind): (() => void) | SluiceError {
    const refused = this.enter(kind)
    if (refused !== undefined) return refused
    let released = false
    return () => {
      if (released) return
      released = true
      this.leave(kind)
    }
  }

  /**
   * `acquire` without the release function: undefined when admitted, and then
   * the caller calls `leave(kind)` exactly once. For a request that may be held
   * a long time (a parked long-poll), where a closure each adds up.
   */
  enter(kind: RequestKind): SluiceError | undefined {
    if (this.inFlight[kind] >= this.limits[kind]) {
      this.refusals[kind].limit++
      return this.refusal(kind)
    }
    this.inFlight[kind]++
    return undefined
  }

  /**
   * `enter`, or over the limit a place at the back of the kind's queue: true
   * when admitted now (then as after `enter`), false when queued (`waiter`
   * hears later whether it was admitted or refused; `cancel` takes it out if
   * its client goes away first), or the 503 to answer with when the kind has
   * no queue or it is full.
   */
  enterOrWait(kind: RequestKind, waiter: AdmissionWaiter): boolean | SluiceError {
    const queue = this.queues[kind]
    if (queue === undefined) return this.enter(kind) ?? true
    if (this.inFlight[kind] < this.limits[kind]) {
      this.inFlight[kind]++
      return true
    }
    if (queue.add(waiter)) return false
    this.refusals[kind].queueFull++
    return this.refusal(kind)
  }

  /** Takes a queued waiter out (its client went away): it holds no slot and is never called back. No-op if it is not queued. */
  cancel(kind: RequestKind, waiter: AdmissionWaiter): void {
    this.queues[kind]?.remove(waiter)
  }

  leave(kind: RequestKind): void {
    this.done[kind].add(this.now())
    const next = this.queues[kind]?.shift()
    // The slot passes to the head of the queue: the count in flight stays as it is.
    if (next !== undefined) next.admitted()
    else this.inFlight[kind]--
  }

  /** Refuses every queued request and new shape with `error()` (the server closes); they hold no slot. */
  close(error: () => Error): void {
    for (const queue of Object.values(this.queues)) for (const waiter of queue.drain()) waiter.refused(error())
    for (const waiter of this.creationQueue?.drain() ?? []) waiter.refused(error())
  }

  /** Queued requests of `kind` now. */
  queued(kind: RequestKind): number {
    return this.queues[kind]?.length ?? 0
  }

  /** The figures for /metrics. */
  stats(): AdmissionStats {
    const queues: Partial<Record<RequestKind | 'creation', QueueStats>> = {}
    for (const kind of ['initial', 'existing'] as const) {
      const queue = this.queues[kind]
      if (queue !== undefined) queues[kind] = queue.stats()
    }
    if (this.creationQueue !== undefined) queues.creation = this.creationQueue.stats()
    return { inFlight: { ...this.inFlight }, queues, refused: { initial: { ...this.refusals.initial }, existing: { ...this.refusals.existing } } }
  }

  get initial(): number {
    return this.inFlight.initial
  }

  get existing(): number {
    return this.inFlight.existing
  }

  /** Shapes being created now, as admitted here. */
  get creatingShapes(): number {
    return this.creating
  }

  /**
   * Admits one new shape for `client` (undefined: not told apart), at once or
   * once a creation slot frees; rejects with `AdmissionError` to refuse it.
   */
  private admitCreation(client: string | undefined, signal?: AbortSignal): Promise<() => void> {
    const { maxCreating, clientPerMinute } = this.creation
    const full = maxCreating > 0 && this.creating >= maxCreating
    if (full && this.creationQueue === undefined) return Promise.reject(this.creationRefusal())
    try {
      if (clientPerMinute > 0 && client !== undefined) this.takeToken(client, clientPerMinute)
    } catch (error) {
      return Promise.reject(error)
    }
    if (!full) {
      this.creating++
      return Promise.resolve(this.creationRelease())
    }
    const queue = this.creationQueue!
    return new Promise((resolve, reject) => {
      const leave = (): void => {
        if (queue.remove(waiter)) reject(signal!.reason)
      }
      const waiter: AdmissionWaiter = {
        admitted: () => {
          signal?.removeEventListener('abort', leave)
          resolve(this.creationRelease())
        },
        refused: (error) => {
          signal?.removeEventListener('abort', leave)
          reject(error)
        },
      }
      if (signal?.aborted === true) return reject(signal.reason)
      if (!queue.add(waiter)) return reject(this.creationRefusal())
      signal?.addEventListener('abort', leave, { once: true })
    })
  }

  /** Gives the creation slot back, or passes it to the first new shape waiting for one. */
  private creationRelease(): () => void {
    let released = false
    return () => {
      if (released) return
      released = true
      const next = this.creationQueue?.shift()
      if (next !== undefined) next.admitted()
      else this.creating--
    }
  }

  private creationRefusal(): AdmissionError {
    const retryAfter = CREATION_RETRY_MIN_S + Math.floor(this.random() * (CREATION_RETRY_MAX_S - CREATION_RETRY_MIN_S + 1))
    return new AdmissionError('creation_limit_exceeded', `Too many shapes being created at once (limit: ${this.creation.maxCreating}), please retry`, retryAfter)
  }

  private takeToken(client: string, perMinute: number): void {
    const now = this.now()
    let bucket = this.buckets.get(client)
    if (bucket === undefined) {
      if (this.buckets.size >= MAX_CLIENT_BUCKETS) this.dropFullBuckets(now, perMinute)
      bucket = { tokens: perMinute, at: now }
      this.buckets.set(client, bucket)
    } else {
      bucket.tokens = Math.min(perMinute, bucket.tokens + ((now - bucket.at) * perMinute) / MINUTE_MS)
      bucket.at = now
    }
    if (bucket.tokens >= 1) {
      bucket.tokens -= 1
      return
    }
    const retryAfter = Math.max(1, Math.ceil(((1 - bucket.tokens) * MINUTE_MS) / perMinute / 1000))
    throw new AdmissionError('shape_rate_limited', `Too many new shapes from this client (limit: ${perMinute} per minute), please retry later`, retryAfter)
  }

  /** Forgets clients whose bucket has refilled (a new bucket starts full, so nothing changes for them); the oldest half if none has. */
  private dropFullBuckets(now: number, perMinute: number): void {
    for (const [client, bucket] of this.buckets) {
      if (bucket.tokens + ((now - bucket.at) * perMinute) / MINUTE_MS >= perMinute) this.buckets.delete(client)
    }
    if (this.buckets.size < MAX_CLIENT_BUCKETS) return
    let drop = this.buckets.size / 2
    for (const client of this.buckets.keys()) {
      if (drop-- <= 0) break
      this.buckets.delete(client)
    }
  }

  private refusal(kind: RequestKind): SluiceError {
    return concurrentRequestLimitExceeded(kind, this.limits[kind], this.retryAfter(kind))
  }

  private retryAfter(kind: RequestKind): number {
    const spread = this.random()
    const fallback = RETRY_AFTER_MIN_S + Math.floor(spread * (RETRY_AFTER_MAX_S - RETRY_AFTER_MIN_S + 1))
    const perSecond = this.done[kind].perSecond(this.now())
    if (perSecond <= 0) return fallback
    const clearS = (this.inFlight[kind] + this.queued(kind)) / perSecond
    return Math.max(1, Math.min(fallback, Math.ceil(2 * clearS * spread)))
  }
}

/**
 * Who a request comes from, for the per-client limit: the value of
 * `--client-id-header` when set and present (what an auth proxy or a CDN in
 * front puts there: a user id, the client's address), else the peer address.
 * Behind a proxy that sets no such header every request has the proxy's
 * address, and the limit becomes one for all clients together.
 */
export function clientKey(request: FastifyRequest, header: string | undefined): string | undefined {
  if (header !== undefined) {
    const value = request.headers[header]
    const first = Array.isArray(value) ? value[0] : value
    if (first !== undefined && first !== '') return first
  }
  return request.socket.remoteAddress
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
