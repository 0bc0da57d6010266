import { readFileSync } from 'node:fs'
import { ERROR_CODES, SluiceError } from '@sluice/protocol'
import { describe, expect, it } from 'vitest'
import { ConfigError } from '../src/config.js'
import { SERVER_ERRORS, ServerError, httpStatusOf, isServerErrorCode } from '../src/errors.js'
import { toSluiceError } from '../src/http/http-errors.js'
import { REPLICATION_ERROR_CODES } from '../src/replication/replication-errors.js'
import { SHAPE_ERROR_CODES, ShapeError } from '../src/shapes/shape-error.js'
import { SNAPSHOT_ERROR_CODES, SnapshotError } from '../src/shapes/snapshot/snapshot-error.js'
import { SPILL_ERROR_CODES, SpillError } from '../src/replication/spill/errors.js'
import { EvaluationError } from '../src/where/where-error.js'

describe('the server error table', () => {
  it('maps every code to a wire error of the protocol', () => {
    for (const [code, spec] of Object.entries(SERVER_ERRORS)) {
      expect(Object.hasOwn(ERROR_CODES, spec.wire), code).toBe(true)
      expect(isServerErrorCode(code)).toBe(true)
      expect(httpStatusOf(code as keyof typeof SERVER_ERRORS)).toBe(ERROR_CODES[spec.wire].status)
      if ('field' in spec) expect(spec.wire, code).toBe('invalid_request')
    }
    expect(isServerErrorCode('toString')).toBe(false)
  })

  it("draws each layer's codes from it", () => {
    for (const layer of [SHAPE_ERROR_CODES, SNAPSHOT_ERROR_CODES, SPILL_ERROR_CODES, REPLICATION_ERROR_CODES]) {
      for (const [code, description] of Object.entries(layer)) expect(description).toBe(SERVER_ERRORS[code as keyof typeof SERVER_ERRORS].description)
    }
  })

  it('gives every error a name, a code and its cause', () => {
    const cause = new Error('root')
    const errors: ServerError[] = [
      new ShapeError('snapshot_failed', undefined, { cause }),
      new SnapshotError('query_failed', 'x', { cause }),
      new SpillError('spill_write_failed', 'x', { cause }),
      new EvaluationError('division_by_zero', 'division by zero'),
      new ConfigError(['bad']),
    ]
    for (const error of errors) {
      expect(error).toBeInstanceOf(ServerError)
      expect(error.name).toBe(error.constructor.name)
      expect(isServerErrorCode(error.code)).toBe(true)
    }
    expect(errors[0]?.cause).toBe(cause)
    expect(errors[0]?.message).toBe(SERVER_ERRORS.snapshot_failed.description)
    expect(new ConfigError(['a', 'b'])).toMatchObject({ code: 'invalid_config', message: 'a\nb', problems: ['a', 'b'] })
  })

  it('answers a request by the code alone', () => {
    const wire = (error: unknown): SluiceError => toSluiceError(error)
    expect(wire(new ShapeError('too_many_shapes')).toBody()).toEqual({ message: 'Too many shapes, please retry later' })
    expect(wire(new ShapeError('shape_invalidated')).status).toBe(409)
    expect(wire(new SnapshotError('connection_failed')).code).toBe('snapshot_failed')
    expect(wire(new SpillError('spill_corrupt')).code).toBe('internal')
    const columns = new ShapeError('invalid_columns', 'whatever the log says', { columnProblem: { kind: 'missing_primary_key', columns: ['a"b', 'c'] } })
    expect(wire(columns).toBody()).toEqual({
      message: 'Invalid request',
      errors: { columns: ['The list of columns must include all primary key columns, missing: a"b, c'] },
    })
  })
})

describe('docs/errors.md', () => {
  const doc = readFileSync(new URL('../../../docs/errors.md', import.meta.url), 'utf8')

  it('lists every code with its status', () => {
    for (const code of Object.keys(SERVER_ERRORS) as Array<keyof typeof SERVER_ERRORS>) {
      expect(doc, code).toMatch(new RegExp(`^\\|\\s*\`${code}\`\\s*\\|\\s*${httpStatusOf(code)}\\s*\\|`, 'm'))
    }
  })

  it('lists no code that does not exist, and each once', () => {
    const listed = [...doc.matchAll(/^\|\s*`([a-z_]+)`\s*\|\s*\d{3}\s*\|/gm)].map((match) => match[1] ?? '')
    expect(listed.length).toBe(Object.keys(SERVER_ERRORS).length)
    for (const code of listed) expect(isServerErrorCode(code), code).toBe(true)
    expect(new Set(listed).size).toBe(listed.length)
  })
})
