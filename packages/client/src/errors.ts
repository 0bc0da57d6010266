/**
 * Errors of the client, each a class with a stable `code` that callers can
 * branch on (`error.code === 'http_error'`), independent of message wording.
 *
 * | code               | class                    | when |
 * |--------------------|--------------------------|------|
 * | `http_error`       | `FetchError`             | a response the stream cannot use: a 4xx other than 409/429 (stops the stream), or a 5xx/429 (retried) |
 * | `network_error`    | `NetworkError`           | fetch itself failed (no response); always retried |
 * | `missing_headers`  | `MissingHeadersError`    | a 200 without the electric-* headers the protocol requires (often a proxy or CORS setup that hides them) |
 * | `invalid_response` | `InvalidResponseError`   | a body that is not the JSON (or SSE) the protocol describes |
 * | `null_value`       | `ParserNullValueError`   | `null` for a column the schema marks `not_null` |
 * | `invalid_array`    | `InvalidArrayLiteralError` | a Postgres array literal that does not parse |
 * | `invalid_transition` | `InvalidTransitionError` | an event the stream's current state has no transition for (a client bug) |
 * | `storage_error`    | `StorageCodecError`      | persisted state that cannot be decoded |
 * | `storage_save_failed` | `StorageSaveError`    | the shape's storage refused to save it (a full quota); reported, syncing goes on |
 * | `subscriber_failed` | `SubscriberError`       | a shape subscriber threw; reported, the other subscribers and waits go on |
 * | `aborted`          | `AbortedError`           | waiting on something the caller aborted |
 * | `invalid_options`  | `InvalidOptionsError`    | options the stream cannot work with (a reserved query parameter, no table) |
 * | `invalid_txid`     | `InvalidTxidError`       | `waitForTxid` given something that is not a transaction id |
 */
export type ClientErrorCode =
  | 'http_error'
  | 'network_error'
  | 'missing_headers'
  | 'invalid_response'
  | 'null_value'
  | 'invalid_array'
  | 'invalid_transition'
  | 'storage_error'
  | 'storage_save_failed'
  | 'subscriber_failed'
  | 'aborted'
  | 'invalid_options'
  | 'invalid_txid'

export abstract class ClientError extends Error {
  abstract readonly code: ClientErrorCode
}

/** A response with a status the stream does not treat as success. */
export class FetchError extends ClientError {
  override readonly name = 'FetchError'
  readonly code = 'http_error'
  readonly status: number
  readonly url: string
  /** The body as text (the server's JSON error, usually). */
  readonly text: string
  /** The body parsed as JSON, when it is JSON. */
  readonly json: unknown
  readonly headers: Readonly<Record<string, string>>

  constructor(status: number, url: string, text: string, headers: Headers) {
    super(`HTTP ${status} from ${url}: ${text.slice(0, 500)}`)
    this.status = status
    this.url = url
    this.text = text
    let json: unknown
    try {
      json = JSON.parse(text)
    } catch {
      json = undefined
    }
    this.json = json
    const copy: Record<string, string> = {}
    headers.forEach((value, name) => {
      copy[name] = value
    })
    this.headers = copy
  }
}

export class NetworkError extends ClientError {
  override readonly name = 'NetworkError'
  readonly code = 'network_error'
  readonly url: string

  constructor(url: string, cause: unknown) {
    super(`request to ${url} failed: ${cause instanceof Error ? cause.message : String(cause)}`, { cause })
    this.url = url
  }
}

export class MissingHeadersError extends ClientError {
  override readonly name = 'MissingHeadersError'
  readonly code = 'missing_headers'
  readonly missing: readonly string[]

  constructor(url: string, missing: readonly string[]) {
    super(
      `response from ${url} lacks the headers ${missing.join(', ')}; ` +
        'a proxy may strip them, or CORS may not expose them (access-control-expose-headers)',
    )
    this.missing = missing
  }
}

export class InvalidResponseError extends ClientError {
  override readonly name = 'InvalidResponseError'
  readonly code = 'invalid_response'

  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options)
  }
}

export class ParserNullValueError extends ClientError {
  override readonly name = 'ParserNullValueError'
  readonly code = 'null_value'
  readonly column: string

  constructor(column: string) {
    super(`column "${column}" is NOT NULL in the schema but the value is null`)
    this.column = column
  }
}

export class InvalidArrayLiteralError extends ClientError {
  override readonly name = 'InvalidArrayLiteralError'
  readonly code = 'invalid_array'
  readonly input: string
  readonly position: number

  constructor(input: string, position: number, problem: string) {
    super(`invalid array literal at position ${position} (${problem}): ${input.slice(0, 200)}`)
    this.input = input
    this.position = position
  }
}

export class InvalidTransitionError extends ClientError {
  override readonly name = 'InvalidTransitionError'
  readonly code = 'invalid_transition'

  constructor(state: string, event: string) {
    super(`no transition from state "${state}" on event "${event}"`)
  }
}

export class StorageCodecError extends ClientError {
  override readonly name = 'StorageCodecError'
  readonly code = 'storage_error'

  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options)
  }
}

export class StorageSaveError extends ClientError {
  override readonly name = 'StorageSaveError'
  readonly code = 'storage_save_failed'

  constructor(key: string, options: { cause: unknown }) {
    super(`the shape's storage did not save "${key}"`, options)
  }
}

export class SubscriberError extends ClientError {
  override readonly name = 'SubscriberError'
  readonly code = 'subscriber_failed'

  constructor(options: { cause: unknown }) {
    super('a shape subscriber threw', options)
  }
}

export class AbortedError extends ClientError {
  override readonly name = 'AbortedError'
  readonly code = 'aborted'

  constructor(what: string) {
    super(`${what} was aborted`)
  }
}

export class InvalidOptionsError extends ClientError {
  override readonly name = 'InvalidOptionsError'
  readonly code = 'invalid_options'

  constructor(message: string) {
    super(message)
  }
}

export class InvalidTxidError extends ClientError {
  override readonly name = 'InvalidTxidError'
  readonly code = 'invalid_txid'

  constructor(txid: unknown, options?: { cause?: unknown }) {
    super(`not a transaction id: ${String(txid)} (pass pg_current_xact_id() of the write, as a number, bigint or string)`, options)
  }
}

/** Network failures, 5xx and 429 are retried; everything else stops the stream. */
export function isRetryable(error: unknown): boolean {
  if (error instanceof NetworkError) return true
  if (error instanceof FetchError) return error.status >= 500 || error.status === 429
  return false
}
