import { SluiceError } from '@sluice/protocol'

/**
 * Why a subset snapshot (docs/protocol.md §6) was refused. Stable: tests and logs
 * branch on it; the message may improve.
 */
export type SubsetErrorReason =
  /** Postgres's parser refused the order_by text (`At location n: …`). */
  | 'syntax_error'
  /** The text parsed, but not as a plain ORDER BY list (`;`, LIMIT, a second statement…). */
  | 'not_an_order_by'
  /** A sort key names no column of the table. */
  | 'unknown_column'
  /** A sort key is something other than a bare column name (a function, a subquery, USING, COLLATE…). */
  | 'unsupported'
  /** The subset's where clause (or its params) is invalid; the where compiler's message. */
  | 'invalid_where'
  /** Length or number of sort keys over the limits. */
  | 'limit_exceeded'
  /** Postgres refused the query as built (an order_by column whose type has no ordering, say). */
  | 'invalid_query'
  /** Postgres raised an error evaluating the query on some row (division by zero…). */
  | 'evaluation_error'

/** Which subset field is to blame, as the 400 body nests it under `subset`. */
export type SubsetErrorField = 'where' | 'order_by' | 'params'

/**
 * A 400 whose body is Electric's validation shape with the problem nested under
 * `subset`: `{"message":"Invalid request","errors":{"subset":{"order_by":[…]}}}`.
 */
export class SubsetError extends SluiceError<'invalid_request'> {
  override readonly name = 'SubsetError'
  readonly reason: SubsetErrorReason
  readonly field: SubsetErrorField | undefined

  constructor(reason: SubsetErrorReason, message: string, options: { field?: SubsetErrorField; cause?: unknown } = {}) {
    super('invalid_request', {
      message,
      // Errors of the query as a whole name no field: Postgres does not say which part it refused.
      errors: { subset: options.field === undefined ? [message] : { [options.field]: [message] } },
      ...(options.cause === undefined ? {} : { cause: options.cause }),
    })
    this.reason = reason
    this.field = options.field
  }
}
