import { beforeAll, describe, expect, it } from 'vitest'
import { compileWhereSync, loadWhereParser, WhereClauseError } from '../../src/where/index.js'
import { COLUMNS, refusal } from './helpers.js'

beforeAll(async () => {
  await loadWhereParser()
})

describe('syntax errors read like Electric: At location <cursorpos>: <postgres message>', () => {
  it.each([
    ['1 x 1', 'At location 17: syntax error at or near "x"'],
    ['', 'At location 15: syntax error at end of input'],
    ['i4 =', 'At location 19: syntax error at end of input'],
    ['true) OR (1=1', 'At location 19: syntax error at or near ")"'],
    ["t = 'abc", 'At location 19: unterminated quoted string at or near "\'abc"'],
    ['t = "abc', 'At location 19: unterminated quoted identifier at or near ""abc"'],
    ['true /* comment', 'At location 20: unterminated /* comment at or near "/* comment"'],
    ['i4 = = 1', 'At location 20: syntax error at or near "="'],
    ['(i4 = 1', 'At location 22: syntax error at end of input'],
    ["t = 'a' 'b'", 'At location 23: syntax error at or near "\'b\'"'],
  ])('%j', (where, message) => {
    expect(refusal(where)).toBe(`syntax_error: ${message}`)
  })

  it('carries the position and the field on the error, with a 400 body naming `where`', () => {
    let error: unknown
    try {
      compileWhereSync('1 x 1', { columns: COLUMNS })
    } catch (e) {
      error = e
    }
    expect(error).toBeInstanceOf(WhereClauseError)
    const e = error as WhereClauseError
    expect(e.code).toBe('invalid_request')
    expect(e.status).toBe(400)
    expect(e.position).toBe(17)
    expect(e.toBody()).toEqual({
      message: 'Invalid request',
      errors: { where: ['At location 17: syntax error at or near "x"'] },
    })
  })
})

describe('only a single plain WHERE expression is accepted', () => {
  it.each([
    ['1=1; DROP TABLE x', 'more than one statement'],
    ['true; DELETE FROM t', 'more than one statement'],
    ['true;', '";" is not allowed'],
    ['true GROUP BY 1', 'without FROM, GROUP BY'],
    ['true ORDER BY 1', 'without FROM, GROUP BY'],
    ['true LIMIT 1', 'without FROM, GROUP BY'],
    ['true UNION SELECT 1', 'without FROM, GROUP BY'],
    ['true FOR UPDATE', 'without FROM, GROUP BY'],
    ['true WINDOW w AS ()', 'without FROM, GROUP BY'],
    ['true HAVING true', 'without FROM, GROUP BY'],
  ])('%j is refused', (where, fragment) => {
    const result = refusal(where)
    expect(result.startsWith('not_an_expression: ')).toBe(true)
    expect(result).toContain(fragment)
  })
})

