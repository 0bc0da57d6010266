import { beforeAll, describe, expect, it } from 'vitest'
import { compileWhereSync, loadWhereParser, WhereClauseError } from '../../src/where/index.js'
import { COLUMNS, refusal } from './helpers.js'

beforeAll(async () => {
  await loadWhereParser()
})

const PARAMS = ['5', 'abc']

describe('type checking: what is refused, and how it reads', () => {
  it.each([
    // Unknown names.
    ['x = 1', 'unknown_column: column "x" does not exist'],
    ['"mixed case" = \'a\'', 'unknown_column: column "mixed case" does not exist'],
    ['$3 = t', 'undefined_parameter: there is no parameter $3'],
    ['i4::foo > 0', 'undefined_type: type "foo" does not exist'],
    // The clause and its connectives must be boolean.
    ['i4 + 1', 'datatype_mismatch: WHERE clause must return a boolean'],
    ['t', 'datatype_mismatch: WHERE clause must return a boolean'],
    ['i4 AND true', 'datatype_mismatch: argument of AND must be type boolean, not type integer'],
    ['NOT i4', 'datatype_mismatch: argument of NOT must be type boolean, not type integer'],
    ['i4 IS TRUE', 'datatype_mismatch: argument of IS TRUE must be type boolean, not type integer'],
    ['$1', 'invalid_value: $1: invalid input syntax for type boolean: "5"'],
    // Operators and functions Postgres does not have, worded as Postgres words it.
    ['t = 1', 'undefined_operator: operator does not exist: text = integer'],
    ['t + 1 > 0', 'undefined_operator: operator does not exist: text + integer'],
    ['j = j', 'undefined_operator: operator does not exist: json = json'],
    ["j = '{}'", 'undefined_operator: operator does not exist: json = unknown'],
    ["ai = ARRAY['a']", 'undefined_operator: operator does not exist: integer[] = text[]'],
    ['ai @> ARRAY[1::int8]', 'undefined_operator: operator does not exist: integer[] @> bigint[]'],
    ["'{}' @> '{}'", 'undefined_operator: operator is not unique: unknown @> unknown'],
    ["lower(i4) = 'a'", 'undefined_function: function lower(integer) does not exist'],
    ['length(1) = 1', 'undefined_function: function length(integer) does not exist'],
    ['i4 = ANY(i4)', 'datatype_mismatch: op ANY/ALL (array) requires array on right side'],
    ["coalesce(t, 1) = 'a'", 'datatype_mismatch: COALESCE types text and integer cannot be matched'],
    ['i4 COLLATE "C" = 1', 'datatype_mismatch: collations are not supported by type integer'],
    ['ARRAY[] = ai', 'datatype_mismatch: cannot determine type of empty array (cast it, e.g. ARRAY[]::integer[])'],
    ['i4::int4[] IS NULL', 'datatype_mismatch: cannot cast type integer to integer[]'],
    ['b::date IS NULL', 'datatype_mismatch: cannot cast type boolean to date'],
    ['i4::numeric(2000) > 0', 'datatype_mismatch: NUMERIC precision 2000 must be between 1 and 1000'],
    ["t::varchar(0) = ''", 'datatype_mismatch: length for type varchar must be at least 1'],
    // Constants and parameters Postgres would refuse.
    ["'abc'::int4 = 1", 'invalid_value: invalid input syntax for type integer: "abc"'],
    ['i4 = $2', 'invalid_value: $2: invalid input syntax for type integer: "abc"'],
    ["i4 IN (1, 'a')", 'invalid_value: invalid input syntax for type integer: "a"'],
    ["ai = '{1,2'", 'invalid_value: malformed array literal: "{1,2" (Unexpected end of input.)'],
    ["mood = 'angry'", 'invalid_value: invalid input value for enum mood: "angry"'],
    ["u = 'xyz'", 'invalid_value: invalid input syntax for type uuid: "xyz"'],
    ["d = '2024-13-01'", 'invalid_value: date/time field value out of range: "2024-13-01"'],
    ["'1e400'::float8 > 0", 'invalid_value: "1e400" is out of range for type double precision'],
    ["i8 = '9223372036854775808'", 'invalid_value: value "9223372036854775808" is out of range for type bigint'],
    // Errors Postgres raises while planning (constant folding), in its order.
    ['1/0 = 1', 'invalid_value: division by zero'],
    ['i4 > 1/0', 'invalid_value: division by zero'],
    ['NULL + 1/0 > 1', 'invalid_value: division by zero'],
    ['i4 = 2147483647 + 1', 'invalid_value: integer out of range'],
    ['(100000000000000000000)::int8 > 0', 'invalid_value: bigint out of range'],
  ])('%j', (where, expected) => {
    expect(refusal(where, PARAMS)).toBe(expected)
  })

  it.each([
    // ...but not where Postgres's planner would have skipped the failing constant.
    'false AND 1/0 = 1',
    'true OR 1/0 = 1',
    'coalesce(1, 1/0) = 1',
    // Column-dependent errors are row errors, not clause errors.
    'i4 / 0 > 1',
  ])('%j is accepted', (where) => {
    expect(refusal(where)).toBe('accepted')
  })

  it.each([
    ["jb < jb", 'unsupported: operator is not supported in where clauses: jsonb < jsonb'],
    ["jb @> '{}'", 'unsupported: operator is not supported in where clauses: jsonb @> unknown'],
    ['d + 1 > d', 'unsupported: operator is not supported in where clauses: date + integer'],
    ["ts - ts > '1 day'", 'unsupported: operator is not supported in where clauses: timestamp without time zone - timestamp without time zone'],
    ["t || 'a' = 'b'", 'unsupported: operator || is not supported in where clauses'],
    ["t ~ 'a'", 'unsupported: operator ~ is not supported in where clauses'],
    ["t SIMILAR TO 'a'", 'unsupported: SIMILAR TO is not supported in where clauses'],
    ['nullif(i4, 1) = 1', 'unsupported: NULLIF is not supported in where clauses'],
    ['foo(t) = 1', 'unsupported: function foo is not supported in where clauses'],
    ["x'1f' = 1", 'unsupported: bit string constants are not supported in where clauses'],
    ["ts > 'now'", "unsupported: 'now' depends on the current time, which a where clause may not"],
    [
      "ts > '2024-01-01 12:00 America/New_York'",
      'unsupported: unsupported timestamp without time zone literal "2024-01-01 12:00 America/New_York": use ISO 8601, e.g. 2024-01-31 13:45:00.123456+00',
    ],
    ["t::date > '2020-01-01'", 'unsupported: casting text computed from columns to date is not supported in where clauses (only constants can be cast to date/time types)'],
    ['t COLLATE "en_US" = \'a\'', 'unsupported: collation "en_US" is not supported in where clauses (only "C")'],
    ["'1 day'::interval(2) > iv", 'unsupported: interval field restrictions and precision are not supported in where clauses'],
    ['i4::public.foo > 0', 'unsupported: schema-qualified type names are not supported: public.foo'],
    ['i4::"char" > \'a\'', 'unsupported: type "char" is not supported in where clauses'],
    [
      "inet = '1.2.3.4'",
      'unsupported: column "inet" has type inet, which where clauses support only in IS [NOT] NULL and casts to text (here: operator =)',
    ],
  ])('%j is outside the allow-list', (where, expected) => {
    expect(refusal(where)).toBe(expected)
  })

  it.each([
    'j IS NULL',
    "j::jsonb = '{}'",
    'inet IS NULL',
    "inet::text = '1.2.3.4'",
    "t COLLATE \"C\" = 'a'",
    'ARRAY[]::int4[] = ai',
    "'1' = '1'",
    'NULL = NULL',
    "'t'",
    'NULL',
    '"Mixed Case" IS NULL',
  ])('%j is accepted', (where) => {
    expect(refusal(where)).toBe('accepted')
  })

  it('blames the params field for a bad parameter value', () => {
    let error: WhereClauseError | undefined
    try {
      compileWhereSync('i4 = $1', { columns: COLUMNS, params: ['x'] })
    } catch (e) {
      error = e as WhereClauseError
    }
    expect(error?.field).toBe('params')
    expect(error?.toBody()).toEqual({
      message: 'Invalid request',
      errors: { params: ['$1: invalid input syntax for type integer: "x"'] },
    })
  })
})

