import { ServerError, codeTable } from '../errors.js'

/**
 * Why a shape cannot be created or served. The codes are defined in the
 * server's one error table (src/errors.ts), which also decides the response.
 */
export const SHAPE_ERROR_CODES = codeTable(
  'table_not_found',
  'table_gone',
  'invalid_columns',
  'snapshot_failed',
  'shape_invalidated',
  'too_many_shapes',
  'subquery_views_full',
  'shutting_down',
)

export type ShapeErrorCode = keyof typeof SHAPE_ERROR_CODES

/** Which selected columns are wrong, and how: the wire names them, so they travel as data. */
export interface ColumnProblem {
  readonly kind: 'unknown' | 'missing_primary_key'
  readonly columns: readonly string[]
}

export class ShapeError extends ServerError<ShapeErrorCode> {
  override readonly name = 'ShapeError'
  /** Set for `invalid_columns`. */
  readonly columnProblem: ColumnProblem | undefined

  constructor(code: ShapeErrorCode, message?: string, options?: { cause?: unknown; columnProblem?: ColumnProblem }) {
    super(code, message, options)
    this.columnProblem = options?.columnProblem
  }
}
