import { useTempDir, usePostgres } from '@sluice/test-utils'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { Pipeline } from '../../src/pipeline.js'
import { caughtUp, startPipeline } from '../pipeline/harness.js'
import { type TestServer, call, messages, shapeUrl, startServer } from './http-harness.js'
import { TagTracker, type WireMessage } from './subqueries-tracker.js'

/**
 * Outer-table changes of subquery shapes reach them through the router's view
 * index (shapes/view-index.ts): a shape is a candidate for a row only when the
 * row's left value is in its view, or when it cannot be narrowed (NOT IN, a
 * disjunct without a positive subquery). After every step, each client's rows
 * equal Postgres's answer, and the candidates the router names for probe rows
 * are exactly those the views imply.
 */

const cluster = usePostgres()
const dirs = useTempDir('subquery-routing')
let pipeline: Pipeline
let server: TestServer

beforeAll(async () => {
  pipeline = await startPipeline(cluster, await dirs.make('store'))
  server = await startServer(pipeline, { longPollTimeoutMs: 5_000 })
}, 120_000)

afterAll(async () => {
  await server?.close()
  await pipeline?.stop()
})

type Row = Record<string, unknown>

class Client {
  readonly tracker = new TagTracker()
  handle = ''
  offset = '-1'
  constructor(readonly where: string) {}

  async sync(): Promise<void> {
    for (let i = 0; i < 50; i++) {
      const params: Record<string, string> = { table: 'rt_todos', where: this.where, offset: this.offset }
      if (this.handle !== '') params['handle'] = this.handle
      const res = await call(server.port, shapeUrl(params))
      const got = messages(res) as WireMessage[]
      this.tracker.apply(got)
      if (res.status === 409) {
        this.handle = ''
        this.offset = '-1'
        continue
      }
      expect(res.status, res.text).toBe(200)
      this.handle = res.header('electric-handle')!
      this.offset = res.header('electric-offset')!
      if (res.header('electric-up-to-date') !== undefined) return
    }
    throw new Error('never up-to-date')
  }

  /** Reads on until the rows equal Postgres's (a move-in's rows follow its query); fails after 10 s. */
  async converge(): Promise<void> {
    const until = Date.now() + 10_000
    for (;;) {
      await this.sync()
      const { rows } = await cluster.query<Row>(`SELECT * FROM rt_todos WHERE ${this.where}`)
      const expected = new Map(rows.map((r) => [`"public"."rt_todos"/"${String(r['id'])}"`, text(r)]))
      const got = new Map(this.tracker.values())
      const same = JSON.stringify([...got].sort()) === JSON.stringify([...expected].sort())
      if (same) return
      if (Date.now() > until) expect(new Map([...got].sort())).toEqual(new Map([...expected].sort()))
      await new Promise((r) => setTimeout(r, 100))
    }
  }
}

function text(row: Row): Row {
  return Object.fromEntries(Object.entries(row).map(([k, v]) => [k, v === null ? null : String(v)]))
}

const CLAUSES = {
  user1: 'list_id IN (SELECT list_id FROM rt_members WHERE user_id = 1)',
  user2: 'list_id IN (SELECT list_id FROM rt_members WHERE user_id = 2)',
  notIn: 'list_id NOT IN (SELECT list_id FROM rt_members WHERE user_id = 1)',
  rowForm: '(a, b) IN (SELECT x, y FROM rt_pairs)',
  orPredicate: "list_id IN (SELECT list_id FROM rt_members WHERE user_id = 2) OR owner = 'x'",
  orSubqueries: 'list_id IN (SELECT list_id FROM rt_members WHERE user_id = 1) OR a IN (SELECT x FROM rt_pairs)',
  nested: 'list_id IN (SELECT id FROM rt_lists WHERE team IN (SELECT team FROM rt_admins))',
} as const
type Name = keyof typeof CLAUSES

const LISTS = ['10', '11', '12', '13', null]
const PAIRS: [string | null, string | null][] = [
  ['1', '1'],
  ['2', null],
  ['3', '4'],
  ['5', '5'],
  [null, '1'],
]

