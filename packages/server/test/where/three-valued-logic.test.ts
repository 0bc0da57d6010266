import { beforeAll, describe, expect, it } from 'vitest'
import { loadWhereParser } from '../../src/where/index.js'
import { evaluate } from './helpers.js'

beforeAll(async () => {
  await loadWhereParser()
})

/** Truth values as SQL literals, and the row that yields them through the bool column. */
const VALUES = [
  ['TRUE', true],
  ['FALSE', false],
  ['NULL::bool', null],
] as const

describe('three-valued logic', () => {
  const table: [string, boolean | null][] = []
  for (const [a, va] of VALUES) {
    table.push([`NOT ${a}`, va === null ? null : !va])
    for (const [b, vb] of VALUES) {
      const and = va === false || vb === false ? false : va === null || vb === null ? null : true
      const or = va === true || vb === true ? true : va === null || vb === null ? null : false
      table.push([`${a} AND ${b}`, and], [`${a} OR ${b}`, or])
    }
  }
  it.each(table)('%s is %s (constant-folded)', (where, expected) => {
    expect(evaluate(where, {})).toBe(expected)
  })

  it.each(table.map(([where, expected]) => [where.replaceAll('TRUE', 'b').replace('FALSE', '(NOT b)'), expected] as const))(
    '%s is %s (evaluated per row)',
    (where, expected) => {
      // b is TRUE in this row, so NOT b is FALSE.
      expect(evaluate(where, { b: 't' })).toBe(expected)
    },
  )

  it.each([
    ['b IS TRUE', { b: null }, false],
    ['b IS NOT TRUE', { b: null }, true],
    ['b IS FALSE', { b: 'f' }, true],
    ['b IS NOT FALSE', { b: null }, true],
    ['b IS UNKNOWN', { b: null }, true],
    ['b IS NOT UNKNOWN', { b: 'true' }, true],
    ['i4 IS NULL', { i4: null }, true],
    ['i4 IS NOT NULL', { i4: '0' }, true],
    ['i4 = NULL', { i4: null }, null],
    ['i4 <> 1', { i4: null }, null],
    ['i4 IS DISTINCT FROM NULL', { i4: null }, false],
    ['i4 IS DISTINCT FROM 1', { i4: null }, true],
    ['i4 IS NOT DISTINCT FROM NULL', { i4: null }, true],
    ['i4 IS NOT DISTINCT FROM 1', { i4: '1' }, true],
    ['n IS DISTINCT FROM 1.0', { n: '1' }, false],
    ['f8 IS DISTINCT FROM \'NaN\'', { f8: 'NaN' }, false],
    // IN and NOT IN with NULLs.
    ['i4 IN (1, 2)', { i4: '3' }, false],
    ['i4 IN (1, NULL)', { i4: '1' }, true],
    ['i4 IN (1, NULL)', { i4: '3' }, null],
    ['i4 NOT IN (1, NULL)', { i4: '3' }, null],
    ['i4 NOT IN (1, NULL)', { i4: '1' }, false],
    ['i4 NOT IN (1, 2)', { i4: null }, null],
    ['i4 IN (i2, 5)', { i4: '5', i2: null }, true],
    ['i4 IN (i2, 5)', { i4: '4', i2: null }, null],
    // BETWEEN is two comparisons.
    ['i4 BETWEEN 1 AND NULL', { i4: '0' }, false],
    ['i4 BETWEEN 1 AND NULL', { i4: '2' }, null],
    ['i4 NOT BETWEEN 1 AND NULL', { i4: '0' }, true],
    ['i4 BETWEEN 5 AND 1', { i4: '3' }, false],
    ['i4 BETWEEN SYMMETRIC 5 AND 1', { i4: '3' }, true],
    ['i4 NOT BETWEEN SYMMETRIC 5 AND 1', { i4: '7' }, true],
    // ANY / ALL over arrays with NULLs and empty arrays.
    ['1 = ANY (ai)', { ai: '{1,NULL}' }, true],
    ['3 = ANY (ai)', { ai: '{1,NULL}' }, null],
    ['3 = ANY (ai)', { ai: '{}' }, false],
    ['i4 = ANY (ai)', { i4: null, ai: '{}' }, false],
    ['i4 = ANY (ai)', { i4: null, ai: '{1}' }, null],
    ['3 = ANY (ai)', { ai: null }, null],
    ['3 <> ALL (ai)', { ai: '{1,2}' }, true],
    ['3 <> ALL (ai)', { ai: '{1,NULL}' }, null],
    ['1 <> ALL (ai)', { ai: '{1,NULL}' }, false],
    ['3 <> ALL (ai)', { ai: '{}' }, true],
    // COALESCE stops at the first non-NULL.
    ['coalesce(i4, i2, 7) = 7', { i4: null, i2: null }, true],
    ['coalesce(i4, i2) IS NULL', { i4: null, i2: null }, true],
  ] as const)('%s on %j is %s', (where, row, expected) => {
    expect(evaluate(where, row)).toBe(expected)
  })

  it('long IN lists (hashed) give the same three-valued answers as short ones', () => {
    const values = Array.from({ length: 50 }, (_, i) => String(i * 3))
    const list = values.join(', ')
    for (const [x, withNull] of [
      ['3', false],
      ['4', false],
      ['4', true],
      ['3', true],
      [null, false],
    ] as const) {
      const items = withNull ? `${list}, NULL` : list
      const row = { i4: x }
      const short = (where: string) => evaluate(where.replace(list, withNull ? '3, 6, NULL' : '3, 6'), row)
      expect(evaluate(`i4 IN (${items})`, row)).toBe(short(`i4 IN (${items})`))
      expect(evaluate(`i4 NOT IN (${items})`, row)).toBe(short(`i4 NOT IN (${items})`))
    }
    expect(evaluate(`f8 IN (${list}, 'NaN')`, { f8: 'NaN' })).toBe(true)
    expect(evaluate(`bc IN (${values.map((v) => `'${v}'`).join(', ')})`, { bc: '42  ' })).toBe(true)
  })

  it('AND stops at the first FALSE and OR at the first TRUE, left to right, as Postgres evaluates', () => {
    expect(evaluate('i4 <> 0 AND 10 / i4 > 1', { i4: '0' })).toBe(false)
    expect(evaluate('i4 = 0 OR 10 / i4 > 1', { i4: '0' })).toBe(true)
    expect(evaluate('10 / i4 > 1 AND i4 <> 0', { i4: '0' })).toBe('error: division_by_zero')
    // Both arguments of an operator are evaluated before the NULL check, as in Postgres.
    expect(evaluate('i2 + 10 / i4 > 1', { i2: null, i4: '0' })).toBe('error: division_by_zero')
  })
})
