import type { ShapeStream } from '@sluice/client'
import { useEffect, useState } from 'react'

export type ConnectionState = 'live' | 'syncing' | 'reconnecting' | 'offline' | 'error'

/** The worst state wins: one stream retrying makes the app "reconnecting". */
const SEVERITY: Record<ConnectionState, number> = { live: 0, syncing: 1, reconnecting: 2, offline: 3, error: 4 }

/**
 * A live request still open after this long is being held by a running server
 * (a refused connection, or a proxy's 502 for a dead origin, fails within
 * milliseconds), so the connection is back even though the stream only learns
 * it when the long-poll answers, up to 20 s later.
 */
const HELD_MS = 1_000

/**
 * The shape streams' `fetch`. It watches which requests are open and since
 * when (the stream's state alone cannot tell "reconnected, waiting for news"
 * from "still failing" while a long-poll is open), and it makes the browser's
 * offline flag mean what it says: going offline fails the requests in flight,
 * as a dropped connection would (an open long-poll otherwise stays open and
 * may even deliver, or hang until the client's watchdog), and a request made
 * while offline waits for the network instead of failing into ever longer
 * retry delays, so coming back online catches up at once.
 */
export class RequestMonitor {
  readonly #open = new Map<number, number>()
  readonly #listeners = new Set<() => void>()
  #next = 0

  readonly fetch = async (input: RequestInfo | URL, init?: RequestInit): Promise<Response> => {
    await untilOnline(init?.signal ?? undefined)
    const controller = new AbortController()
    const callerSignal = init?.signal ?? undefined
    const onCallerAbort = () => controller.abort(callerSignal?.reason)
    const onOffline = () => controller.abort(new TypeError('the browser went offline'))
    callerSignal?.addEventListener('abort', onCallerAbort, { once: true })
    window.addEventListener('offline', onOffline)

    const id = this.#next++
    this.#open.set(id, performance.now())
    const timer = setTimeout(() => this.#notify(), HELD_MS + 10)
    try {
      return await globalThis.fetch(input, { ...init, signal: controller.signal })
    } finally {
      clearTimeout(timer)
      callerSignal?.removeEventListener('abort', onCallerAbort)
      window.removeEventListener('offline', onOffline)
      this.#open.delete(id)
      this.#notify()
    }
  }

  /** Whether some request has been open for at least HELD_MS. */
  get held(): boolean {
    const now = performance.now()
    for (const since of this.#open.values()) if (now - since >= HELD_MS) return true
    return false
  }

  subscribe(listener: () => void): () => void {
    this.#listeners.add(listener)
    return () => this.#listeners.delete(listener)
  }

  #notify(): void {
    for (const listener of this.#listeners) listener()
  }
}

function untilOnline(signal: AbortSignal | undefined): Promise<void> {
  if (navigator.onLine || signal?.aborted) return Promise.resolve()
  return new Promise((resolve) => {
    const done = () => {
      window.removeEventListener('online', done)
      signal?.removeEventListener('abort', done)
      resolve()
    }
    window.addEventListener('online', done)
    signal?.addEventListener('abort', done)
  })
}

function streamState(stream: ShapeStream | undefined, held: boolean): ConnectionState {
  if (stream === undefined) return 'syncing'
  const state = stream.state
  if (state.kind === 'stopped') return state.reason === 'error' ? 'error' : 'syncing'
  if (state.failures > 0 && !held) return 'reconnecting'
  return state.kind === 'live' ? 'live' : 'syncing'
}

function compute(streams: readonly (ShapeStream | undefined)[], monitor: RequestMonitor): ConnectionState {
  if (typeof navigator !== 'undefined' && !navigator.onLine) return 'offline'
  const held = monitor.held
  return streams.map((s) => streamState(s, held)).reduce((a, b) => (SEVERITY[b] > SEVERITY[a] ? b : a), 'live' as ConnectionState)
}

/** What the badge shows: each stream's state machine, the requests in flight, and the browser's online flag. */
export function useConnectionState(streams: readonly (ShapeStream | undefined)[], monitor: RequestMonitor): ConnectionState {
  const [state, setState] = useState<ConnectionState>(() => compute(streams, monitor))
  useEffect(() => {
    const update = () => setState(compute(streams, monitor))
    update()
    const unsubscribes = [...streams.map((s) => s?.onStateChange(update)), monitor.subscribe(update)]
    window.addEventListener('online', update)
    window.addEventListener('offline', update)
    return () => {
      for (const unsubscribe of unsubscribes) unsubscribe?.()
      window.removeEventListener('online', update)
      window.removeEventListener('offline', update)
    }
    // The streams are compared one by one: a new array of the same streams is no change.
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [monitor, ...streams])
  return state
}
