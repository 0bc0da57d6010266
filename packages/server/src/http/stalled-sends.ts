import type { ServerResponse } from 'node:http'

interface Watched {
  readonly progress: () => number
  last: number
}

/**
 * Responses whose bodies are still being sent, each cut when its client has
 * taken nothing for a whole window (what nginx's `send_timeout` does). A
 * client that stops reading would otherwise hold what its body is sent from
 * (a log file pinned open for sendfile, a pooled buffer, a streamed read)
 * for as long as it keeps the connection open, which a broken or hostile
 * client does for ever. One timer for all of them, running only while any is
 * watched: a response is cut between one and two windows after its last
 * progress.
 */
export class StalledSends {
  private readonly sends = new Map<ServerResponse, Watched>()
  private timer: NodeJS.Timeout | undefined = undefined
  /** The 'close' listener of every watched response (`this` is the response): no closure per response. */
  private readonly forget: (this: ServerResponse) => void

  constructor(private readonly windowMs: number) {
    const sends = this.sends
    this.forget = function (this: ServerResponse) {
      sends.delete(this)
    }
  }

  /**
   * Watches `res` until it closes. `progress` is any count that grows as the
   * client takes the body; by default the bytes of the connection's writes
   * the kernel has taken (`finishedWrites`).
   */
  watch(res: ServerResponse, progress: () => number = () => finishedWrites(res)): void {
    if (res.destroyed || res.writableFinished || this.sends.has(res)) return
    this.sends.set(res, { progress, last: Number.NaN })
    res.on('close', this.forget)
    if (this.timer === undefined) {
      this.timer = setInterval(() => this.check(), this.windowMs)
      this.timer.unref()
    }
  }

  /** Responses being watched (for tests and metrics). */
  get size(): number {
    return this.sends.size
  }

  close(): void {
    clearInterval(this.timer)
    this.timer = undefined
    this.sends.clear()
  }

  private check(): void {
    for (const [res, watched] of this.sends) {
      // A pipelined response waits for the ones before it to get its socket: it has nothing to send yet.
      if (res.socket === null) {
        watched.last = Number.NaN
        continue
      }
      const now = watched.progress()
      if (now !== watched.last) {
        watched.last = now
        continue
      }
      this.sends.delete(res)
      res.destroy()
    }
    if (this.sends.size === 0) {
      clearInterval(this.timer)
      this.timer = undefined
    }
  }
}

/**
 * A count that moves as the client takes bytes: those of the connection's
 * writes that are done (Node counts a write as written when it is dispatched,
 * and as buffered until it is done), less what libuv still holds of the ones
 * in progress. Without the second term, progress would show only once a
 * whole write (up to 1 MiB) is done, and a client slower than a write per
 * window would be cut while it reads.
 */
function finishedWrites(res: ServerResponse): number {
  const socket = res.socket
  return socket === null ? -1 : socket.bytesWritten - socket.writableLength - unsentWriteBytes(res)
}

/** Bytes of the writes in progress on `res`'s connection that the kernel has not taken yet (libuv's write queue). */
export function unsentWriteBytes(res: ServerResponse): number {
  const queued = (res.socket as { _handle?: { writeQueueSize?: unknown } | null } | null)?._handle?.writeQueueSize
  return typeof queued === 'number' ? queued : 0
}
