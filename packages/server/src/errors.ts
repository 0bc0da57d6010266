import { ERROR_CODES as WIRE_ERRORS, type ErrorCode as WireCode } from '@sluice/protocol'

/**
 * The server's error codes, all of them, in one table. Every error class of
 * the server derives from {@link ServerError} and carries one of these codes;
 * callers branch on the code (never on the message), and the HTTP layer turns
 * a code into a response through this table alone.
 *
 * The classes stay in the layer that raises them (replication/, shapes/,
 * where/, ...): each adds the data its layer knows (a relation id, a SQLSTATE,
 * an errno) and its own notion of `fatal` or `retryable`. What a code means and
 * what a client sees when it reaches a request is decided here, once.
 *
 * `wire` names the protocol error (`@sluice/protocol`'s ERROR_CODES, which owns
 * statuses and body layouts) a request failing with this code answers with.
 * Codes that only a bug or a broken disk can bring to a request answer
 * `internal`. `field` files the error's text under that request field of an
 * `invalid_request` body; `wireMessage` replaces the wire error's default text.
 *
 * Errors that are born as wire errors (`WhereClauseError`, `SubsetError`: a
 * 400 naming the field at fault) extend the protocol's `SluiceError` directly
 * and are not listed here; their `reason` is their stage's own detail.
 *
 * docs/errors.md lists every code with its status; test/errors.test.ts keeps
 * the two in step. A code, once published, never changes meaning.
 */
export interface ServerErrorSpec {
  /** What happened, as docs/errors.md says it; also the default message. */
  readonly description: string
  readonly wire: WireCode
  readonly field?: 'table' | 'columns'
  readonly wireMessage?: string
  /** Seconds for `retry-after`, replacing the wire error's. */
  readonly retryAfter?: number
}

