import { beforeAll, describe, expect, it } from 'vitest'
import { isCanonicalInt } from '../../src/where/conjuncts.js'
import { loadWhereParser } from '../../src/where/index.js'
import { compile } from './helpers.js'

beforeAll(async () => {
  await loadWhereParser()
})

describe('canonical text', () => {
  it.each([
    ['i4=1', 'I4 = 1', '  i4   =   1  ', '(i4 = 1)', '((i4) = (1))', 'i4 = 1 -- comment', 'i4 /* c */ = 1'],
    ["t != 'a'", "t <> 'a'", "T<>'a'"],
    ['i4::int8 > 0', 'CAST(i4 AS bigint) > 0', 'i4::pg_catalog.int8 > 0', 'cast(i4 as int8) > 0'],
    ["n::numeric(10,2) = 1", "n::decimal(10, 2) = 1", "CAST(n AS NUMERIC(10,2)) = 1"],
    ["t = E'a''b'", "t = 'a''b'", "t = $$a'b$$"],
    ['i4 IN (1,2,3)', 'i4 in (1, 2, 3)'],
    ['NOT b', 'not b', 'NOT (b)'],
    ['a', 'A'].map(() => 'b AND i4 > 0 AND i2 < 0'),
    ["t LIKE 'a%' ESCAPE '!'", "t like 'a%' escape '!'"],
    ['"Mixed Case" IS NULL', '"Mixed Case" isnull'],
  ])('%j and its spellings print alike', (...spellings) => {
    const texts = spellings.map((s) => compile(s).canonical)
    expect(new Set(texts).size).toBe(1)
  })

  it.each([
    ['i4 = 1', '("i4" = 1)'],
    ["t = 'it''s'", `("t" = 'it''s')`],
    ['i4 = -1', '("i4" = -1)'],
    ['i4 - -1 > 0', '(("i4" - -1) > 0)'],
    ['n = 1.50', '("n" = 1.50)'],
    ['i8 = 9223372036854775807', '("i8" = 9223372036854775807)'],
    ['i4 = $1', '("i4" = $1)'],
    ["t::char = 'a'", `(CAST("t" AS bpchar(1)) = 'a')`],
    ["mood = 'ok'::mood", `("mood" = CAST('ok' AS "mood"))`],
    ['ai = ARRAY[[1,2],[3,4]]', '("ai" = ARRAY[[1, 2], [3, 4]])'],
    ['i4 BETWEEN SYMMETRIC 1 AND 2', '("i4" BETWEEN SYMMETRIC 1 AND 2)'],
    ['i4 IS NOT DISTINCT FROM NULL', '("i4" IS NOT DISTINCT FROM NULL)'],
    ['b IS NOT UNKNOWN', '("b" IS NOT UNKNOWN)'],
    ['i4 = ANY (ai)', '("i4" = ANY ("ai"))'],
    ["t ILIKE 'a' OR t NOT LIKE 'b'", `((("t" COLLATE "C") ILIKE 'a') OR ("t" NOT LIKE 'b'))`],
    ['coalesce(i4, 0) > 0', '(COALESCE("i4", 0) > 0)'],
    ['lower(t) = upper(t)', '(lower(("t" COLLATE "C")) = upper(("t" COLLATE "C")))'],
    // Text ordering and case folding are C's, as the evaluator's; equality and numbers need no collation.
    ["t < 'b' AND t = 'a' AND i4 < 3", `((("t" COLLATE "C") < 'b') AND ("t" = 'a') AND ("i4" < 3))`],
    ["t BETWEEN 'a' AND 'c'", `(("t" COLLATE "C") BETWEEN 'a' AND 'c')`],
    ["'a' < t", `(('a' COLLATE "C") < "t")`],
    ["t > ALL ('{a,b}')", `(("t" COLLATE "C") > ALL ('{a,b}'))`],
    ["t COLLATE \"C\" < 'b'", `(("t" COLLATE "C") < 'b')`],
    ["i4::text >= 'a'", `((CAST("i4" AS text) COLLATE "C") >= 'a')`],
    ["at < '{b}'", `(("at" COLLATE "C") < '{b}')`],
    // Every accepted collation prints as "C": an explicit one beside the one the canonical text adds agrees with it.
    ["t < 'x' COLLATE \"POSIX\"", `(("t" COLLATE "C") < ('x' COLLATE "C"))`],
    ["t BETWEEN 'a' AND 'c' COLLATE pg_catalog.ucs_basic", `(("t" COLLATE "C") BETWEEN 'a' AND ('c' COLLATE "C"))`],
  ])('%j prints as %j', (where, canonical) => {
    expect(compile(where, ['1']).canonical).toBe(canonical)
  })

  it('is a fixed point and keeps the meaning', () => {
    const clauses = [
      "(i4 = 1 OR t LIKE 'a\\%' ESCAPE '\\') AND NOT b",
      "mood > 'sad' AND ai @> '{1}' AND jb = '{\"a\": 1}'",
      "ts BETWEEN '2024-01-01' AND '2024-12-31' AND tz IS NOT NULL",
      "n::numeric(5,1) IN (1.5, 2) AND f8 <> 'NaN'",
      "t < 'b' OR lower(t) = 'x' OR t ILIKE 'a%' OR t COLLATE \"C\" >= 'z'",
      "at > '{a}' OR at COLLATE \"C\" <= '{z}'",
    ]
    const row = { i4: '1', t: 'a%', b: 'f', mood: 'ok', ai: '{1,2}', at: '{b}', jb: '{"a":1}', ts: '2024-06-01 00:00:00', tz: null, n: '1.45', f8: '0' }
    for (const clause of clauses) {
      const first = compile(clause)
      const second = compile(first.canonical)
      expect(second.canonical).toBe(first.canonical)
      expect(second.evaluate(row)).toBe(first.evaluate(row))
    }
  })
})

