/**
 * The requests of one kind waiting for an admission slot (`Admission`), first
 * come first served, at most `length` of them, each for at most `waitMs`.
 *
 * A Map kept in arrival order (JavaScript maps iterate in insertion order):
 * the head is the first key, a request that leaves early (its client went
 * away) is deleted wherever it stands, in O(1). Every waiter has the same
 * longest wait, so the head is always the first to run out of time: one timer,
 * armed for the head's deadline, serves the whole queue.
 */

/** A request waiting in an admission queue. */
export interface AdmissionWaiter {
  /** Its turn came: it holds the slot it waited for now (given back as one taken at once would be). */
  admitted(): void
  /** It is out of the queue without a slot (it waited the longest allowed, or the server closes): answer `error`. */
  refused(error: Error): void
}

export interface QueueLimits {
  /** Requests waiting at most (0: none wait, the request over the limit is refused at once). */
  readonly length: number
  /** The longest a request waits before it is refused after all. */
  readonly waitMs: number
}

export interface QueueStats {
  /** Waiting now. */
  readonly length: number
  /** Requests that waited and were then admitted. */
  readonly admitted: number
  /** Milliseconds waited by the admitted ones, in all. */
  readonly waitedMs: number
  /** Requests whose client went away while they waited. */
  readonly abandoned: number
}

export class AdmissionQueue {
  /** Waiter → when it arrived. */
  private readonly waiting = new Map<AdmissionWaiter, number>()
  private timer: ReturnType<typeof setTimeout> | undefined = undefined
  /** The deadline the timer is armed for. */
  private timerAt = Number.POSITIVE_INFINITY
  private admittedCount = 0
  private waitedMs = 0
  private abandonedCount = 0

  constructor(
    readonly limits: QueueLimits,
    private readonly now: () => number,
    /** Called for each waiter whose time ran out, once it is out of the queue. */
    private readonly onExpired: (waiter: AdmissionWaiter) => void,
  ) {}

  get length(): number {
    return this.waiting.size
  }

  /** Queues `waiter` at the back; false when the queue is full (the caller counts the refusal). */
  add(waiter: AdmissionWaiter): boolean {
    if (this.waiting.size >= this.limits.length) return false
    this.waiting.set(waiter, this.now())
    if (this.waiting.size === 1) this.arm()
    return true
  }

  /** Takes `waiter` out, wherever it stands (its client went away); false when it was not waiting. */
  remove(waiter: AdmissionWaiter): boolean {
    if (!this.waiting.delete(waiter)) return false
    this.abandonedCount++
    if (this.waiting.size === 0) this.disarm()
    return true
  }

  /** Takes the head out, counted as admitted; the caller tells it so. */
  shift(): AdmissionWaiter | undefined {
    for (const [waiter, at] of this.waiting) {
      this.waiting.delete(waiter)
      this.admittedCount++
      this.waitedMs += this.now() - at
      if (this.waiting.size === 0) this.disarm()
      return waiter
    }
    return undefined
  }

  /** Takes every waiter out, for a server that closes; the caller answers them. */
  drain(): AdmissionWaiter[] {
    const all = [...this.waiting.keys()]
    this.waiting.clear()
    this.disarm()
    return all
  }

  stats(): QueueStats {
    return {
      length: this.waiting.size,
      admitted: this.admittedCount,
      waitedMs: this.waitedMs,
      abandoned: this.abandonedCount,
    }
  }

  /** Arms the timer for the head's deadline, unless it already is (a later deadline is re-armed when it fires). */
  private arm(): void {
    const head = this.waiting.values().next()
    if (head.done === true) return
    const at = head.value + this.limits.waitMs
    if (this.timer !== undefined && this.timerAt <= at) return
    this.disarm()
    this.timerAt = at
    // At least 1 ms: a timer that fires a hair before the deadline (another clock) re-arms rather than spins.
    this.timer = setTimeout(() => this.expire(), Math.max(1, Math.ceil(at - this.now())))
    // A queue holds no server open: closing drains it.
    this.timer.unref()
  }

  private disarm(): void {
    if (this.timer !== undefined) clearTimeout(this.timer)
    this.timer = undefined
    this.timerAt = Number.POSITIVE_INFINITY
  }

  /** Refuses, from the head, every waiter whose time is up; then arms the timer for the next one. */
  private expire(): void {
    this.timer = undefined
    this.timerAt = Number.POSITIVE_INFINITY
    const now = this.now()
    const due: AdmissionWaiter[] = []
    for (const [waiter, at] of this.waiting) {
      if (at + this.limits.waitMs > now) break
      this.waiting.delete(waiter)
      due.push(waiter)
    }
    this.arm()
    // Told after the queue is consistent: an answer sent synchronously may free a slot and call back in.
    for (const waiter of due) this.onExpired(waiter)
  }
}