export const SERVER_ERRORS = {
  // ---- shapes: creating and serving a shape ----
  table_not_found: {
    description: 'The table (or its schema) does not exist, or is not visible to the Sluice role',
    wire: 'invalid_request',
    field: 'table',
  },
  table_gone: {
    description: "The table of the shape the request followed is gone (dropped or renamed); a new shape is made once it exists again",
    wire: 'stack_not_ready',
    wireMessage: "The shape's table no longer exists, please retry later",
  },
  invalid_columns: { description: 'The selected columns are not valid for the table', wire: 'invalid_request', field: 'columns' },
  snapshot_failed: { description: 'The initial snapshot failed', wire: 'snapshot_failed' },
  shape_invalidated: { description: 'The shape was invalidated while it was being created', wire: 'must_refetch' },
  too_many_shapes: {
    description: 'The shape limit is reached and no shape can be evicted (every shape is being created)',
    wire: 'stack_not_ready',
    wireMessage: 'Too many shapes, please retry later',
  },
  shape_rate_limited: {
    description: 'This client created more new shapes than --client-shapes-per-minute allows; retry-after says when the next is allowed',
    wire: 'shape_rate_limited',
  },
  subquery_views_full: {
    description: "Creating this subquery shape would take the values held in all subquery shapes' result sets past --max-subquery-view-entries",
    wire: 'subquery_views_full',
  },
  creation_limit_exceeded: { description: 'More shapes are being created at once than --max-creating-shapes allows', wire: 'creation_limit_exceeded' },
  shutting_down: { description: 'The server is shutting down', wire: 'stack_not_ready', wireMessage: 'Server is shutting down' },
  invalid_shape_meta: { description: "A shape's stored definition does not decode", wire: 'internal' },

  // ---- read-only replicas (--read-only) ----
  shape_not_on_replica: {
    description: 'A read-only replica holds no shape for this definition yet: the writer creates it when a request reaches it',
    wire: 'stack_not_ready',
    wireMessage: 'The shape is not on this read-only server yet, please retry',
    retryAfter: 1,
  },
  offset_not_on_replica: {
    description: "A read-only replica has not seen the request's offset after waiting half the long-poll timeout: the writer issued it and this server is behind (or no writer has published it)",
    wire: 'stack_not_ready',
    wireMessage: 'This read-only server has not caught up to that offset yet, please retry',
    retryAfter: 1,
  },
  read_only_replica: {
    description: 'A read-only replica cannot do this (a subset snapshot, a DELETE): the writer can',
    wire: 'stack_not_ready',
    wireMessage: 'This server is a read-only replica, please retry on the writer',
    retryAfter: 1,
  },

  // ---- shapes: the table catalog ----
  unsupported_relation: {
    description: 'The relation is not a table or partitioned table, or one Postgres will not publish',
    wire: 'invalid_request',
    field: 'table',
  },
  catalog_inconsistent: { description: "Postgres's catalog answered something that does not fit together", wire: 'internal' },

  // ---- shapes: snapshots (a failure that reaches a request is a 503 the client retries) ----
  aborted: { description: 'The snapshot was aborted by its caller', wire: 'snapshot_failed' },
  invalid_request: { description: 'The snapshot request is invalid (unknown or missing columns, bad options)', wire: 'snapshot_failed' },
  table_changed: {
    description: 'The table was dropped and re-created, or its columns or primary key changed, since it was loaded',
    wire: 'snapshot_failed',
  },
  insufficient_privilege: {
    description: 'The database role lacks a privilege Sluice needs (to read a table, replicate, or manage the publication)',
    wire: 'invalid_request',
    field: 'table',
  },
  statement_timeout: { description: 'The snapshot ran longer than statement_timeout', wire: 'snapshot_failed' },
  lock_timeout: { description: 'The table lock could not be taken within lock_timeout (10 s for a snapshot: its ACCESS SHARE lock queues behind a waiting ALTER TABLE)', wire: 'snapshot_failed' },
  canceled: { description: 'The snapshot query was canceled by someone else (pg_cancel_backend)', wire: 'snapshot_failed' },
  connection_failed: { description: 'No connection, or the connection was lost', wire: 'snapshot_failed' },
  invalid_query: { description: 'Postgres rejected the snapshot query (the where clause or its parameters)', wire: 'snapshot_failed' },
  evaluation_error: {
    description: 'The where clause raised an error on some row (division by zero, an invalid parameter value…)',
    wire: 'snapshot_failed',
  },
  sink_failed: { description: 'The sink rejected a batch of rows', wire: 'snapshot_failed' },
  protocol_error: { description: 'Postgres answered something unexpected', wire: 'snapshot_failed' },
  query_failed: { description: 'The snapshot query failed', wire: 'snapshot_failed' },
  raced_commit: { description: 'A subset snapshot missed a transaction already replicated; it is taken again', wire: 'snapshot_failed' },

  // ---- shapes: encoding changes ----
  invalid_table: {
    description: 'The table or column selection given to the change encoder is invalid (a duplicate column, an unknown or missing key column)',
    wire: 'internal',
  },
  invalid_position: { description: "A change's LSN, op position or xid is out of range", wire: 'internal' },
  invalid_tuple: { description: "A change's tuple does not match its table's columns", wire: 'internal' },
  missing_old_row: { description: 'An update or delete carries no old row where one is needed', wire: 'internal' },

  // ---- shapes: spilling large transactions and queues to disk ----
  spill_open_failed: { description: 'Creating, opening or cleaning the spill directory or a spill file failed', wire: 'internal' },
  spill_write_failed: { description: 'Writing a spill file failed', wire: 'internal' },
  spill_read_failed: { description: 'Reading a spill file back failed', wire: 'internal' },
  spill_transaction_failed: {
    description: 'An earlier spill write of this transaction failed; the transaction can only be dropped',
    wire: 'internal',
  },
  spill_corrupt: { description: 'A spill file holds bytes that do not decode', wire: 'internal' },
  spill_invalid_item: { description: 'A change or queue item cannot be encoded', wire: 'internal' },
  spill_closed: { description: 'The spill buffer or queue is closed', wire: 'internal' },

  // ---- replication ----
  pgoutput_truncated: { description: 'A pgoutput message ended before all of its fields', wire: 'internal' },
  pgoutput_malformed: { description: 'A pgoutput message has an invalid field', wire: 'internal' },
  pgoutput_unsupported: { description: 'A pgoutput message or value kind that Sluice does not handle', wire: 'internal' },
  binary_tuple_value: { description: 'A tuple value arrived in binary format; Sluice only requests text', wire: 'internal' },
  unknown_relation: { description: 'A change refers to a relation that was never described', wire: 'internal' },
  protocol_violation: { description: 'The replication stream broke the order pgoutput guarantees', wire: 'internal' },
  unchanged_toast: { description: 'An unchanged TOAST value could not be filled from an old tuple', wire: 'internal' },
  slot_not_found: { description: 'The replication slot does not exist', wire: 'internal' },
  slot_mismatch: {
    description: 'A replication slot with this name exists but is not a pgoutput slot of this database',
    wire: 'internal',
  },
  publication_not_found: { description: 'The publication does not exist', wire: 'internal' },
  server_configuration: { description: 'The Postgres server is not configured for logical replication', wire: 'internal' },
  invalid_name: { description: 'An invalid slot or publication name', wire: 'internal' },
  client_stopped: { description: 'The replication client was stopped', wire: 'internal' },
  already_started: {
    description: 'The replication client was started already; create a new one to start again',
    wire: 'internal',
  },
  connection_lost: { description: 'The replication connection was lost', wire: 'internal' },

  // ---- where: evaluating a clause (named as Postgres names the same errors) ----
  division_by_zero: { description: 'Division by zero', wire: 'internal' },
  numeric_value_out_of_range: { description: 'A number out of its type’s range', wire: 'internal' },
  invalid_text_representation: { description: 'A text that does not parse as the type asked for', wire: 'internal' },
  invalid_datetime_format: { description: 'A date or time that does not parse', wire: 'internal' },
  datetime_field_overflow: { description: 'A date or time field out of range', wire: 'internal' },
  invalid_parameter_value: { description: 'An argument a function refuses', wire: 'internal' },
  invalid_escape_sequence: { description: 'A LIKE pattern with a bad escape', wire: 'internal' },
  array_subscript_error: { description: 'An array subscript out of bounds', wire: 'internal' },
  untranslatable_character: { description: 'A character the encoding cannot hold', wire: 'internal' },
  missing_value: { description: 'The row has no value for a referenced column (an unchanged TOAST value)', wire: 'internal' },
  internal_error: { description: 'A bug in the evaluator, contained so that replication carries on', wire: 'internal' },
  unsupported_datetime: {
    description: "A date or time Postgres might accept that Sluice does not interpret ('now', a named zone)",
    wire: 'internal',
  },

  // ---- serving stored logs ----
  malformed_entries: { description: 'A stored range of log entries does not split into whole JSON entries', wire: 'internal' },

  // ---- starting the server ----
  invalid_config: { description: 'The configuration (flags, environment) has problems', wire: 'internal' },
  embedded_postgres_failed: { description: 'The embedded Postgres could not be found, created or started', wire: 'internal' },
  standby_stopped: { description: 'A standby was stopped while it waited for the writer lock (it never wrote)', wire: 'internal' },
  start_stopped: { description: 'The server was stopped while it waited for replication to begin (the slot in use elsewhere, the database down)', wire: 'internal' },
  replica_stopped: { description: 'A read replica was stopped while it waited for a writer to create the store', wire: 'internal' },
} as const satisfies Readonly<Record<string, ServerErrorSpec>>