describe('indexable conjuncts, for the shape router', () => {
  const summary = (where: string, params: readonly string[] = []) =>
    compile(where, params).conjuncts.map((c) => ({ kind: c.kind, column: c.column, keys: c.keys }))

  it.each([
    ['i4 = 7', [{ kind: 'equals', column: 'i4', keys: ['7'] }]],
    ['7 = i4', [{ kind: 'equals', column: 'i4', keys: ['7'] }]],
    ["i4 = '007'", [{ kind: 'equals', column: 'i4', keys: ['7'] }]],
    ['i4 = $1', [{ kind: 'equals', column: 'i4', keys: ['7'] }], ['07']],
    ['i8 = 7', [{ kind: 'equals', column: 'i8', keys: ['7'] }]],
    ['n = 1.50', [{ kind: 'equals', column: 'n', keys: ['1.5'] }]],
    ["f8 = '-0'", [{ kind: 'equals', column: 'f8', keys: ['0'] }]],
    ["bc = 'ab  '", [{ kind: 'equals', column: 'bc', keys: ['ab'] }]],
    ["u = 'A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11'", [{ kind: 'equals', column: 'u', keys: ['a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'] }]],
    ['i4 IN (3, 1, 3, NULL)', [{ kind: 'equals', column: 'i4', keys: ['3', '1'] }]],
    ['i4 = ANY (\'{1,2}\')', [{ kind: 'equals', column: 'i4', keys: ['1', '2'] }]],
    ['3 = ANY (ai)', [{ kind: 'any', column: 'ai', keys: ['3'] }]],
    ["ai @> '{2,1,2}'", [{ kind: 'contains', column: 'ai', keys: ['2', '1'] }]],
    ["'{1}' <@ ai", [{ kind: 'contains', column: 'ai', keys: ['1'] }]],
    ["lower(t) = 'x'", [{ kind: 'equals', column: 't', keys: ['x'] }]],
    ['b', [{ kind: 'equals', column: 'b', keys: ['t'] }]],
    ['NOT b', [{ kind: 'equals', column: 'b', keys: ['f'] }]],
    // A NOT over a negatable operator is folded away, as Postgres's planner does.
    ['NOT (i4 <> 5)', [{ kind: 'equals', column: 'i4', keys: ['5'] }]],
    [
      "i4 = 1 AND t = 'a' AND i2 > 0",
      [
        { kind: 'equals', column: 'i4', keys: ['1'] },
        { kind: 'equals', column: 't', keys: ['a'] },
      ],
    ],
    ['i4 = 1 OR i4 = 2', []],
    ['i4 = i2', []],
    ['i4 = NULL', []],
    ["ai @> '{}'", []],
    ["ai @> '{1,NULL}'", []],
    ['i4 > 1', []],
    ["d = '2024-01-01'::timestamp", []],
  ] as const)('%s', (where, expected, params: readonly string[] = []) => {
    expect(summary(where, params)).toEqual(expected)
  })

  it('computes row keys in the same domain as the constants', () => {
    const [eq] = compile('n = 1.5').conjuncts
    expect(eq?.rowKeys({ n: '1.500' })).toEqual(['1.5'])
    expect(eq?.rowKeys({ n: null })).toEqual([])
    const [cross] = compile('i4 = 2.5').conjuncts
    expect(cross?.domain).not.toBe(compile('i4 = 2').conjuncts[0]?.domain)
    expect(cross?.rowKeys({ i4: '2' })).toEqual(['2'])
    expect(cross?.keys).toEqual(['2.5'])
    const [any] = compile('3 = ANY (ai)').conjuncts
    expect(any?.rowKeys({ ai: '{{1,3},{NULL,4}}' })).toEqual(['1', '3', '4'])
    const [lower] = compile("lower(t) = 'ab'").conjuncts
    expect(lower?.rowKeys({ t: 'AB' })).toEqual(['ab'])
    const [iv] = compile("iv = '1 mon'").conjuncts
    expect(iv?.rowKeys({ iv: 'P30D' })).toEqual(iv?.keys)
  })

  it("takes an integer or text column's Postgres output as its key, and parses anything else", () => {
    const [i4] = compile('i4 = 42').conjuncts
    expect(i4?.rowKeys({ i4: '42' })).toEqual(['42'])
    expect(i4?.rowKeys({ i4: '-12' })).toEqual(['-12'])
    expect(i4?.rowKeys({ i4: '007' })).toEqual(['7'])
    expect(i4?.rowKeys({ i4: '-0' })).toEqual(['0'])
    expect(i4?.rowKeys({ i4: ' 7' })).toEqual(['7'])
    expect(i4?.rowKeys({ i4: 'x' })).toEqual([])
    expect(i4?.rowKeys({ i4: '' })).toEqual([])
    expect(i4?.rowKeys({ i4: null })).toEqual([])
    const [i8] = compile('i8 = 1').conjuncts
    expect(i8?.rowKeys({ i8: '9223372036854775807' })).toEqual(['9223372036854775807'])
    expect(i8?.rowKeys({ i8: '+9223372036854775807' })).toEqual(['9223372036854775807'])
    const [t] = compile("t = 'AB'").conjuncts
    expect(t?.rowKeys({ t: ' AB ' })).toEqual([' AB '])
    expect(t?.rowKeys({ t: null })).toEqual([])
    for (const text of ['0', '7', '-7', '10', '9223372036854775807']) expect(isCanonicalInt(text), text).toBe(true)
    for (const text of ['', '-', '-0', '00', '07', '+7', ' 7', '7 ', '1e3', '1.0']) expect(isCanonicalInt(text), text).toBe(false)
  })

  it('shares a domain between shapes using the same column expression and type', () => {
    expect(compile('i4 = 1').conjuncts[0]?.domain).toBe(compile('i4 IN (5, 6)').conjuncts[0]?.domain)
    expect(compile("lower(t) = 'a'").conjuncts[0]?.domain).not.toBe(compile("t = 'a'").conjuncts[0]?.domain)
  })

  it('marks a clause that is exactly one conjunct', () => {
    expect(compile('i4 = 1').exact?.keys).toEqual(['1'])
    expect(compile('i4 = 1 AND i2 = 2').exact).toBeUndefined()
    expect(compile('i4 > 1').exact).toBeUndefined()
  })

  it('lists the referenced columns', () => {
    expect(compile('"Mixed Case" = t AND i4 > 0 AND i4 < 9').columns).toEqual(['Mixed Case', 'i4', 't'])
  })
})
