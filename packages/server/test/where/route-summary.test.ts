import type { RowValues } from '@sluice/protocol'
import { beforeAll, describe, expect, it } from 'vitest'
import { decodeShapeMeta, encodeShapeMeta } from '../../src/shapes/definition/index.js'
import { EvaluationFailure, ROUTE_SUMMARY_VERSION, loadWhereParser, RestoredClause, type RouteSummary, routeSummaryOf, sameRoute } from '../../src/where/index.js'
import { COLUMNS, compile } from './helpers.js'

/** Clauses the router files under one conjunct whose hit is the verdict, with a row that matches and one that does not. */
const EXACT: ReadonlyArray<readonly [where: string, params: readonly string[], yes: RowValues, no: RowValues]> = [
  ['id = 5', [], { id: '5' }, { id: '6' }],
  ['id = $1', ['007'], { id: '7' }, { id: '70' }],
  ['i8 = 9007199254740993', [], { i8: '9007199254740993' }, { i8: '9007199254740992' }],
  ["t = 'O''Brien ✓'", [], { t: "O'Brien ✓" }, { t: "o'brien ✓" }],
  ["vc = 'a'", [], { vc: 'a' }, { vc: 'b' }],
  ["bc = 'ab'", [], { bc: 'ab  ' }, { bc: 'abc' }],
  ['n = 1.50', [], { n: '1.5' }, { n: '1.51' }],
  ["u = 'A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11'", [], { u: 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11' }, { u: 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a12' }],
  ["mood = 'ok'", [], { mood: 'ok' }, { mood: 'sad' }],
  ["iv = '1 mon'", [], { iv: '30 days' }, { iv: '31 days' }],
  ['b', [], { b: 't' }, { b: 'f' }],
  ['NOT b', [], { b: 'f' }, { b: 't' }],
  ['i4 IN (3, 1, 2)', [], { i4: '2' }, { i4: '4' }],
  ['3 = ANY (ai)', [], { ai: '{1,3}' }, { ai: '{1,2}' }],
  ["ai @> '{1,2}'", [], { ai: '{2,1,5}' }, { ai: '{1,5}' }],
  ["lower(t) = 'ab'", [], { t: 'AB' }, { t: 'ABC' }],
  ['"Mixed Case" = $1', ['x'], { 'Mixed Case': 'x' }, { 'Mixed Case': 'X' }],
]

/** A stored shape's route after the meta's round trip through its bytes, as a restart reads it. */
function storedRoute(where: string, params: readonly string[]): RouteSummary | undefined {
  const clause = compile(where, params)
  const definition = { schema: 'public', table: 'things', where: clause.canonical, params: {}, columns: undefined, replica: 'default', log: 'full' } as const
  const meta = encodeShapeMeta(definition, '123-1700000000000000', { route: routeSummaryOf(clause) })
  return decodeShapeMeta(meta).route
}

describe('route summaries (a restart files a shape without compiling its clause)', () => {
  beforeAll(loadWhereParser)

  it('record exactly the conjunct the compiler makes, through the meta', () => {
    for (const [where, params] of EXACT) {
      const compiled = compile(where, params)
      const route = storedRoute(where, params)
      expect(route, where).toBeDefined()
      expect(sameRoute(route!, compiled.exact), where).toBe(true)
    }
  })

  it('are left out for clauses that are not one indexable conjunct', () => {
    for (const where of ['i4 = 1 AND i2 = 2', 'i4 > 1', 'i4 = 1 OR i4 = 2', "t LIKE 'a%'", "i4 = ANY ('{}')"]) {
      expect(routeSummaryOf(compile(where)), where).toBeUndefined()
    }
    expect(routeSummaryOf(undefined)).toBeUndefined()
  })

  it('restore a clause that files, looks up and judges rows as the compiled one does, compiling only to judge', () => {
    for (const [where, params, yes, no] of EXACT) {
      const compiled = compile(where, params)
      const route = storedRoute(where, params)!
      // Row keys come from another shape of the same domain, as on a restart.
      const other = compile(where, params).exact!
      const restored = new RestoredClause({ source: compiled.canonical, params: compiled.params }, route, other, COLUMNS)
      expect(restored.exact.keys, where).toEqual(compiled.exact!.keys)
      expect(restored.conjuncts).toEqual([restored.exact])
      expect(restored.canonical, where).toBe(compile(compiled.canonical, params).canonical)
      for (const row of [yes, no, {}]) expect(restored.exact.rowKeys(row), where).toEqual(compiled.exact!.rowKeys(row))
      expect(restored.isCompiled, where).toBe(false)
      expect(restored.matches(yes), where).toBe(true)
      expect(restored.matches(no), where).toBe(false)
      expect(restored.evaluate(no)).toBe(compiled.evaluate(no))
      expect(restored.test(yes)).toBe(true)
      expect(restored.columns).toEqual(compiled.columns)
      expect(restored.isCompiled).toBe(true)
    }
  })

  it('are ignored when of another version or malformed, and the shape is still restored', () => {
    const base = { v: 1, handle: '123-1700000000000000', schema: 'public', table: 'things', where: '("id" = 5)', params: {}, columns: null, replica: 'default', log: 'full' }
    const bad: unknown[] = [
      [ROUTE_SUMMARY_VERSION + 1, 'equals', 'id', 'value:int:"id"', ['5']],
      [ROUTE_SUMMARY_VERSION, 'between', 'id', 'value:int:"id"', ['5']],
      [ROUTE_SUMMARY_VERSION, 'equals', 'id', 'value:int:"id"', []],
      [ROUTE_SUMMARY_VERSION, 'equals', 'id', 'value:int:"id"', [5]],
      [ROUTE_SUMMARY_VERSION, 'equals', 'id', 'value:int:"id"'],
      { kind: 'equals' },
      'equals',
    ]
    for (const route of bad) {
      const meta = decodeShapeMeta(new TextEncoder().encode(JSON.stringify({ ...base, route })))
      expect(meta.route, JSON.stringify(route)).toBeUndefined()
      expect(meta.definition.where).toBe('("id" = 5)')
    }
  })

  it('a clause that no longer compiles fails its rows instead of throwing', () => {
    const route = storedRoute('id = 5', [])!
    const restored = new RestoredClause({ source: '("id" = 5)', params: [] }, route, compile('id = 1').exact!, [{ name: 'id', type: 'point' }])
    const result = restored.test({ id: '5' })
    expect(result).toBeInstanceOf(EvaluationFailure)
    expect((result as EvaluationFailure).code).toBe('internal_error')
    expect(restored.matches({ id: '5' })).toBe(false)
  })
})
