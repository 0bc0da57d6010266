import { ServerError, codeTable } from '../../errors.js'

/**
 * Every failure of a snapshot, with a stable `code` (defined in src/errors.ts).
 * Callers branch on the code (or `retryable`), never on the message; the
 * Postgres error, when there was one, is the `cause` and its SQLSTATE is in
 * `sqlState`.
 */
export const SNAPSHOT_ERROR_CODES = codeTable(
  'aborted',
  'invalid_request',
  'table_not_found',
  'table_changed',
  'insufficient_privilege',
  'statement_timeout',
  'lock_timeout',
  'canceled',
  'connection_failed',
  'invalid_query',
  'evaluation_error',
  'sink_failed',
  'protocol_error',
  'query_failed',
)

export type SnapshotErrorCode = keyof typeof SNAPSHOT_ERROR_CODES

const RETRYABLE: ReadonlySet<SnapshotErrorCode> = new Set<SnapshotErrorCode>([
  'table_changed',
  'statement_timeout',
  'lock_timeout',
  'canceled',
  'connection_failed',
])

export class SnapshotError extends ServerError<SnapshotErrorCode> {
  override readonly name = 'SnapshotError'
  /** SQLSTATE of the Postgres error behind this one, if any. */
  readonly sqlState: string | undefined

  constructor(code: SnapshotErrorCode, message?: string, options?: { cause?: unknown; sqlState?: string | undefined }) {
    super(code, message, options)
    this.sqlState = options?.sqlState
  }

  /** Whether trying again (after reloading the table, for `table_changed`) can succeed. */
  get retryable(): boolean {
    return RETRYABLE.has(this.code)
  }
}

function sqlStateOf(error: unknown): string | undefined {
  const code = (error as { code?: unknown } | null)?.code
  return typeof code === 'string' && /^[0-9A-Z]{5}$/.test(code) ? code : undefined
}

function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error)
}

/** Node socket errors and pg's own connection errors, which carry no SQLSTATE. */
const CONNECTION_MESSAGES = /Connection terminated|connection (?:is )?(?:closed|ended)|ECONNREFUSED|ECONNRESET|EPIPE|ETIMEDOUT|ENOTFOUND|EHOSTUNREACH|timeout exceeded when trying to connect|Client has encountered a connection error|not queryable/i

/** A Postgres or driver error from a snapshot, as a SnapshotError. */
export function snapshotErrorFrom(error: unknown, context: string): SnapshotError {
  if (error instanceof SnapshotError) return error
  const state = sqlStateOf(error)
  const detail = `${context}: ${messageOf(error)}`
  const make = (code: SnapshotErrorCode): SnapshotError => new SnapshotError(code, detail, { cause: error, sqlState: state })
  if (state === undefined) {
    const code = (error as { code?: unknown } | null)?.code
    if ((typeof code === 'string' && /^E[A-Z]+$/.test(code)) || CONNECTION_MESSAGES.test(messageOf(error))) return make('connection_failed')
    return make('query_failed')
  }
  switch (state) {
    case '42P01': // undefined_table
    case '3F000': // invalid_schema_name
      return make('table_not_found')
    case '42501': // insufficient_privilege
      return make('insufficient_privilege')
    case '55P03': // lock_not_available
      return make('lock_timeout')
    case '57014': // query_canceled
      return make(/statement timeout/i.test(messageOf(error)) ? 'statement_timeout' : 'canceled')
    case '53300': // too_many_connections
    case '57P01': // admin_shutdown
    case '57P02': // crash_shutdown
    case '57P03': // cannot_connect_now
    case '57P05': // idle_session_timeout
    case '25P03': // idle_in_transaction_session_timeout
    case '25P04': // transaction_timeout
      return make('connection_failed')
  }
  if (state.startsWith('08')) return make('connection_failed')
  if (state.startsWith('22')) return make('evaluation_error')
  if (state.startsWith('42')) return make('invalid_query')
  return make('query_failed')
}
