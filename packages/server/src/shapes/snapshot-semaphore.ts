/**
 * Bounds how many snapshots run at once (each holds a Postgres connection in a
 * long REPEATABLE READ transaction). Waiters are served first come, first
 * served; an aborted waiter leaves the line without taking a slot.
 */
export class SnapshotSemaphore {
  private active = 0
  private readonly waiting: Array<{ grant: () => void }> = []

  constructor(readonly limit: number) {
    if (!Number.isInteger(limit) || limit < 1) throw new RangeError(`snapshot concurrency must be a positive integer, got ${limit}`)
  }

  get running(): number {
    return this.active
  }

  get queued(): number {
    return this.waiting.length
  }

  /** Resolves with a release function once a slot is free; rejects with the signal's reason if aborted first. */
  acquire(signal?: AbortSignal): Promise<() => void> {
    signal?.throwIfAborted()
    if (this.active < this.limit) {
      this.active++
      return Promise.resolve(this.releaser())
    }
    return new Promise((resolve, reject) => {
      const waiter = {
        grant: () => {
          signal?.removeEventListener('abort', onAbort)
          resolve(this.releaser())
        },
      }
      const onAbort = (): void => {
        const i = this.waiting.indexOf(waiter)
        if (i >= 0) this.waiting.splice(i, 1)
        reject(signal?.reason)
      }
      signal?.addEventListener('abort', onAbort, { once: true })
      this.waiting.push(waiter)
    })
  }

  private releaser(): () => void {
    let released = false
    return () => {
      if (released) return
      released = true
      const next = this.waiting.shift()
      // The slot passes straight to the next waiter, so `active` stays the same.
      if (next !== undefined) next.grant()
      else this.active--
    }
  }
}