export type ServerErrorCode = keyof typeof SERVER_ERRORS

export function isServerErrorCode(value: string): value is ServerErrorCode {
  return Object.hasOwn(SERVER_ERRORS, value)
}

/** The HTTP status a request failing with `code` answers with. */
export function httpStatusOf(code: ServerErrorCode): number {
  return WIRE_ERRORS[SERVER_ERRORS[code].wire].status
}

/** The base of every error the server raises: a `name`, a stable `code` and, where there is one, a `cause`. */
export class ServerError<C extends ServerErrorCode = ServerErrorCode> extends Error {
  override readonly name: string = 'ServerError'
  readonly code: C

  constructor(code: C, message: string = SERVER_ERRORS[code].description, options?: { cause?: unknown }) {
    super(message, options?.cause === undefined ? undefined : { cause: options.cause })
    this.code = code
  }
}

/**
 * `{ code: description }` for the codes a layer raises, in the order given: a
 * layer's own list, drawn from the one table (tests and READMEs check a layer
 * documents each of its codes).
 */
export function codeTable<C extends ServerErrorCode>(...codes: readonly C[]): { readonly [K in C]: (typeof SERVER_ERRORS)[K]['description'] } {
  const table: Record<string, string> = {}
  for (const code of codes) table[code] = SERVER_ERRORS[code].description
  return table as { readonly [K in C]: (typeof SERVER_ERRORS)[K]['description'] }
}
