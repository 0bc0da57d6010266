import { ServerError } from '../errors.js'
import { SluiceError } from '@sluice/protocol'

/**
 * Why a where clause was refused at shape creation. Stable: the HTTP layer,
 * logs and tests branch on it; the wording of the message may improve.
 */
export type WhereErrorReason =
  /** Postgres's parser refused the text (`At location n: …`). */
  | 'syntax_error'
  /** The text parsed, but as more than one plain WHERE expression (`;`, ORDER BY, UNION, …). */
  | 'not_an_expression'
  | 'unknown_column'
  | 'undefined_operator'
  | 'undefined_function'
  | 'undefined_type'
  | 'undefined_parameter'
  /** Postgres would accept it, but it is outside our allow-list. */
  | 'unsupported'
  /** Ill-typed: a non-boolean WHERE, an AND over integers, a polymorphic mismatch. */
  | 'datatype_mismatch'
  /** A constant or parameter Postgres would refuse (`'abc'::int`, a bad array literal, 1/0). */
  | 'invalid_value'
  /** Text length, nesting depth, list or node count over the limits. */
  | 'limit_exceeded'

/** Which request parameter is to blame, as the 400 body's `errors` map names it. */
/** `table`: a subquery names a table that does not exist (Electric passes the inner shape's field up). */
export type WhereErrorField = 'where' | 'params' | 'table'

/**
 * A where clause (or its params) that cannot become a shape: a 400 whose body
 * names the field, as every validation error of the Shape API does. `code` stays
 * the protocol's `invalid_request` so the one error table decides the response;
 * `reason` is this stage's own stable code.
 */
export class WhereClauseError extends SluiceError<'invalid_request'> {
  override readonly name = 'WhereClauseError'
  readonly reason: WhereErrorReason
  readonly field: WhereErrorField
  /** 0-based offset in `SELECT 1 WHERE <clause>`, when the problem has one. */
  readonly position: number | undefined

  constructor(
    reason: WhereErrorReason,
    message: string,
    options: { field?: WhereErrorField; position?: number; cause?: unknown } = {},
  ) {
    const field = options.field ?? 'where'
    super('invalid_request', {
      message,
      errors: { [field]: [message] },
      ...(options.cause === undefined ? {} : { cause: options.cause }),
    })
    this.reason = reason
    this.field = field
    this.position = options.position
  }
}

/**
 * SQLSTATE-like names of what can go wrong while evaluating a clause on a row,
 * the ones Postgres would raise for the same expression and values.
 */
export type EvaluationErrorCode =
  | 'division_by_zero'
  | 'numeric_value_out_of_range'
  | 'invalid_text_representation'
  | 'invalid_datetime_format'
  | 'datetime_field_overflow'
  | 'invalid_parameter_value'
  | 'invalid_escape_sequence'
  | 'array_subscript_error'
  | 'untranslatable_character'
  /** Our own: the row has no value for a referenced column (e.g. an unchanged TOAST value). */
  | 'missing_value'
  /** Our own: a bug in the evaluator, contained so that replication carries on. */
  | 'internal_error'

/**
 * Raised inside value code when Postgres would raise an error. The evaluator
 * catches it and returns an {@link EvaluationFailure}; the compiler turns it into
 * a {@link WhereClauseError} when it happens while folding constants.
 */
export class EvaluationError extends ServerError<EvaluationErrorCode> {
  override readonly name = 'EvaluationError'

  constructor(code: EvaluationErrorCode, message: string) {
    super(code, message)
  }
}

/**
 * What evaluating a clause on a row returns instead of throwing when Postgres
 * would have raised an error for that row (division by zero, an overflow, a
 * value that does not parse). The shape treats the row as not matching, so
 * one odd row never stops replication.
 */
export class EvaluationFailure {
  readonly code: EvaluationErrorCode
  readonly message: string

  constructor(code: EvaluationErrorCode, message: string) {
    this.code = code
    this.message = message
  }
}

export function invalidSyntax(typeDisplayName: string, text: string): EvaluationError {
  return new EvaluationError('invalid_text_representation', `invalid input syntax for type ${typeDisplayName}: "${text}"`)
}

export function outOfRange(message: string): EvaluationError {
  return new EvaluationError('numeric_value_out_of_range', message)
}

export function divisionByZero(): EvaluationError {
  return new EvaluationError('division_by_zero', 'division by zero')
}
