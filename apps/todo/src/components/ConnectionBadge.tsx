import type { ConnectionState } from '../connection'

const LABELS: Record<ConnectionState, string> = {
  live: 'Live',
  syncing: 'Syncing',
  reconnecting: 'Reconnecting…',
  offline: 'Offline',
  error: 'Sync stopped',
}

const HINTS: Record<ConnectionState, string> = {
  live: 'Up to date; changes arrive as they happen',
  syncing: 'Catching up with the server',
  reconnecting: 'The sync server cannot be reached; retrying',
  offline: 'The browser is offline; changes will sync when it is back',
  error: 'Sync stopped with an error; reload the page',
}

export function ConnectionBadge({ state }: { readonly state: ConnectionState }) {
  return (
    <span className={`badge badge-${state}`} data-testid="connection" data-state={state} title={HINTS[state]} role="status">
      <span className="badge-dot" aria-hidden="true" />
      {LABELS[state]}
    </span>
  )
}
