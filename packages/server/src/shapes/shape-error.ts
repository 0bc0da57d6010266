/**
 * Why a shape cannot be created or served. Stable codes: the HTTP layer maps
 * them to statuses and bodies, callers branch on `code`, never on the message.
 */
export const SHAPE_ERROR_CODES = {
  table_not_found: 'The table does not exist (or is not visible to the Sluice role)',
  unsupported_table: 'The relation is not a table Sluice can replicate',
  invalid_columns: 'The selected columns are not valid for the table',
  snapshot_failed: 'The initial snapshot failed',
  shape_invalidated: 'The shape was invalidated while it was being created',
  too_many_shapes: 'The shape limit is reached',
  shutting_down: 'The server is shutting down',
} as const

export type ShapeErrorCode = keyof typeof SHAPE_ERROR_CODES

export class ShapeError extends Error {
  override readonly name = 'ShapeError'
  constructor(
    readonly code: ShapeErrorCode,
    message: string = SHAPE_ERROR_CODES[code],
    options?: { cause?: unknown },
  ) {
    super(message, options)
  }
}
