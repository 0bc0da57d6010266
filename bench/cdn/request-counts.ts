/**
 * What reaches a CDN benchmark origin, for `counts`, `responses` and `reset`
 * (origin.ts, ceiling-origin.ts): requests per URL, and responses per status
 * and URL (e.g. `200 /v1/shape?...`: a 304 revalidation costs the origin no
 * log read).
 */
import type { IncomingMessage, ServerResponse } from 'node:http'

export class RequestCounts {
  private requests = new Map<string, number>()
  private answered = new Map<string, number>()

  /** Counts `req`, and its response once it is sent. */
  count(req: IncomingMessage, res: ServerResponse): void {
    const url = req.url ?? ''
    this.requests.set(url, (this.requests.get(url) ?? 0) + 1)
    res.once('finish', () => {
      const key = `${res.statusCode} ${url}`
      this.answered.set(key, (this.answered.get(key) ?? 0) + 1)
    })
  }

  /** Requests per URL since the last `reset`. */
  counts(): Record<string, number> {
    return Object.fromEntries(this.requests)
  }

  /** Responses per status and URL since the last `reset`. */
  responses(): Record<string, number> {
    return Object.fromEntries(this.answered)
  }

  reset(): void {
    this.requests = new Map()
    this.answered = new Map()
  }
}