describe('hostile clauses', () => {
  it.each([
    // Injection attempts either fail to parse or are refused as not one expression.
    ["t = '' OR 1=1; --", 'not_an_expression'],
    ["t = 'x'); DROP TABLE t; --", 'syntax_error'],
    ["t = 'x' UNION SELECT 1", 'not_an_expression'],
    ['i4 = (SELECT max(id) FROM pg_user)', 'unsupported'],
    ['EXISTS (SELECT 1)', 'unsupported'],
    ["pg_sleep(10) IS NULL", 'unsupported'],
    ["t = current_user", 'unsupported'],
    ["t = version()", 'unsupported'],
    ["i4 = (SELECT 1) --", 'unsupported'],
    ['i4 IN (SELECT id FROM t)', 'unsupported'],
    ['pg_catalog.pg_read_file(\'/etc/passwd\') IS NULL', 'unsupported'],
    ["lower(t) = 'a' AND set_config('x', 'y', false) IS NULL", 'unsupported'],
    ['t.i4 = 1', 'unsupported'],
    ['public.t.i4 = 1', 'unsupported'],
    ['i4 = ANY (SELECT 1)', 'unsupported'],
    ["CASE WHEN true THEN true END", 'unsupported'],
    ['t::regclass IS NULL', 'unsupported'],
    ['count(*) > 0', 'unsupported'],
    ['now() > ts', 'unsupported'],
    ['ai[1] = 1', 'unsupported'],
  ])('%j is refused (%s)', (where, reason) => {
    expect(refusal(where).split(':')[0]).toBe(reason)
  })

  // Found by the HTTP fuzz test: the WASM parser stopped at the NUL, so `i4 = 1<NUL>; DROP TABLE t` was accepted as `i4 = 1`.
  it('a NUL character is refused, not a place where parsing silently stops', () => {
    expect(refusal('i4 = 1\0; DROP TABLE t')).toBe('syntax_error: At location 21: the where clause contains a NUL character, which Postgres does not accept')
    expect(refusal("t = 'a\0b'")).toMatch(/^syntax_error: At location 21: /)
  })

  it('an unpaired UTF-16 surrogate (not a character: Postgres would get U+FFFD) is refused in the clause and in a parameter; a pair is fine', () => {
    expect(refusal("t = 'a\ud800b'")).toBe('syntax_error: At location 21: the where clause contains an unpaired UTF-16 surrogate, which is not a character')
    expect(refusal('t = $1', ['\udc00'])).toBe('invalid_value: $1: contains an unpaired UTF-16 surrogate, which is not a character')
    expect(compileWhereSync("t = '\u{1F600}' OR t = $1", { columns: COLUMNS, params: ['\u{1F600}'] }).evaluate({ t: '\u{1F600}' })).toBe(true)
  })

  it('a parameter with a NUL is refused with Postgres\'s message, naming params', () => {
    expect(refusal('t = $1', ['a\0b'])).toBe('invalid_value: $1: invalid byte sequence for encoding "UTF8": 0x00')
    let error: unknown
    try {
      compileWhereSync('t = $1 OR t = $2', { columns: COLUMNS, params: ['ok', '\0'] })
    } catch (e) {
      error = e
    }
    expect((error as WhereClauseError).toBody()).toEqual({ message: 'Invalid request', errors: { params: ['$2: invalid byte sequence for encoding "UTF8": 0x00'] } })
  })

  it('comments are only whitespace: they cannot hide anything', () => {
    expect(refusal('i4 = 1 -- ; DROP TABLE t')).toBe('accepted')
    expect(refusal('i4 = /* ; DROP TABLE t */ 1')).toBe('accepted')
  })

  it('limits the length of the clause', () => {
    const long = `t = '${'x'.repeat(40_000)}'`
    expect(refusal(long)).toMatch(/^limit_exceeded: The where clause is too long \(40006 characters; the limit is 32768\)$/)
  })

  it('limits nesting depth with a clear error, before any recursion can overflow', () => {
    expect(refusal(`${'('.repeat(200)}true${')'.repeat(200)}`)).toBe('accepted') // parentheses do not nest expressions
    expect(refusal(`${'NOT '.repeat(100)}true`)).toMatch(/^limit_exceeded: The where clause is nested too deeply \(the limit is 64 levels\)/)
    expect(refusal(`${'lower('.repeat(100)}t${')'.repeat(100)} = 'a'`)).toMatch(/^limit_exceeded: The where clause is nested too deeply/)
    expect(refusal(`i4 = 1${' + 1'.repeat(5000)}`)).toMatch(/^limit_exceeded: The where clause has too many operators/)
    expect(refusal(`${'('.repeat(20_000)}true${')'.repeat(20_000)}`)).toMatch(/^limit_exceeded: The where clause is too long/)
  })

  it('limits IN lists and array constants', () => {
    const items = Array.from({ length: 6000 }, (_, i) => i).join(',')
    expect(refusal(`i4 IN (${items})`)).toBe('limit_exceeded: IN list has 6000 items; the limit is 5000')
    expect(refusal(`i4 = ANY (ARRAY[${items}])`)).toBe('limit_exceeded: ARRAY[] has 6000 elements; the limit is 5000')
    expect(refusal(`ai @> '{${Array.from({ length: 6000 }, () => 1).join(',')}}'`)).toMatch(/^invalid_value: .*more than 10000|^accepted$/)
    const big = `{${Array.from({ length: 10_001 }, () => 1).join(',')}}`
    expect(refusal(`ai @> $1`, [big])).toBe('invalid_value: $1: array has more than 10000 elements')
    const ok = Array.from({ length: 5000 }, (_, i) => i).join(',')
    expect(refusal(`i4 IN (${ok})`)).toBe('accepted')
  })

  it('limits can be configured per call', () => {
    expect(() => compileWhereSync('i4 IN (1,2,3)', { columns: COLUMNS, limits: { maxListItems: 2 } })).toThrow(
      'IN list has 3 items; the limit is 2',
    )
    expect(() => compileWhereSync('i4 = 1', { columns: COLUMNS, limits: { maxLength: 3 } })).toThrow(/too long/)
  })
})
