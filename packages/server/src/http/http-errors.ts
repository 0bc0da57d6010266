import { type ParamErrors, SluiceError, invalidRequest } from '@sluice/protocol'
import type { RelationName } from '@sluice/protocol'
import { ShapeError } from '../shapes/shape-error.js'
import { TableCatalogError, TableNotSupportedError } from '../shapes/table-catalog.js'
import { SnapshotError } from '../shapes/snapshot/index.js'

/**
 * Maps whatever a request handler throws to the `SluiceError` whose status and
 * body the client gets (PROTOCOL.md §2, §5.4). Anything unknown is a 500 with
 * Electric's generic body; the original error goes to the log, never the wire.
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
  if (error instanceof ShapeError) return fromShapeError(error, context)
  if (error instanceof TableNotSupportedError) return invalidRequest({ table: [error.message] })
  if (error instanceof TableCatalogError) return new SluiceError('internal', { cause: error })
  if (error instanceof SnapshotError) return new SluiceError('snapshot_failed', { cause: error })
  const code = (error as { code?: unknown } | null)?.code
  if (typeof code === 'string' && UNREACHABLE_CODES.has(code)) return new SluiceError('database_unreachable', { cause: error })
  // fastify's own errors (body parsing, content type, limits) carry their status.
  const status = (error as { statusCode?: unknown } | null)?.statusCode
  if (typeof status === 'number' && status >= 400 && status < 500) {
    if (status === 413) return new SluiceError('body_too_large', { cause: error })
    return new SluiceError('invalid_request', { cause: error, errors: { request: [String((error as Error).message)] } })
  }
  return new SluiceError('internal', { cause: error })
}

function fromShapeError(error: ShapeError, context: ErrorContext): SluiceError {
  switch (error.code) {
    case 'table_not_found':
      return invalidRequest({ table: [context.relation === undefined ? error.message : missingTableMessage(context.relation)] })
    case 'unsupported_table':
      return invalidRequest({ table: [error.message] })
    case 'invalid_columns':
      return invalidRequest(columnErrors(error.message))
    case 'snapshot_failed':
      return fromSnapshotFailure(error)
    case 'shape_invalidated':
      return new SluiceError('must_refetch', { cause: error })
    case 'too_many_shapes':
      return new SluiceError('stack_not_ready', { message: 'Too many shapes, please retry later', cause: error })
    case 'shutting_down':
      return new SluiceError('stack_not_ready', { message: 'Server is shutting down', cause: error })
  }
}

/**
 * Postgres refusing the snapshot query for the clause itself (a data exception
 * on some row, `n + 2147483647 > 0` or `title::int4 > 0`, or a clause it would
 * not plan) fails every retry the same way: a 400 naming `where`, not the 503
 * that tells clients to retry forever. The shape was already dropped.
 */
function fromSnapshotFailure(error: ShapeError): SluiceError {
  const cause = error.cause
  if (cause instanceof SnapshotError && (cause.code === 'evaluation_error' || cause.code === 'invalid_query')) {
    const postgres = cause.cause instanceof Error ? cause.cause.message : cause.message
    return invalidRequest({ where: [`The where clause failed on the table's rows: ${postgres}`] })
  }
  return new SluiceError('snapshot_failed', { cause: error })
}

/**
 * The shape manager words column problems its own way, naming each column as a
 * JSON string; the wire gets Electric's sentences with the names joined by ", ".
 */
function columnErrors(message: string): ParamErrors {
  const names = [...message.matchAll(/"(?:[^"\\]|\\.)*"/g)].map((m) => JSON.parse(m[0]) as string)
  const text = message.includes('primary key') ? MISSING_PK_COLUMNS : UNKNOWN_COLUMNS
  return { columns: [text + names.join(', ')] }
}

function quote(identifier: string): string {
  return `"${identifier.replaceAll('"', '""')}"`
}
