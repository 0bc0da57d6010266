import type { ServerResponse } from 'node:http'
import type { AbortLike } from './live-waiters.js'

/**
 * Whether the client of a response went away, as the waiters read it
 * (`AbortLike`): the response's 'close' before it finished. What a parked
 * long-poll holds instead of an AbortController, whose signal is an EventTarget
 * with a listener registry of its own: with ten thousand requests parked,
 * those add up (docs/performance-notes.md, "Fan-out"). One listener at a time,
 * which is all `LiveWaiters` registers.
 */
export class ConnectionGone implements AbortLike {
  private gone = false
  private listener: (() => void) | undefined
  private readonly onClose = (): void => {
    if (this.raw.writableFinished) return
    this.gone = true
    const listener = this.listener
    this.listener = undefined
    listener?.()
  }

  constructor(private readonly raw: ServerResponse) {
    raw.once('close', this.onClose)
  }

  get aborted(): boolean {
    return this.gone
  }

  addEventListener(_type: 'abort', listener: () => void): void {
    if (this.listener !== undefined) throw new Error('ConnectionGone holds one listener at a time')
    this.listener = listener
  }

  removeEventListener(_type: 'abort', listener: () => void): void {
    if (this.listener === listener) this.listener = undefined
  }

  /** Stops listening to the response (its handler is done with it). */
  dispose(): void {
    this.listener = undefined
    this.raw.off('close', this.onClose)
  }
}
