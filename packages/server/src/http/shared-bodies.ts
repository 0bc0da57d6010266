import type { LogRead } from '@sluice/storage'
import { type LogBody, logBody } from './log-body.js'

/**
 * One body for identical reads in flight at once. A shape's range between two
 * offsets never changes (logs are append-only), so requests for the same
 * range with the same up-to-date line get the same bytes: the first one
 * reads them (`logBody`), the ones that arrive while any of them is still
 * being sent share that buffer, and it goes back to the pool when the last
 * of them is done. Many clients fetching one shape's first chunk at once
 * (a deploy, a cache miss at a CDN) then cost one read and one buffer, not
 * one each; nothing is kept once no response holds it, so a lone client
 * reads every time.
 */
export class SharedBodies {
  private readonly inFlight = new Map<string, SharedBody>()

  /**
   * The body for `read` and `tail`, shared with the requests in flight under
   * the same `key`, which must name the bytes exactly: the shape's handle,
   * the range's two offsets and the tail. Releases `read` in every case;
   * call `done` once the response no longer needs the bytes.
   */
  async body(key: string, read: LogRead, tail: string | undefined): Promise<LogBody> {
    let shared = this.inFlight.get(key)
    if (shared === undefined) {
      shared = new SharedBody(logBody(read, tail))
      const entry = shared
      this.inFlight.set(key, entry)
      // A read that failed is not shared: the next request tries again.
      entry.built.catch(() => this.forget(key, entry))
    } else {
      read.release()
    }
    shared.holders++
    let body: LogBody
    try {
      body = await shared.built
    } catch (error) {
      shared.holders--
      throw error
    }
    const entry = shared
    let released = false
    return {
      bytes: body.bytes,
      done: () => {
        if (released) return
        released = true
        if (--entry.holders > 0) return
        this.forget(key, entry)
        body.done()
      },
    }
  }

  /** Keys shared right now (for tests). */
  get size(): number {
    return this.inFlight.size
  }

  private forget(key: string, entry: SharedBody): void {
    if (this.inFlight.get(key) === entry) this.inFlight.delete(key)
  }
}

class SharedBody {
  holders = 0
  constructor(readonly built: Promise<LogBody>) {}
}
