/**
 * Error codes of the Shape API (docs/protocol.md §5.4).
 *
 * One table maps each stable `code` to its HTTP status, its body shape and its
 * default wire text. The body shapes are not uniform because Electric's are not:
 * some errors answer `{"message":…}`, some `{"error":…}`, admission control adds a
 * `code`, validation errors carry an Ecto-style `errors` map and a 409 is a JSON
 * array. Clients branch on status, not on body, but byte-compatible bodies keep
 * CDN-cached error responses identical to Electric's.
 *
 * Key order inside a body is fixed here (insertion order, which `JSON.stringify`
 * keeps): `message`/`error` first, then `errors`/`details`, as docs/protocol.md writes
 * them. Electric serialises Erlang maps, whose key order its source does not
 * determine, and JSON clients do not depend on it.
 */

/** An Ecto-style error map: field → messages, nested for embedded params (`subset`). */
export interface ParamErrors {
  readonly [field: string]: readonly string[] | ParamErrors
}

/** How an error's JSON body is laid out. */
export type ErrorBodyShape =
  | 'invalid_request' // {"message":"Invalid request","errors":{…}}
  | 'message' //         {"message":"…"}
  | 'error' //           {"error":"…"} (+ "details" when given)
  | 'code_message' //    {"code":"…","message":"…"}
  | 'code_error' //      {"code":"…","error":"…"}
  | 'must_refetch' //    [{"headers":{"control":"must-refetch"}}]

export interface ErrorSpec {
  readonly status: number
  readonly body: ErrorBodyShape
  /** Default wire text; instances may override it. */
  readonly message: string
  /** Seconds for `retry-after`, when the protocol fixes one. */
  readonly retryAfter?: number
  /** Whether the response carries `electric-internal-known-error: true`. */
  readonly knownError?: boolean
}

/** The wire text of every 400 validation error, whatever the detail. */
export const INVALID_REQUEST_MESSAGE = 'Invalid request'

/** Body of a 404 for a path that is not an endpoint (plain text, not JSON). */
export const ROUTE_NOT_FOUND_TEXT = 'Not found'

export const ERROR_CODES = {
  invalid_request: { status: 400, body: 'invalid_request', message: INVALID_REQUEST_MESSAGE },
  invalid_offset: { status: 400, body: 'invalid_request', message: INVALID_REQUEST_MESSAGE },
  offset_out_of_bounds: { status: 400, body: 'invalid_request', message: INVALID_REQUEST_MESSAGE },
  shape_definition_mismatch: {
    status: 400,
    body: 'message',
    message:
      'The specified shape definition and handle do not match. Please ensure the shape definition ' +
      'is correct or omit the shape handle from the request to obtain a new one.',
  },
  invalid_json_body: { status: 400, body: 'error', message: 'Invalid JSON in request body' },
  body_not_object: { status: 400, body: 'error', message: 'Request body must be a JSON object' },
  unauthorized: { status: 401, body: 'message', message: 'Unauthorized - Invalid API secret' },
  not_found: { status: 404, body: 'message', message: 'No existing shape found' },
  delete_not_allowed: { status: 405, body: 'message', message: 'DELETE not allowed' },
  must_refetch: { status: 409, body: 'must_refetch', message: 'The shape must be refetched' },
  body_too_large: { status: 413, body: 'error', message: 'Request body too large' },
  internal: { status: 500, body: 'error', message: 'Internal server error' },
  shape_log_unavailable: { status: 500, body: 'message', message: 'Unable to retrieve shape log' },
  invalid_lsn: { status: 500, body: 'error', message: 'Internal server error' },
  stack_not_ready: { status: 503, body: 'message', message: 'Stack not ready', retryAfter: 5 },
  connection_not_available: {
    status: 503,
    body: 'message',
    message: 'Cannot connect to the database to verify the shape. Please try again later.',
    retryAfter: 1,
  },
  // retry-after is left to the server: Electric picks 6..10 s at random so that
  // rejected clients do not come back in lock step.
  concurrent_request_limit_exceeded: {
    status: 503,
    body: 'code_message',
    message: 'Concurrent request limit exceeded, please retry',
    knownError: true,
  },
  database_unreachable: {
    status: 503,
    body: 'code_error',
    message: 'Database is unreachable',
    retryAfter: 10,
  },
  snapshot_failed: { status: 503, body: 'message', message: 'Snapshot creation failed', retryAfter: 10 },
  // Sluice's shape-creation limits (not Electric's): a client that creates too many new shapes, and too many at once
  // server-wide. retry-after is the server's: when the client's next new shape is allowed, or a short spread.
  shape_rate_limited: {
    status: 429,
    body: 'code_message',
    message: 'Too many new shapes from this client, please retry later',
  },
  creation_limit_exceeded: {
    status: 503,
    body: 'code_message',
    message: 'Too many shapes being created at once, please retry',
  },
  // Sluice's bound on the memory of subquery shapes' result sets (--max-subquery-view-entries).
  subquery_views_full: {
    status: 503,
    body: 'code_message',
    message: 'Too many values held for subquery shapes, please retry later',
    retryAfter: 5,
  },
} as const satisfies Readonly<Record<string, ErrorSpec>>