describe('routing outer-table changes of subquery shapes by their views', () => {
  it('names as candidates exactly the shapes whose views hold the row, and every client stays equal to Postgres', async () => {
    await cluster.query(`
      CREATE TABLE rt_members (id serial PRIMARY KEY, user_id int NOT NULL, list_id int);
      CREATE TABLE rt_pairs (id serial PRIMARY KEY, x int, y int);
      CREATE TABLE rt_todos (id serial PRIMARY KEY, list_id int, owner text NOT NULL, a int, b int);
      CREATE TABLE rt_lists (id int PRIMARY KEY, team int);
      CREATE TABLE rt_admins (id serial PRIMARY KEY, team int);
      INSERT INTO rt_lists (id, team) VALUES (10, 1), (11, 2), (12, 2), (13, 3);
      INSERT INTO rt_admins (team) VALUES (1);
      INSERT INTO rt_members (user_id, list_id) VALUES (1, 10), (1, 11), (2, 11), (2, 12), (1, NULL);
      INSERT INTO rt_pairs (x, y) VALUES (1, 1), (2, NULL);
      INSERT INTO rt_todos (list_id, owner, a, b) VALUES
        (10, 'y', 1, 1), (11, 'y', 2, 2), (12, 'x', NULL, 1), (13, 'y', 1, NULL), (NULL, 'x', 3, 4), (12, 'y', 2, NULL);
    `)
    const clients = Object.fromEntries(Object.entries(CLAUSES).map(([name, where]) => [name, new Client(where)])) as Record<Name, Client>
    const oid = Number((await cluster.query<{ oid: string }>(`SELECT 'rt_todos'::regclass::oid AS oid`)).rows[0]!.oid)

    const check = async (): Promise<void> => {
      await caughtUp(pipeline, cluster)
      for (const client of Object.values(clients)) await client.converge()
      const lists = async (user: number): Promise<Set<string>> =>
        new Set((await cluster.query<{ l: string }>('SELECT list_id::text AS l FROM rt_members WHERE user_id = $1 AND list_id IS NOT NULL', [user])).rows.map((r) => r.l))
      const lists1 = await lists(1)
      const lists2 = await lists(2)
      const pairs = (await cluster.query<{ x: string | null; y: string | null }>('SELECT x::text, y::text FROM rt_pairs')).rows
      const adminLists = new Set(
        (await cluster.query<{ l: string }>('SELECT id::text AS l FROM rt_lists WHERE team IN (SELECT team FROM rt_admins)')).rows.map((r) => r.l),
      )
      const handles = Object.fromEntries(Object.entries(clients).map(([name, c]) => [c.handle, name as Name]))
      const expected = (list: string | null, a: string | null, b: string | null): Name[] => {
        const names: Name[] = ['notIn', 'orPredicate']
        if (list !== null && lists1.has(list)) names.push('user1', 'orSubqueries')
        if (list !== null && lists2.has(list)) names.push('user2')
        if (a !== null && b !== null && pairs.some((p) => p.x === a && p.y === b)) names.push('rowForm')
        if (a !== null && pairs.some((p) => p.x === a) && !names.includes('orSubqueries')) names.push('orSubqueries')
        if (list !== null && adminLists.has(list)) names.push('nested')
        return names.sort()
      }
      const actual = (list: string | null, a: string | null, b: string | null): Name[] =>
        pipeline.router
          .candidatesFor(oid, { id: '999', list_id: list, owner: 'y', a, b })
          .map((h) => handles[h])
          .filter((n): n is Name => n !== undefined)
          .sort()
      // A shape is broad while its last move-in is spliced in: wait for it to narrow again.
      const until = Date.now() + 10_000
      for (;;) {
        const probes = LISTS.flatMap((list) => PAIRS.map(([a, b]) => ({ list, a, b, want: expected(list, a, b), got: actual(list, a, b) })))
        const wrong = probes.filter((p) => JSON.stringify(p.want) !== JSON.stringify(p.got))
        if (wrong.length === 0) return
        if (Date.now() > until) expect(wrong).toEqual([])
        await new Promise((r) => setTimeout(r, 100))
      }
    }

    await check()
    // A value enters user 1's view (move-in; for NOT IN a move-out), and a pair with a NULL.
    await cluster.query('INSERT INTO rt_members (user_id, list_id) VALUES (1, 12), (2, NULL)')
    await check()
    // A value leaves (move-out), one stays though a row carrying it goes.
    await cluster.query('DELETE FROM rt_members WHERE user_id = 1 AND list_id = 10')
    await cluster.query('DELETE FROM rt_members WHERE user_id = 2 AND list_id = 11')
    await check()
    // Outer rows move across views, into NULL, and into the row form's pairs.
    await cluster.query(`UPDATE rt_todos SET list_id = 12 WHERE list_id = 10`)
    await cluster.query(`UPDATE rt_todos SET list_id = NULL WHERE list_id = 11`)
    await cluster.query(`UPDATE rt_todos SET a = 1, b = 1 WHERE list_id = 13`)
    await check()
    // A pair enters with outer rows already carrying it, in one transaction with outer writes.
    await cluster.query(`BEGIN; INSERT INTO rt_pairs (x, y) VALUES (3, 4), (5, 5); INSERT INTO rt_todos (list_id, owner, a, b) VALUES (11, 'y', 5, 5), (12, 'y', 3, 4); COMMIT`)
    await check()
    // The value a view holds twice leaves once (still in), then for good.
    await cluster.query('INSERT INTO rt_members (user_id, list_id) VALUES (2, 12)')
    await cluster.query('DELETE FROM rt_members WHERE id = (SELECT min(id) FROM rt_members WHERE user_id = 2 AND list_id = 12)')
    await check()
    await cluster.query('DELETE FROM rt_members WHERE user_id = 2 AND list_id = 12')
    await cluster.query(`UPDATE rt_todos SET owner = 'x', list_id = 11 WHERE list_id = 12`)
    await check()
    // A nested subquery's set moves: its lists enter and leave the outer view through the inner one.
    await cluster.query('INSERT INTO rt_admins (team) VALUES (2)')
    await check()
    await cluster.query('DELETE FROM rt_admins WHERE team = 1')
    await cluster.query('UPDATE rt_lists SET team = 3 WHERE id = 12')
    await check()
  }, 180_000)
})
