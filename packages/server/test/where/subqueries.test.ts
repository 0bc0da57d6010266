import { describe, expect, it } from 'vitest'
import { type WhereColumn, WhereClauseError, compileWhere } from '../../src/where/index.js'
import { SubqueryView, withViews } from '../../src/where/subquery-view.js'
import { INT4, TEXT } from '../../src/where/sql-type.js'

const TABLES: Record<string, readonly WhereColumn[]> = {
  'public.posts': [
    { name: 'id', type: 'int4' },
    { name: 'user_id', type: 'int4' },
    { name: 'team_id', type: 'int4' },
    { name: 'pinned', type: 'bool' },
    { name: 'big', type: 'int8' },
    { name: 'tags', type: 'text', dims: 1 },
  ],
  'public.users': [
    { name: 'id', type: 'int4' },
    { name: 'active', type: 'bool' },
    { name: 'team_id', type: 'int4' },
    { name: 'name', type: 'text' },
    { name: 'tags', type: 'text', dims: 1 },
  ],
  'public.members': [
    { name: 'user_id', type: 'int4' },
    { name: 'team_id', type: 'int4' },
  ],
}

function compile(where: string, params: string[] = []) {
  return compileWhere(where, {
    columns: TABLES['public.posts']!,
    params,
    tables: async (schema, name) => TABLES[`${schema}.${name}`],
  })
}

async function refusal(where: string): Promise<WhereClauseError> {
  const error = await compile(where).then(
    () => undefined,
    (e: unknown) => e,
  )
  expect(error).toBeInstanceOf(WhereClauseError)
  return error as WhereClauseError
}

