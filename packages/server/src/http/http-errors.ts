import { SluiceError, invalidRequest } from '@sluice/protocol'
import type { RelationName } from '@sluice/protocol'
import { SERVER_ERRORS, ServerError } from '../errors.js'
import type { ShapeError } from '../shape-service.js'
import { AdmissionError } from './admission.js'

/**
 * Maps whatever a request handler throws to the `SluiceError` whose status and
 * body the client gets (docs/protocol.md §2, §5.4). A server error maps by its code
 * through the one table in src/errors.ts; anything else is a 500 with
 * Electric's generic body, unless it says Postgres cannot be reached or is one
 * of fastify's own 4xx. The original error goes to the log, never the wire.
 */

/** Electric's texts for shape definitions the table cannot satisfy (`SS/shapes/shape.ex`). */
export function missingTableMessage(relation: RelationName): string {
  return `Table ${quote(relation.schema)}.${quote(relation.name)} does not exist. If the table name contains capitals or special characters you must quote it.`
}

const UNKNOWN_COLUMNS = 'The following columns are not found on the table: '
const MISSING_PK_COLUMNS = 'The list of columns must include all primary key columns, missing: '

/** Connection failures that mean Postgres cannot be reached (node errno codes, pg's own). */
const UNREACHABLE_CODES = new Set(['ECONNREFUSED', 'ECONNRESET', 'ENOTFOUND', 'ETIMEDOUT', 'EHOSTUNREACH', 'EPIPE', '57P01', '57P03'])

export interface ErrorContext {
  /** The requested relation, for the missing-table text. */
  readonly relation?: RelationName | undefined
}

export function toSluiceError(error: unknown, context: ErrorContext = {}): SluiceError {
  if (error instanceof SluiceError) return error
  if (error instanceof ServerError) return fromServerError(error, context)
  // fastify's own errors (body parsing, content type, limits) carry their status. First: a request body cut
  // off mid-read has a socket's code (ECONNRESET), and it is the client's doing, not the database's.
  const status = (error as { statusCode?: unknown } | null)?.statusCode
  if (typeof status === 'number' && status >= 400 && status < 500) {
    if (status === 413) return new SluiceError('body_too_large', { cause: error })
    return new SluiceError('invalid_request', { cause: error, errors: { request: [String((error as Error).message)] } })
  }
  const code = (error as { code?: unknown } | null)?.code
  if (typeof code === 'string' && UNREACHABLE_CODES.has(code)) return new SluiceError('database_unreachable', { cause: error })
  return new SluiceError('internal', { cause: error })
}

function fromServerError(error: ServerError, context: ErrorContext): SluiceError {
  const spec: { readonly wire: SluiceError['code']; readonly field?: string; readonly wireMessage?: string; readonly retryAfter?: number } = SERVER_ERRORS[error.code]
  if (spec.field !== undefined) return invalidRequest({ [spec.field]: [fieldText(error, context)] })
  if (error instanceof AdmissionError) return new SluiceError(spec.wire, { message: error.message, retryAfter: error.retryAfter, cause: error })
  if (error.code === 'snapshot_failed') {
    const refused = snapshotRefusal(error)
    if (refused !== undefined) return refused
  }
  return new SluiceError(spec.wire, {
    cause: error,
    ...(spec.wireMessage === undefined ? {} : { message: spec.wireMessage }),
    ...(spec.retryAfter === undefined ? {} : { retryAfter: spec.retryAfter }),
  })
}

/** The text filed under the request field an error names: the error's message, unless the wire words it otherwise. */
function fieldText(error: ServerError, context: ErrorContext): string {
  switch (error.code) {
    case 'table_not_found':
      return context.relation === undefined ? error.message : missingTableMessage(context.relation)
    case 'invalid_columns': {
      // Only a ShapeError carries this code; it names the columns as data.
      const problem = (error as ShapeError).columnProblem
      if (problem === undefined) return error.message
      return (problem.kind === 'missing_primary_key' ? MISSING_PK_COLUMNS : UNKNOWN_COLUMNS) + problem.columns.join(', ')
    }
    default:
      return error.message
  }
}

/**
 * Snapshot failures no retry can fix, as a 400 naming the request field at
 * fault rather than the 503 that tells clients to retry forever (the shape was
 * already dropped):
 * - Postgres refusing the query for the clause itself (a data exception on some
 *   row, `n + 2147483647 > 0` or `title::int4 > 0`, or a clause it would not
 *   plan): `where`;
 * - the role may not read the table, which only an administrator can grant: `table`.
 */
function snapshotRefusal(error: ServerError): SluiceError | undefined {
  const cause = error.cause
  if (!(cause instanceof ServerError)) return undefined
  const postgres = cause.cause instanceof Error ? cause.cause.message : cause.message
  switch (cause.code) {
    case 'evaluation_error':
    case 'invalid_query':
      return invalidRequest({ where: [`The where clause failed on the table's rows: ${postgres}`] })
    case 'insufficient_privilege':
      return invalidRequest({ table: [`The database role Sluice connects as cannot read the table (${postgres}): an administrator must GRANT SELECT on it to that role`] })
    default:
      return undefined
  }
}

function quote(identifier: string): string {
  return `"${identifier.replaceAll('"', '""')}"`
}