describe('parameters are typed by their context, like quoted literals', () => {
  it.each([
    ['i4 = $1', ['007'], { i4: '7' }, true],
    ['i8 > $1', ['9223372036854775806'], { i8: '9223372036854775807' }, true],
    ['n = $1', ['1.500'], { n: '1.5' }, true],
    ['t = $1', ['a b'], { t: 'a b' }, true],
    ['d < $1', ['2024-01-02'], { d: '2024-01-01' }, true],
    ['mood > $1', ['sad'], { mood: 'ok' }, true],
    ['ai @> $1', ['{1}'], { ai: '{1,2}' }, true],
    ['b = $1', ['yes'], { b: 't' }, true],
    // Unknown everywhere: resolved as text.
    ['$1 = $2', ['a', 'a'], {}, true],
    ['$1 < $2', ['B', 'a'], {}, true],
  ] as const)('%s with %j', (where, params, row, expected) => {
    expect(compileWhereSync(where, { columns: COLUMNS, params }).evaluate(row)).toBe(expected)
  })

  // Postgres types a `$n` once, at its first use, and casts it at the others.
  it.each([
    ['f4 = $1 AND f8 = $1', ['0.1'], 'parameter $1 is used as real and as double precision'],
    ['bc = $1 OR t = $1', ['a '], 'parameter $1 is used as character and as text'],
    ['d = $1 OR ts = $1', ['2024-01-01 12:00'], 'parameter $1 is used as date'],
    ['$1 IS NOT NULL', ['x'], 'could not determine data type of parameter $1'],
  ] as const)('%s with %j is refused: %s', (where, params, message) => {
    let error: unknown
    try {
      compileWhereSync(where, { columns: COLUMNS, params })
    } catch (e) {
      error = e
    }
    expect(error).toBeInstanceOf(WhereClauseError)
    expect((error as WhereClauseError).message).toContain(message)
    expect((error as WhereClauseError).toBody()).toHaveProperty('errors.params')
  })

  it.each([
    ['t = $1 OR vc = $1', ['a'], { t: 'b', vc: 'a' }, true],
    ['i4 = $1 OR i8 = $1', ['7'], { i4: '1', i8: '7' }, true],
    ['f8 = $1::float8 AND f4::float8 = $1::float8', ['0.5'], { f8: '0.5', f4: '0.5' }, true],
  ] as const)('%s with %j: one $n in types that read it alike is accepted', (where, params, row, expected) => {
    expect(compileWhereSync(where, { columns: COLUMNS, params }).evaluate(row)).toBe(expected)
  })

  it('keeps $n in the canonical text and never splices the value into SQL', () => {
    const clause = compileWhereSync('t = $1', { columns: COLUMNS, params: ["x'; DROP TABLE t; --"] })
    expect(clause.canonical).toBe('("t" = $1)')
    expect(clause.params).toEqual(["x'; DROP TABLE t; --"])
    expect(clause.evaluate({ t: "x'; DROP TABLE t; --" })).toBe(true)
  })
})

describe('columns of types the evaluator does not interpret', () => {
  const columns = [
    { name: 'addr', type: 'inet' },
    { name: 'boxes', type: '_box' },
  ]
  it.each([
    ["addr::text = '10.0.0.1/8'", { addr: '10.0.0.1/8' }, true],
    ['addr IS NULL', { addr: null }, true],
    ["boxes::text = '{(1,1),(0,0);(2,2),(1,1)}'", { boxes: '{(1,1),(0,0);(2,2),(1,1)}' }, true],
    ['boxes IS NOT NULL', { boxes: '{}' }, true],
  ] as const)('%s', (where, row, expected) => {
    expect(compileWhereSync(where, { columns }).evaluate(row)).toBe(expected)
  })
  it('refuses anything else on them, naming the column and its type', () => {
    expect(() => compileWhereSync("boxes = '{}'", { columns })).toThrow(
      'column "boxes" has type box[], which where clauses support only in IS [NOT] NULL and casts to text (here: operator =)',
    )
  })
})