describe('where clauses with subqueries', () => {
  it('compiles col IN (SELECT …) with a canonical text that is valid SQL and a one-position plan', async () => {
    const clause = await compile('user_id in (select id from users where active = true)')
    expect(clause.canonical).toBe('("user_id" IN (SELECT "id" FROM "public"."users" WHERE ("active" = TRUE)))')
    const plan = clause.subqueries!
    expect(plan.dependencies).toHaveLength(1)
    expect(plan.dependencies[0]).toMatchObject({ schema: 'public', table: 'users', select: ['id'], negated: false })
    expect(plan.dependencies[0]!.where!.matches({ id: '1', active: 't', team_id: null, name: null })).toBe(true)
    expect(plan.disjuncts).toEqual([[0]])
    expect(plan.positions[0]).toMatchObject({ dep: 0, left: ['user_id'], negated: false })
  })

  it('evaluates membership against the view carried by the row, with three-valued IN', async () => {
    const clause = await compile('user_id IN (SELECT id FROM users)')
    const view = new SubqueryView([INT4])
    const row = (user: string | null) => withViews({ id: '1', user_id: user, team_id: null, pinned: null, big: null }, [view])
    expect(clause.matches(row('1'))).toBe(false)
    expect(view.add(view.parse(['1']))).toBe(true)
    expect(view.add(view.parse(['1']))).toBe(false)
    expect(clause.matches(row('1'))).toBe(true)
    expect(clause.evaluate(row(null))).toBe(null)
    expect(clause.evaluate(row('2'))).toBe(false)
    view.add([null])
    expect(clause.evaluate(row('2'))).toBe(null)
    expect(view.remove(view.parse(['1']))).toBe(false)
    expect(view.remove(view.parse(['1']))).toBe(true)
  })

  it('numbers DNF positions across OR, AND and NOT as the headers need', async () => {
    const or = await compile('user_id IN (SELECT id FROM users) OR pinned = true')
    expect(or.subqueries!.disjuncts).toEqual([[0], [1]])
    const mixed = await compile('(user_id IN (SELECT id FROM users) OR team_id IN (SELECT team_id FROM members)) AND id = 1')
    expect(mixed.subqueries!.disjuncts).toEqual([
      [0, 1],
      [2, 3],
    ])
    expect(mixed.subqueries!.positions.map((p) => p.dep)).toEqual([0, undefined, 1, undefined])
    const not = await compile('NOT (user_id IN (SELECT id FROM users) OR id = 1)')
    expect(not.subqueries!.disjuncts).toEqual([[0, 1]])
    expect(not.subqueries!.positions.map((p) => p.negated)).toEqual([true, true])
    expect(not.subqueries!.dependencies[0]!.negated).toBe(true)
    const notIn = await compile('user_id NOT IN (SELECT id FROM users)')
    expect(notIn.subqueries!.positions[0]!.negated).toBe(true)
  })

  it('accepts row forms, params inside, nesting, and deduplicates identical subqueries', async () => {
    const row = await compile('(user_id, team_id) IN (SELECT user_id, team_id FROM members WHERE team_id > $1)', ['3'])
    expect(row.canonical).toBe('(("user_id", "team_id") IN (SELECT "user_id", "team_id" FROM "public"."members" WHERE ("team_id" > $1)))')
    expect(row.subqueries!.positions[0]!.left).toEqual(['user_id', 'team_id'])
    const nested = await compile('user_id IN (SELECT id FROM users WHERE team_id IN (SELECT team_id FROM members WHERE user_id = $1))', ['7'])
    const inner = nested.subqueries!.dependencies[0]!.where!
    expect(inner.subqueries!.dependencies[0]).toMatchObject({ table: 'members', select: ['team_id'] })
    const twice = await compile('user_id IN (SELECT id FROM users) AND id IN (SELECT id FROM users)')
    expect(twice.subqueries!.dependencies).toHaveLength(1)
    expect(twice.subqueries!.positions.map((p) => p.left)).toEqual([['user_id'], ['id']])
  })

  it('refuses what is not supported with a 400 naming the construct', async () => {
    expect((await refusal('user_id = ANY (SELECT id FROM users)')).message).toMatch(/only `value IN \(SELECT \.\.\.\)` sublinks/)
    expect((await refusal('EXISTS (SELECT id FROM users)')).message).toMatch(/only `value IN/)
    expect((await refusal('user_id + 1 IN (SELECT id FROM users)')).message).toMatch(/left side of `IN \(SELECT \.\.\.\)` can only be a column reference/)
    expect((await refusal('user_id IN (SELECT id + 1 FROM users)')).message).toMatch(/Expected a plain column reference/)
    expect((await refusal('user_id IN (SELECT * FROM users)')).message).toMatch(/Expected a plain column reference/)
    expect((await refusal('user_id IN (SELECT id FROM users ORDER BY id)')).message).toBe('SELECT statement must not contain any clauses')
    expect((await refusal('user_id IN (SELECT DISTINCT id FROM users)')).message).toBe('SELECT statement must not contain any clauses')
    expect((await refusal('user_id IN (SELECT users.id FROM users, members)')).message).toMatch(/plain column reference|single table/)
    expect((await refusal('user_id IN (SELECT id FROM users JOIN members USING (team_id))')).message).toBe('Expected a single table reference')
    expect((await refusal('big IN (SELECT id FROM users)')).message).toMatch(/has type bigint but subquery returns integer/)
    const unknown = await refusal('user_id IN (SELECT id FROM nope)')
    expect(unknown.field).toBe('table')
    expect(unknown.message).toMatch(/Table "public"."nope" does not exist/)
    expect((await refusal('user_id IN (SELECT nope FROM users)')).message).toMatch(/column "nope" does not exist/)
    expect((await refusal('user_id IN (SELECT id FROM users WHERE now() > now())')).message).toMatch(/not supported/)
    expect((await refusal('user_id IN (SELECT id FROM users) OR NOT user_id IN (SELECT id FROM users)')).message).toBe(
      'a subquery dependency cannot be used with both positive and negative polarity in the same filter',
    )
    // Inside another expression a subquery has no position of its own, and no move would be sent for it.
    for (const nested of ['(user_id IN (SELECT id FROM users)) IS NOT TRUE', '(user_id IN (SELECT id FROM users)) = false', 'COALESCE(user_id IN (SELECT id FROM users), false) = false']) {
      expect((await refusal(nested)).message, nested).toMatch(/a subquery can only be a condition of its own/)
    }
    expect((await refusal('tags IN (SELECT tags FROM users)')).message).toMatch(/a subquery cannot select array column "tags"/)
    const wide = Array.from({ length: 7 }, (_, i) => `(id = ${i} OR id = ${i + 10})`).join(' AND ')
    expect((await refusal(`user_id IN (SELECT id FROM users) AND ${wide}`)).message).toMatch(/too complex for DNF/)
  })

  it('refuses a subquery where no inner table can be looked up', async () => {
    const error = await compileWhere('user_id IN (SELECT id FROM users)', { columns: TABLES['public.posts']! }).catch((e: unknown) => e)
    expect(error).toBeInstanceOf(WhereClauseError)
    expect((error as Error).message).toMatch(/subqueries are not supported/)
  })

  it('keys view tuples by equality, not spelling', () => {
    const view = new SubqueryView([TEXT, INT4])
    view.add(view.parse(['a', '1']))
    expect(view.has(view.parse(['a', '01']))).toBe(true)
    expect(view.test(view.parse(['a', null]))).toBe(null)
    expect(view.test(view.parse(['b', null]))).toBe(false)
  })
})
