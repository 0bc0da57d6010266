import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import {
  ERROR_CODES,
  type ErrorCode,
  InvalidOffsetError,
  MUST_REFETCH_BODY,
  SluiceError,
  concurrentRequestLimitExceeded,
  invalidRequest,
  isErrorCode,
  offsetOutOfBounds,
} from '../src/index.js'

const body = (error: SluiceError): string => JSON.stringify(error.toBody())

describe('error bodies (docs/protocol.md §5.4)', () => {
  const cases: Array<[ErrorCode, number, string]> = [
    ['invalid_request', 400, '{"message":"Invalid request"}'],
    [
      'shape_definition_mismatch',
      400,
      '{"message":"The specified shape definition and handle do not match. Please ensure the shape definition ' +
        'is correct or omit the shape handle from the request to obtain a new one."}',
    ],
    ['invalid_json_body', 400, '{"error":"Invalid JSON in request body"}'],
    ['body_not_object', 400, '{"error":"Request body must be a JSON object"}'],
    ['unauthorized', 401, '{"message":"Unauthorized - Invalid API secret"}'],
    ['not_found', 404, '{"message":"No existing shape found"}'],
    ['delete_not_allowed', 405, '{"message":"DELETE not allowed"}'],
    ['must_refetch', 409, MUST_REFETCH_BODY],
    ['body_too_large', 413, '{"error":"Request body too large"}'],
    ['internal', 500, '{"error":"Internal server error"}'],
    ['stack_not_ready', 503, '{"message":"Stack not ready"}'],
    [
      'connection_not_available',
      503,
      '{"message":"Cannot connect to the database to verify the shape. Please try again later."}',
    ],
    [
      'concurrent_request_limit_exceeded',
      503,
      '{"code":"concurrent_request_limit_exceeded","message":"Concurrent request limit exceeded, please retry"}',
    ],
    ['database_unreachable', 503, '{"code":"database_unreachable","error":"Database is unreachable"}'],
    ['shape_rate_limited', 429, '{"code":"shape_rate_limited","message":"Too many new shapes from this client, please retry later"}'],
    ['creation_limit_exceeded', 503, '{"code":"creation_limit_exceeded","message":"Too many shapes being created at once, please retry"}'],
    ['subquery_views_full', 503, '{"code":"subquery_views_full","message":"Too many values held for subquery shapes, please retry later"}'],
  ]

  it.each(cases)('%s → %i %s', (code, status, expected) => {
    const error = new SluiceError(code)
    expect(error.status).toBe(status)
    expect(error.code).toBe(code)
    expect(body(error)).toBe(expected)
  })

  it('carries field errors in invalid-request bodies', () => {
    const error = invalidRequest({ offset: ["can't be blank"], subset: { limit: ['must be greater than 0'] } })
    expect(error.status).toBe(400)
    expect(body(error)).toBe(
      '{"message":"Invalid request","errors":{"offset":["can\'t be blank"],"subset":{"limit":["must be greater than 0"]}}}',
    )
  })

  it('words the out-of-bounds offset as Electric does', () => {
    expect(body(offsetOutOfBounds())).toBe(
      '{"message":"Invalid request","errors":{"offset":["out of bounds for this shape"]}}',
    )
  })

  it('words admission control as Electric does', () => {
    const error = concurrentRequestLimitExceeded('initial', 300, 7)
    expect(body(error)).toBe(
      '{"code":"concurrent_request_limit_exceeded","message":"Concurrent initial request limit exceeded (limit: 300), please retry"}',
    )
    expect(error.status).toBe(503)
    expect(error.retryAfter).toBe(7)
    expect(error.knownError).toBe(true)
  })

  it('lets messages and details be replaced', () => {
    expect(body(new SluiceError('invalid_json_body', { details: 'unexpected byte at position 3' }))).toBe(
      '{"error":"Invalid JSON in request body","details":"unexpected byte at position 3"}',
    )
    expect(body(new SluiceError('shape_log_unavailable', { message: 'Unable to retrieve shape log: gone' }))).toBe(
      '{"message":"Unable to retrieve shape log: gone"}',
    )
    // The 400 wire text never changes, whatever Error.message says.
    expect(body(new SluiceError('invalid_request', { message: 'detail for the log' }))).toBe(
      '{"message":"Invalid request"}',
    )
  })

  it('sets retry-after where the protocol fixes it', () => {
    expect(new SluiceError('stack_not_ready').retryAfter).toBe(5)
    expect(new SluiceError('database_unreachable').retryAfter).toBe(10)
    expect(new SluiceError('connection_not_available').retryAfter).toBe(1)
    expect(new SluiceError('internal').retryAfter).toBeUndefined()
    expect(new SluiceError('stack_not_ready', { retryAfter: 2 }).retryAfter).toBe(2)
  })

  it('is a proper Error with name, code, status and cause', () => {
    const cause = new Error('root')
    const error = new SluiceError('internal', { cause })
    expect(error).toBeInstanceOf(Error)
    expect(error.name).toBe('SluiceError')
    expect(error.cause).toBe(cause)
    expect(new InvalidOffsetError('x').name).toBe('InvalidOffsetError')
  })

  it('gives every code a 4xx or 5xx status', () => {
    for (const [code, spec] of Object.entries(ERROR_CODES)) {
      expect(isErrorCode(code)).toBe(true)
      expect(spec.status, code).toBeGreaterThanOrEqual(400)
      expect(spec.status, code).toBeLessThan(600)
    }
    expect(isErrorCode('toString')).toBe(false)
  })
})

describe('README', () => {
  const readme = readFileSync(join(import.meta.dirname, '..', 'README.md'), 'utf8')

  it('lists every error code with its status', () => {
    for (const [code, spec] of Object.entries(ERROR_CODES)) {
      expect(readme, code).toMatch(new RegExp(`\\|\\s*\`${code}\`\\s*\\|\\s*${spec.status}\\s*\\|`))
    }
  })

  it('lists no code that does not exist', () => {
    const listed = [...readme.matchAll(/^\|\s*`([a-z_]+)`\s*\|\s*\d{3}\s*\|/gm)].map((match) => match[1] ?? '')
    expect(listed.length).toBeGreaterThan(0)
    for (const code of listed) expect(isErrorCode(code), code).toBe(true)
  })
})
