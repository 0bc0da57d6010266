// What `/v1/health` reports (docs/protocol.md §1): healthy, or the reasons the
// server cannot keep its clients up to date. The codes are part of the API:
// monitors match on them, so they never change meaning or disappear.

/** Why the server is unhealthy; the body of a 503 from `/v1/health` names each one present. */
export const HEALTH_REASONS = {
  storage_disk_full: 'The shape store cannot commit: the disk is full (ENOSPC or EDQUOT)',
  storage_io_error: 'The shape store cannot commit: a write or sync failed (EIO or another error)',
  storage_paused: 'Replication is paused until a checkpoint writes the journaled changes out (--tail-budget)',
  replication_paused: 'Replication is paused for the memory of transactions and shape queues (--memory-budget) or by the operator',
  replication_disconnected: 'The replication connection to Postgres has been down longer than --health-replication-timeout',
  replication_stopped: 'Replication stopped on an error it cannot retry (privileges, a missing slot or publication, undecodable data)',
} as const

export type HealthReasonCode = keyof typeof HEALTH_REASONS

export interface HealthReason {
  readonly code: HealthReasonCode
  /** What happened, for a person (the error's own text where there is one). */
  readonly message: string
  /** When the condition began (ms since the epoch). */
  readonly since: number
}

export interface HealthReport {
  /** Empty when healthy; otherwise most serious first (what cannot commit, then what cannot receive, then pauses). */
  readonly reasons: readonly HealthReason[]
}

/** The JSON body of `/v1/health`: Electric's `active`, or `unavailable` with the reasons (the first one also as `reason`). */
export function healthBody(report: HealthReport): string {
  const [first] = report.reasons
  if (first === undefined) return '{"status":"active"}'
  return JSON.stringify({
    status: 'unavailable',
    reason: first.code,
    message: first.message,
    reasons: report.reasons.map((r) => ({ code: r.code, message: r.message, since: new Date(r.since).toISOString() })),
  })
}
