import { beforeAll, describe, expect, it } from 'vitest'
import { DEFAULT_WHERE_LIMITS } from '../../src/where/index.js'
import { forgetParsedClauses, loadWhereParser, parseWhereClause, parsedClausesKept } from '../../src/where/parse-clause.js'

beforeAll(async () => {
  await loadWhereParser()
})

describe('parsed where clauses kept', () => {
  it('answers a repeated clause with the tree kept, and parses afresh once the trees are forgotten', () => {
    const first = parseWhereClause('id = 1', DEFAULT_WHERE_LIMITS)
    expect(parseWhereClause('id = 1', DEFAULT_WHERE_LIMITS)).toBe(first)
    expect(parsedClausesKept()).toBeGreaterThan(0)
    forgetParsedClauses()
    expect(parsedClausesKept()).toBe(0)
    const again = parseWhereClause('id = 1', DEFAULT_WHERE_LIMITS)
    expect(again).not.toBe(first)
    expect(again).toEqual(first)
  })
})
