import type { ShapeStream } from '@sluice/client'
import { useEffect, useState } from 'react'

export type ConnectionState = 'live' | 'syncing' | 'reconnecting' | 'offline' | 'error'

/** The worst state wins: one stream retrying makes the app "reconnecting". */
const SEVERITY: Record<ConnectionState, number> = { live: 0, syncing: 1, reconnecting: 2, offline: 3, error: 4 }

function streamState(stream: ShapeStream | undefined): ConnectionState {
  if (stream === undefined) return 'syncing'
  const state = stream.state
  if (state.kind === 'stopped') return state.reason === 'error' ? 'error' : 'syncing'
  if (state.failures > 0) return 'reconnecting'
  return state.kind === 'live' ? 'live' : 'syncing'
}

function compute(streams: readonly (ShapeStream | undefined)[]): ConnectionState {
  if (typeof navigator !== 'undefined' && !navigator.onLine) return 'offline'
  return streams.map(streamState).reduce((a, b) => (SEVERITY[b] > SEVERITY[a] ? b : a), 'live' as ConnectionState)
}

/** What the badge shows: follows each stream's state machine and the browser's online flag. */
export function useConnectionState(streams: readonly (ShapeStream | undefined)[]): ConnectionState {
  const [state, setState] = useState<ConnectionState>(() => compute(streams))
  useEffect(() => {
    const update = () => setState(compute(streams))
    update()
    const unsubscribes = streams.map((s) => s?.onStateChange(update))
    window.addEventListener('online', update)
    window.addEventListener('offline', update)
    return () => {
      for (const unsubscribe of unsubscribes) unsubscribe?.()
      window.removeEventListener('online', update)
      window.removeEventListener('offline', update)
    }
    // The streams are compared one by one: a new array of the same streams is no change.
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, streams)
  return state
}