export type ErrorCode = keyof typeof ERROR_CODES

export function isErrorCode(value: string): value is ErrorCode {
  return Object.hasOwn(ERROR_CODES, value)
}

export interface SluiceErrorOptions {
  /** Replaces the table's wire text (and `Error.message`). */
  readonly message?: string
  /** Field errors of an `invalid_request`-shaped body. */
  readonly errors?: ParamErrors
  /** `details` of an `error`-shaped body (the JSON parser's complaint, for instance). */
  readonly details?: string
  readonly retryAfter?: number
  readonly cause?: unknown
}

export type ErrorBody =
  | { readonly message: string; readonly errors?: ParamErrors }
  | { readonly error: string; readonly details?: string }
  | { readonly code: ErrorCode; readonly message: string }
  | { readonly code: ErrorCode; readonly error: string }
  | readonly [{ readonly headers: { readonly control: 'must-refetch' } }]

export class SluiceError<C extends ErrorCode = ErrorCode> extends Error {
  override readonly name: string = 'SluiceError'
  readonly code: C
  readonly status: number
  readonly retryAfter: number | undefined
  readonly knownError: boolean
  readonly errors: ParamErrors | undefined
  readonly details: string | undefined

  constructor(code: C, options: SluiceErrorOptions = {}) {
    const spec: ErrorSpec = ERROR_CODES[code]
    super(options.message ?? spec.message, options.cause === undefined ? undefined : { cause: options.cause })
    this.code = code
    this.status = spec.status
    this.retryAfter = options.retryAfter ?? spec.retryAfter
    this.knownError = spec.knownError ?? false
    this.errors = options.errors
    this.details = options.details
  }

  /** The JSON body for this error, keys in wire order: `JSON.stringify` it as is. */
  toBody(): ErrorBody {
    const spec: ErrorSpec = ERROR_CODES[this.code]
    switch (spec.body) {
      case 'invalid_request':
        // The wire text never varies; `Error.message` may carry detail for logs.
        return this.errors === undefined
          ? { message: INVALID_REQUEST_MESSAGE }
          : { message: INVALID_REQUEST_MESSAGE, errors: this.errors }
      case 'message':
        return { message: this.message }
      case 'error':
        return this.details === undefined
          ? { error: this.message }
          : { error: this.message, details: this.details }
      case 'code_message':
        return { code: this.code, message: this.message }
      case 'code_error':
        return { code: this.code, error: this.message }
      case 'must_refetch':
        return [{ headers: { control: 'must-refetch' } }]
    }
  }
}

/** A 400 carrying field errors, as produced by request validation. */
export function invalidRequest(errors: ParamErrors): SluiceError<'invalid_request'> {
  return new SluiceError('invalid_request', { errors })
}

/** A request offset past the end of the shape's log, once the wait for it has run out. */
export function offsetOutOfBounds(): SluiceError<'offset_out_of_bounds'> {
  return new SluiceError('offset_out_of_bounds', {
    errors: { offset: ['out of bounds for this shape'] },
  })
}

/** The 503 of admission control, worded as Electric words it. */
export function concurrentRequestLimitExceeded(
  kind: 'initial' | 'existing',
  limit: number,
  retryAfter?: number,
): SluiceError<'concurrent_request_limit_exceeded'> {
  return new SluiceError('concurrent_request_limit_exceeded', {
    message: `Concurrent ${kind} request limit exceeded (limit: ${limit}), please retry`,
    ...(retryAfter === undefined ? {} : { retryAfter }),
  })
}
