import { createHash } from 'node:crypto'
import { useTempDir, usePostgres } from '@sluice/test-utils'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { Pipeline } from '../../src/pipeline.js'
import { startPipeline } from '../pipeline/harness.js'
import { type Res, type TestServer, call, messages, shapeUrl, startServer } from './http-harness.js'
import { TagTracker, type WireMessage } from './subqueries-tracker.js'

/**
 * Subquery shapes on a real server, pipeline and Postgres (docs/protocol.md,
 * "Subquery shapes"; the scenario numbers are those of the wire reference the
 * implementation follows). Every step checks the raw wire (tags, events) and
 * that a client applying it holds exactly what Postgres's own
 * `SELECT … WHERE <clause>` returns.
 */

const cluster = usePostgres()
const dirs = useTempDir('http-subqueries')
let pipeline: Pipeline
let server: TestServer
const LONG_POLL_MS = 20_000

let storeDir = ''

beforeAll(async () => {
  storeDir = await dirs.make('store')
  pipeline = await startPipeline(cluster, storeDir)
  server = await startServer(pipeline, { longPollTimeoutMs: LONG_POLL_MS })
}, 120_000)

afterAll(async () => {
  await server?.close()
  await pipeline?.stop()
})

const get = (path: string): Promise<Res> => call(server.port, path)
const hash = (handle: string, n: string): string => createHash('md5').update(`sluice${handle}${n}`).digest('hex')

/** A shape followed as a client does: from -1 to up-to-date, then live long-polls. */
class Follower {
  readonly tracker = new TagTracker()
  handle = ''
  offset = '-1'
  constructor(
    readonly table: string,
    readonly where: string,
    readonly extra: Record<string, string> = {},
    /** The server followed: the file's own unless a test starts another. */
    readonly via: () => TestServer = () => server,
  ) {}

  private get(path: string): Promise<Res> {
    return call(this.via().port, path)
  }

  private url(live: boolean): string {
    return shapeUrl({ table: this.table, where: this.where, offset: this.offset, ...this.extra, ...(this.handle === '' ? {} : { handle: this.handle }), ...(live ? { live: 'true' } : {}) })
  }

  /** Requests until up-to-date; returns every message seen. */
  async sync(): Promise<WireMessage[]> {
    const seen: WireMessage[] = []
    for (let i = 0; i < 50; i++) {
      const res = await this.get(this.url(false))
      if (res.status === 409) {
        seen.push(...this.refetch(res))
        continue
      }
      expect(res.status, res.text).toBe(200)
      this.handle = res.header('electric-handle')!
      this.offset = res.header('electric-offset')!
      const got = messages(res) as WireMessage[]
      this.tracker.apply(got)
      seen.push(...got)
      if (res.header('electric-up-to-date') !== undefined) return seen
    }
    throw new Error('never up-to-date')
  }

  /** One live long-poll (started before `write` runs), then on to up-to-date. */
  async live(write: () => Promise<unknown>): Promise<WireMessage[]> {
    const pending = this.get(this.url(true))
    await new Promise((r) => setTimeout(r, 100))
    await write()
    const res = await pending
    if (res.status === 409) {
      const refetched = this.refetch(res)
      return [...refetched, ...(await this.sync())]
    }
    expect(res.status, res.text).toBe(200)
    this.offset = res.header('electric-offset')!
    const got = messages(res) as WireMessage[]
    this.tracker.apply(got)
    if (res.header('electric-up-to-date') !== undefined) return got
    return [...got, ...(await this.sync())]
  }

  private refetch(res: Res): WireMessage[] {
    const got = messages(res) as WireMessage[]
    this.tracker.apply(got)
    this.handle = ''
    this.offset = '-1'
    return got
  }

  /**
   * Reads on until the client's rows equal Postgres's (writes racing each other
   * may still be on their way when a first answer arrives); fails after 10 s.
   */
  async converge(key: (row: Record<string, unknown>) => string): Promise<void> {
    const until = Date.now() + 10_000
    for (;;) {
      await this.sync()
      try {
        await this.expectMatches(key)
        return
      } catch (error) {
        if (Date.now() > until) throw error
        await new Promise((r) => setTimeout(r, 200))
      }
    }
  }

  /** The client's rows equal Postgres's answer to the clause. */
  async expectMatches(key: (row: Record<string, unknown>) => string): Promise<void> {
    const params = Object.keys(this.extra)
      .filter((k) => k.startsWith('params['))
      .sort()
      .map((k) => this.extra[k])
    const { rows } = await cluster.query<Record<string, unknown>>(`SELECT ${this.extra['columns'] ?? '*'} FROM ${this.table} WHERE ${this.where}`, params)
    const expected = new Map(rows.map((r) => [key(r), stringify(r)]))
    const got = new Map([...this.tracker.values()].map(([k, v]) => [k, v]))
    expect(new Map([...got].sort())).toEqual(new Map([...expected].sort()))
  }
}

function stringify(row: Record<string, unknown>): Record<string, unknown> {
  // Postgres's text of a boolean, as the wire carries it.
  return Object.fromEntries(Object.entries(row).map(([k, v]) => [k, v === null ? null : typeof v === 'boolean' ? (v ? 't' : 'f') : String(v)]))
}

const byId = (table: string) => (row: Record<string, unknown>) => `"public"."${table}"/"${String(row['id'])}"`

async function xidOf(sql: string): Promise<number> {
  const client = await cluster.connect()
  try {
    await client.query('BEGIN')
    await client.query(sql)
    const { rows } = await client.query<{ xid: string }>('SELECT (txid_current() % 4294967296)::text AS xid')
    await client.query('COMMIT')
    return Number(rows[0]!.xid)
  } finally {
    await client.end()
  }
}

const events = (got: readonly WireMessage[]) => got.filter((m) => m.headers['event'] !== undefined)
const changes = (got: readonly WireMessage[]) => got.filter((m) => m.key !== undefined)

describe('subquery shapes', () => {
  it('1, 4: the snapshot carries tags and active_conditions; live inserts flow; an inner row leaving is one move-out event', async () => {
    await cluster.query(`
      CREATE TABLE parent (id int PRIMARY KEY, value int);
      CREATE TABLE child (id int PRIMARY KEY, parent_id int, title text);
      INSERT INTO parent VALUES (1, 1), (2, 2);
      INSERT INTO child VALUES (10, 1, 'a'), (20, 2, 'b');`)
    const shape = new Follower('child', 'parent_id IN (SELECT id FROM parent WHERE value = 1)')
    const first = await shape.sync()
    const rows = changes(first)
    expect(rows).toHaveLength(1)
    expect(rows[0]!.headers).toMatchObject({ operation: 'insert', tags: [hash(shape.handle, 'v:1')], active_conditions: [true] })
    expect(first.some((m) => m.headers['control'] === 'snapshot-end')).toBe(true)
    await shape.expectMatches(byId('child'))

    const inserted = await shape.live(() => cluster.query(`INSERT INTO child VALUES (11, 1, 'c'), (21, 2, 'd')`))
    expect(changes(inserted).map((m) => m.key)).toEqual(['"public"."child"/"11"'])
    expect(changes(inserted)[0]!.headers).toMatchObject({ tags: [hash(shape.handle, 'v:1')], active_conditions: [true] })
    await shape.expectMatches(byId('child'))

    let xid = 0
    const moved = await shape.live(async () => (xid = await xidOf('UPDATE parent SET value = 0 WHERE id = 1')))
    expect(events(moved)).toEqual([{ headers: { event: 'move-out', patterns: [{ pos: 0, value: hash(shape.handle, 'v:1') }], txids: [xid] } }])
    expect(changes(moved)).toEqual([])
    await shape.expectMatches(byId('child'))
  })

  it('2, 3: an unknown inner table and a subquery used with both polarities are 400s', async () => {
    const unknown = await get(shapeUrl({ table: 'child', offset: '-1', where: 'parent_id IN (SELECT id FROM nowhere)' }))
    expect(unknown.status).toBe(400)
    expect((unknown.json() as { errors: Record<string, string[]> }).errors['table']![0]).toMatch(/"public"."nowhere" does not exist/)
    const both = await get(shapeUrl({ table: 'child', offset: '-1', where: 'parent_id IN (SELECT id FROM parent) OR NOT parent_id IN (SELECT id FROM parent)' }))
    expect(both.status).toBe(400)
    expect(both.json()).toMatchObject({ errors: { where: ['a subquery dependency cannot be used with both positive and negative polarity in the same filter'] } })
  })

  it('6: NOT IN: a value entering the inner set is a move-out', async () => {
    await cluster.query(`
      CREATE TABLE banned (user_id int PRIMARY KEY);
      CREATE TABLE post6 (id int PRIMARY KEY, user_id int);
      INSERT INTO post6 VALUES (1, 1), (2, 2);`)
    const shape = new Follower('post6', 'user_id NOT IN (SELECT user_id FROM banned)')
    await shape.sync()
    await shape.expectMatches(byId('post6'))
    const moved = await shape.live(() => cluster.query('INSERT INTO banned VALUES (2)'))
    // The set was empty: `NULL NOT IN` it was TRUE and is NULL now, so rows with a NULL user_id go too.
    expect(events(moved)).toMatchObject([{ headers: { event: 'move-out', patterns: [{ pos: 0, value: hash(shape.handle, 'v:2') }, { pos: 0, value: hash(shape.handle, 'NULL') }] } }])
    await shape.expectMatches(byId('post6'))
  })

  it('7: inner changes that keep the value set move nothing; outer updates still flow', async () => {
    await cluster.query(`
      CREATE TABLE team7 (id int PRIMARY KEY, org int, active bool);
      CREATE TABLE doc7 (id int PRIMARY KEY, org int, body text);
      INSERT INTO team7 VALUES (1, 100, true), (2, 100, true);
      INSERT INTO doc7 VALUES (1, 100, 'x'), (2, 200, 'y');`)
    const shape = new Follower('doc7', 'org IN (SELECT org FROM team7 WHERE active)')
    await shape.sync()
    const quiet = await shape.live(async () => {
      await cluster.query('UPDATE team7 SET active = false WHERE id = 2')
      await cluster.query(`UPDATE doc7 SET body = 'z' WHERE id = 1`)
    })
    expect(events(quiet)).toEqual([])
    expect(changes(quiet)).toMatchObject([{ key: '"public"."doc7"/"1"', value: { id: '1', body: 'z' }, headers: { operation: 'update', removed_tags: [] } }])
    await shape.expectMatches(byId('doc7'))
  })

  it('9: with OR, a row in through both disjuncts keeps its row on a move-out; the event alone says so', async () => {
    await cluster.query(`
      CREATE TABLE parent9 (id int PRIMARY KEY, active bool);
      CREATE TABLE child9 (id int PRIMARY KEY, parent_id int, include_child bool);
      INSERT INTO parent9 VALUES (1, true);
      INSERT INTO child9 VALUES (1, 1, true), (2, 1, false);`)
    const shape = new Follower('child9', 'parent_id IN (SELECT id FROM parent9 WHERE active) OR include_child = true')
    const first = changes(await shape.sync())
    const h1 = hash(shape.handle, 'v:1')
    expect(first.find((m) => m.key === '"public"."child9"/"1"')!.headers).toMatchObject({ tags: [`${h1}/`, '/1'], active_conditions: [true, true] })
    const moved = await shape.live(() => cluster.query('UPDATE parent9 SET active = false'))
    expect(events(moved)).toMatchObject([{ headers: { event: 'move-out', patterns: [{ pos: 0, value: h1 }] } }])
    expect(changes(moved)).toEqual([])
    await shape.expectMatches(byId('child9'))
    expect(shape.tracker.rows.get('"public"."child9"/"1"')!.active).toEqual([false, true])
  })

  it('24, 21: a NULL left side hashes as NULL; an update changing the left side replaces its tags', async () => {
    await cluster.query(`
      CREATE TABLE parent24 (id int PRIMARY KEY);
      CREATE TABLE child24 (id int PRIMARY KEY, parent_id int, flag bool);
      INSERT INTO parent24 VALUES (1), (2);
      INSERT INTO child24 VALUES (1, NULL, true), (2, 1, false);`)
    const shape = new Follower('child24', 'parent_id IN (SELECT id FROM parent24) OR flag')
    const first = changes(await shape.sync())
    expect(first.find((m) => m.key === '"public"."child24"/"1"')!.headers).toMatchObject({ tags: [`${hash(shape.handle, 'NULL')}/`, '/1'], active_conditions: [false, true] })
    const moved = await shape.live(() => cluster.query('UPDATE child24 SET parent_id = 2 WHERE id = 2'))
    expect(changes(moved)[0]!.headers).toMatchObject({
      operation: 'update',
      tags: [`${hash(shape.handle, 'v:2')}/`, '/1'],
      removed_tags: [`${hash(shape.handle, 'v:1')}/`],
      active_conditions: [true, false],
    })
    await shape.expectMatches(byId('child24'))
  })

  it('5, 33: a value entering the inner set is a move-in event, the rows with is_move_in, and a snapshot-end', async () => {
    await cluster.query(`
      CREATE TABLE users5 (id int PRIMARY KEY, active bool);
      CREATE TABLE posts5 (id int PRIMARY KEY, user_id int, title text);
      INSERT INTO users5 VALUES (1, true), (2, false);
      INSERT INTO posts5 VALUES (10, 1, 'a'), (20, 2, 'b'), (21, 2, 'c');`)
    const shape = new Follower('posts5', 'user_id IN (SELECT id FROM users5 WHERE active)')
    await shape.sync()
    const before = shape.handle
    let xid = 0
    const got = await shape.live(async () => (xid = await xidOf('UPDATE users5 SET active = true WHERE id = 2')))
    expect(shape.handle).toBe(before)
    const h2 = hash(shape.handle, 'v:2')
    expect(got[0]).toEqual({ headers: { event: 'move-in', patterns: [{ pos: 0, value: h2 }], txids: [xid] } })
    expect(changes(got).map((m) => [m.key, m.headers])).toEqual(
      ['20', '21'].map((id) => [`"public"."posts5"/"${id}"`, { operation: 'insert', relation: ['public', 'posts5'], tags: [h2], active_conditions: [true], is_move_in: true }]),
    )
    expect(got[3]!.headers['control']).toBe('snapshot-end')
    await shape.expectMatches(byId('posts5'))
    // 35: out and in again.
    await shape.live(() => cluster.query('UPDATE users5 SET active = false WHERE id = 2'))
    await shape.expectMatches(byId('posts5'))
    const again = await shape.live(() => cluster.query('UPDATE users5 SET active = true WHERE id = 2'))
    expect(events(again).map((m) => m.headers['event'])).toEqual(['move-in'])
    await shape.expectMatches(byId('posts5'))
  })

  it('a join column of an enum in a schema outside the search_path moves in and out like any other', async () => {
    await cluster.query(`
      CREATE SCHEMA app_types;
      CREATE TYPE app_types."Kind" AS ENUM ('a', 'b', 'c');
      CREATE TABLE kinds_on (k app_types."Kind" PRIMARY KEY, active bool);
      CREATE TABLE kinded (id int PRIMARY KEY, k app_types."Kind", title text);
      INSERT INTO kinds_on VALUES ('a', true), ('b', false), ('c', false);
      INSERT INTO kinded VALUES (1, 'a', 'one'), (2, 'b', 'two'), (3, 'b', 'three'), (4, 'c', 'four');`)
    const shape = new Follower('kinded', 'k IN (SELECT k FROM kinds_on WHERE active)')
    await shape.sync()
    const before = shape.handle
    const got = await shape.live(() => cluster.query("UPDATE kinds_on SET active = true WHERE k = 'b'"))
    // The move-in query casts the values to the column's type: named with its schema, it is found.
    expect(shape.handle).toBe(before)
    expect(events(got).map((m) => m.headers['event'])).toEqual(['move-in'])
    expect(changes(got).map((m) => m.key).sort()).toEqual(['"public"."kinded"/"2"', '"public"."kinded"/"3"'])
    await shape.expectMatches(byId('kinded'))
    await shape.live(() => cluster.query("UPDATE kinds_on SET active = false WHERE k = 'a'"))
    expect(shape.handle).toBe(before)
    await shape.expectMatches(byId('kinded'))
  })

  it('6: NOT IN: a value leaving the inner set is a move-in', async () => {
    await cluster.query(`
      CREATE TABLE banned6b (user_id int PRIMARY KEY);
      CREATE TABLE post6b (id int PRIMARY KEY, user_id int);
      INSERT INTO banned6b VALUES (2);
      INSERT INTO post6b VALUES (1, 1), (2, 2);`)
    const shape = new Follower('post6b', 'user_id NOT IN (SELECT user_id FROM banned6b)')
    await shape.sync()
    const got = await shape.live(() => cluster.query('DELETE FROM banned6b'))
    // The set is empty now: `NULL NOT IN` it is TRUE, so rows with a NULL user_id held otherwise turn on too.
    expect(events(got)).toMatchObject([{ headers: { event: 'move-in', patterns: [{ pos: 0, value: hash(shape.handle, 'v:2') }, { pos: 0, value: hash(shape.handle, 'NULL') }] } }])
    await shape.expectMatches(byId('post6b'))
  })

  it('10, 13, 14: OR rows already present are not re-sent; row forms and params move in', async () => {
    await cluster.query(`
      CREATE TABLE parent10 (id int PRIMARY KEY, active bool);
      CREATE TABLE child10 (id int PRIMARY KEY, parent_id int, pinned bool);
      INSERT INTO parent10 VALUES (1, false);
      INSERT INTO child10 VALUES (1, 1, true), (2, 1, false);
      CREATE TABLE members13 (user_id int, team_id int, PRIMARY KEY (user_id, team_id));
      CREATE TABLE docs13 (id int PRIMARY KEY, user_id int, team_id int, v int);
      INSERT INTO docs13 VALUES (1, 2, 2, 20), (2, 2, 3, 5), (3, 1, 2, 30);`)
    const or = new Follower('child10', 'parent_id IN (SELECT id FROM parent10 WHERE active) OR pinned')
    await or.sync()
    const got = await or.live(() => cluster.query('UPDATE parent10 SET active = true'))
    expect(changes(got).map((m) => m.key)).toEqual(['"public"."child10"/"2"'])
    await or.expectMatches(byId('child10'))
    expect(or.tracker.rows.get('"public"."child10"/"1"')!.active).toEqual([true, true])

    const rows = new Follower('docs13', '(user_id, team_id) IN (SELECT user_id, team_id FROM members13 WHERE team_id > $1) AND v > $2', {
      'params[1]': '1',
      'params[2]': '10',
    })
    await rows.sync()
    const rowsHandle = rows.handle
    const moved = await rows.live(() => cluster.query('INSERT INTO members13 VALUES (2, 2), (2, 3)'))
    const tag = `${hash(rows.handle, 'user_id:v:2team_id:v:2')}/1`
    // A move-in, not a 409 and a fresh snapshot holding the same row.
    expect(rows.handle).toBe(rowsHandle)
    expect(changes(moved).map((m) => [m.key, m.headers['tags'], m.headers['is_move_in']])).toEqual([['"public"."docs13"/"1"', [tag], true]])
    await rows.expectMatches(byId('docs13'))
    const out = await rows.live(() => cluster.query('DELETE FROM members13 WHERE user_id = 2 AND team_id = 2'))
    expect(events(out)).toMatchObject([{ headers: { event: 'move-out', patterns: [{ pos: 0, value: hash(rows.handle, 'user_id:v:2team_id:v:2') }] } }])
    await rows.expectMatches(byId('docs13'))
  })

  it('31, 39: one transaction moving inner and outer rows both ways', async () => {
    await cluster.query(`
      CREATE TABLE users39 (id int PRIMARY KEY, active bool);
      CREATE TABLE posts39 (id int PRIMARY KEY, user_id int, title text, ok bool);
      INSERT INTO users39 VALUES (1, false), (2, true), (3, true);
      INSERT INTO posts39 VALUES (1, 1, 'a', true), (2, 2, 'b', true), (3, 3, 'c', true), (4, 2, 'd', true);`)
    const shape = new Follower('posts39', 'user_id IN (SELECT id FROM users39 WHERE active) AND ok')
    await shape.sync()
    await shape.live(() =>
      cluster.query(`BEGIN;
        UPDATE users39 SET active = true WHERE id = 1;
        UPDATE posts39 SET title = 'B' WHERE id = 2;
        UPDATE users39 SET active = false WHERE id = 3;
        UPDATE posts39 SET user_id = 1, ok = false WHERE id = 4;
        COMMIT`),
    )
    await shape.expectMatches(byId('posts39'))
  })

  it('25: outer changes racing a move-in are spliced around its query: nothing missed, nothing twice', async () => {
    await cluster.query(`
      CREATE TABLE users25 (id int PRIMARY KEY, active bool);
      CREATE TABLE posts25 (id int PRIMARY KEY, user_id int, n int);
      INSERT INTO users25 SELECT g, false FROM generate_series(1, 20) g;
      INSERT INTO posts25 SELECT g, g % 20 + 1, 0 FROM generate_series(1, 400) g;`)
    const shape = new Follower('posts25', 'user_id IN (SELECT id FROM users25 WHERE active)')
    await shape.sync()
    for (let round = 0; round < 4; round++) {
      await shape.live(() =>
        Promise.all([
          cluster.query(`UPDATE users25 SET active = NOT active WHERE id % 4 = ${round}`),
          cluster.query(`UPDATE posts25 SET n = n + 1, user_id = (user_id + ${round}) % 20 + 1 WHERE id % 7 = ${round}`),
          cluster.query(`UPDATE users25 SET active = NOT active WHERE id % 5 = ${round}`),
          cluster.query(`INSERT INTO posts25 SELECT 1000 + ${round} * 10 + g, g, 0 FROM generate_series(1, 5) g`),
        ]),
      )
      await shape.converge(byId('posts25'))
    }
    expect(shape.tracker.duplicateInserts).toBe(0)
  })

  it('12, 15, 19: composite-key inner tables, quoted identifiers, two subqueries joined by AND', async () => {
    await cluster.query(`
      CREATE TABLE "Parent" (id int PRIMARY KEY, "isActive" bool);
      CREATE TABLE kid15 (id int PRIMARY KEY, "parentId" int);
      INSERT INTO "Parent" VALUES (1, false);
      INSERT INTO kid15 VALUES (1, 1);
      CREATE TABLE team12 (id int PRIMARY KEY);
      CREATE TABLE member12 (user_id int, team_id int, PRIMARY KEY (user_id, team_id));
      CREATE TABLE project12 (id int PRIMARY KEY, team_id int, owner int);
      INSERT INTO team12 VALUES (1), (2);
      INSERT INTO project12 VALUES (1, 1, 7), (2, 2, 7), (3, 2, 8);`)
    const quoted = new Follower('kid15', '"parentId" IN (SELECT id FROM "Parent" WHERE "isActive")')
    await quoted.sync()
    const moved = await quoted.live(() => cluster.query('UPDATE "Parent" SET "isActive" = true'))
    expect(changes(moved)[0]!.headers['tags']).toEqual([hash(quoted.handle, 'v:1')])
    await quoted.expectMatches(byId('kid15'))

    const both = new Follower('project12', 'team_id IN (SELECT team_id FROM member12 WHERE user_id = 1) AND team_id IN (SELECT id FROM team12)')
    await both.sync()
    await both.live(() => cluster.query('INSERT INTO member12 VALUES (1, 1)'))
    await both.expectMatches(byId('project12'))
    await both.live(() => cluster.query('INSERT INTO member12 VALUES (1, 2), (2, 2)'))
    await both.expectMatches(byId('project12'))
    await both.live(() => cluster.query('DELETE FROM member12 WHERE user_id = 1 AND team_id = 1'))
    await both.expectMatches(byId('project12'))
    await both.live(() => cluster.query('DELETE FROM team12 WHERE id = 2'))
    await both.expectMatches(byId('project12'))
  })

  it('16, 17, 18: a burst read in one request collapses in order; empty tables then rows; oscillation', async () => {
    await cluster.query(`
      CREATE TABLE parent16 (id int PRIMARY KEY, value int);
      CREATE TABLE child16 (id int PRIMARY KEY, parent_id int, v int);`)
    const shape = new Follower('child16', 'parent_id IN (SELECT id FROM parent16 WHERE value > 10)')
    await shape.sync()
    await shape.live(() => cluster.query('INSERT INTO parent16 VALUES (1, 11); INSERT INTO child16 VALUES (1, 1, 0)'))
    await shape.expectMatches(byId('child16'))
    // A burst, then read without live: the moves are applied in order.
    for (const sql of [
      'UPDATE parent16 SET value = 0 WHERE id = 1',
      'INSERT INTO parent16 VALUES (2, 12); INSERT INTO child16 VALUES (2, 2, 0)',
      'UPDATE child16 SET v = v + 1',
      'UPDATE parent16 SET value = 13 WHERE id = 1',
      'UPDATE parent16 SET value = 0 WHERE id = 1',
      'UPDATE parent16 SET value = 14 WHERE id = 1',
      'INSERT INTO parent16 VALUES (3, 15); INSERT INTO child16 VALUES (3, 3, 0)',
    ]) {
      await cluster.query(sql)
    }
    await shape.converge(byId('child16'))
    const all = await shape.live(() => cluster.query('UPDATE parent16 SET value = 0'))
    const outs = events(all).filter((m) => m.headers['event'] === 'move-out')
    expect(outs).toHaveLength(1)
    expect((outs[0]!.headers['patterns'] as unknown[]).length).toBe(3)
    await shape.expectMatches(byId('child16'))
    expect(shape.tracker.duplicateInserts).toBe(0)
  })

  it('22, 23, 29, 36, 37: updates across the view, updates of nothing selected, a row moving parents, deletes', async () => {
    await cluster.query(`
      CREATE TABLE users29 (id int PRIMARY KEY, active bool);
      CREATE TABLE posts29 (id int PRIMARY KEY, user_id int, title text, extra text);
      INSERT INTO users29 VALUES (1, true), (2, true), (3, false);
      INSERT INTO posts29 VALUES (1, 1, 'a', 'x'), (2, 3, 'b', 'x');`)
    const shape = new Follower('posts29', 'user_id IN (SELECT id FROM users29 WHERE active)', { columns: 'id,user_id,title' })
    await shape.sync()
    const untouched = await shape.live(() => cluster.query(`UPDATE posts29 SET extra = 'y' WHERE id = 1`))
    expect(changes(untouched)).toMatchObject([{ key: '"public"."posts29"/"1"', value: { id: '1' }, headers: { operation: 'update', active_conditions: [true] } }])
    const moved = await shape.live(() => cluster.query('UPDATE posts29 SET user_id = 2 WHERE id = 1'))
    expect(changes(moved)[0]!.headers).toMatchObject({ operation: 'update', tags: [hash(shape.handle, 'v:2')], removed_tags: [hash(shape.handle, 'v:1')] })
    const off = await shape.live(() => cluster.query('UPDATE users29 SET active = false WHERE id = 1'))
    expect(events(off)).toHaveLength(1)
    await shape.expectMatches(byId('posts29'))
    expect(shape.tracker.rows.has('"public"."posts29"/"1"')).toBe(true)
    const entering = await shape.live(() => cluster.query('UPDATE posts29 SET user_id = 2 WHERE id = 2'))
    expect(changes(entering)[0]!.headers['operation']).toBe('insert')
    const leaving = await shape.live(() => cluster.query('UPDATE posts29 SET user_id = 3 WHERE id = 2'))
    expect(changes(leaving)[0]!.headers['operation']).toBe('delete')
    await shape.live(() => cluster.query(`UPDATE posts29 SET title = 'A' WHERE id = 1`))
    await shape.expectMatches(byId('posts29'))
    await shape.live(() => cluster.query('DELETE FROM posts29 WHERE id = 1'))
    await shape.expectMatches(byId('posts29'))
  })

  it('30, 38: a fresh stream gets the same tags, and no row that moved out', async () => {
    await cluster.query(`
      CREATE TABLE users30 (id int PRIMARY KEY, active bool);
      CREATE TABLE posts30 (id int PRIMARY KEY, user_id int);
      INSERT INTO users30 VALUES (1, true), (2, true);
      INSERT INTO posts30 VALUES (1, 1), (2, 2);`)
    const where = 'user_id IN (SELECT id FROM users30 WHERE active)'
    const first = new Follower('posts30', where)
    await first.sync()
    await first.live(() => cluster.query('UPDATE users30 SET active = false WHERE id = 2'))
    const fresh = new Follower('posts30', where)
    const got = changes(await fresh.sync())
    expect(fresh.handle).toBe(first.handle)
    expect(got.filter((m) => m.headers['is_move_in'] === undefined).map((m) => m.headers['tags'])).toContainEqual([hash(first.handle, 'v:1')])
    await fresh.expectMatches(byId('posts30'))
    expect(fresh.tracker.rows.has('"public"."posts30"/"2"')).toBe(false)
  })

  it('TanStack on-demand: offset=now with log=changes_only still gets moves and their rows', async () => {
    await cluster.query(`
      CREATE TABLE users32 (id uuid PRIMARY KEY, "isActive" bool);
      CREATE TABLE posts32 (id uuid PRIMARY KEY, "userId" uuid, title text);
      INSERT INTO users32 VALUES ('00000000-0000-0000-0000-000000000001', false);
      INSERT INTO posts32 VALUES ('00000000-0000-0000-0000-00000000000a', '00000000-0000-0000-0000-000000000001', 't');`)
    const shape = new Follower('posts32', '"userId" IN (SELECT id FROM users32 WHERE "isActive" = true)', { log: 'changes_only' })
    shape.offset = 'now'
    await shape.sync()
    expect(shape.tracker.rows.size).toBe(0)
    const got = await shape.live(() => cluster.query('UPDATE users32 SET "isActive" = true'))
    expect(changes(got)).toMatchObject([{ value: { title: 't' }, headers: { is_move_in: true, tags: [hash(shape.handle, 'v:00000000-0000-0000-0000-000000000001')] } }])
    await shape.live(() => cluster.query('UPDATE users32 SET "isActive" = false'))
    expect(shape.tracker.rows.size).toBe(0)
  })

  it('subset snapshots of a subquery shape carry its tags; a move-out then removes subset rows too', async () => {
    await cluster.query(`
      CREATE TABLE users40 (id int PRIMARY KEY, active bool);
      CREATE TABLE posts40 (id int PRIMARY KEY, user_id int, n int);
      INSERT INTO users40 VALUES (1, true), (2, false);
      INSERT INTO posts40 VALUES (1, 1, 5), (2, 1, 50), (3, 2, 50);`)
    const shape = new Follower('posts40', 'user_id IN (SELECT id FROM users40 WHERE active)', { log: 'changes_only' })
    shape.offset = 'now'
    await shape.sync()
    const res = await get(shapeUrl({ table: 'posts40', where: shape.where, log: 'changes_only', offset: shape.offset, handle: shape.handle, subset__where: 'n > 10' }))
    expect(res.status, res.text).toBe(200)
    const body = res.json() as { data: WireMessage[] }
    expect(body.data.map((m) => [m.key, m.headers['tags'], m.headers['active_conditions']])).toEqual([['"public"."posts40"/"2"', [hash(shape.handle, 'v:1')], [true]]])
    shape.tracker.apply(body.data)
    const moved = await shape.live(() => cluster.query('UPDATE users40 SET active = false'))
    expect(events(moved)).toHaveLength(1)
    expect(shape.tracker.rows.size).toBe(0)
  })

  it('8: three levels: a grandparent change moves the outer shape in, reverting it moves it out with the same tag', async () => {
    await cluster.query(`
      CREATE TABLE gp8 (id int PRIMARY KEY, on_ bool);
      CREATE TABLE p8 (id int PRIMARY KEY, gp_id int);
      CREATE TABLE c8 (id int PRIMARY KEY, p_id int);
      INSERT INTO gp8 VALUES (1, false), (2, true); INSERT INTO p8 VALUES (1, 1), (2, 2); INSERT INTO c8 VALUES (1, 1), (2, 2);`)
    const shape = new Follower('c8', 'p_id IN (SELECT id FROM p8 WHERE gp_id IN (SELECT id FROM gp8 WHERE on_))')
    await shape.sync()
    await shape.expectMatches(byId('c8'))
    const handle = shape.handle
    const h1 = hash(handle, 'v:1')
    let xid = 0
    const moveIn = await shape.live(async () => (xid = await xidOf('UPDATE gp8 SET on_ = true WHERE id = 1')))
    expect(shape.handle).toBe(handle)
    expect(moveIn[0]).toEqual({ headers: { event: 'move-in', patterns: [{ pos: 0, value: h1 }], txids: [xid] } })
    expect(changes(moveIn).map((m) => [m.key, m.headers['is_move_in'], m.headers['tags']])).toEqual([['"public"."c8"/"1"', true, [h1]]])
    await shape.expectMatches(byId('c8'))
    const moveOut = await shape.live(async () => (xid = await xidOf('UPDATE gp8 SET on_ = false WHERE id = 1')))
    expect(moveOut.filter((m) => m.headers['control'] !== 'up-to-date')).toEqual([{ headers: { event: 'move-out', patterns: [{ pos: 0, value: h1 }], txids: [xid] } }])
    await shape.expectMatches(byId('c8'))
    // The middle table's own changes, a parent moving between grandparents, a grandparent deleted, outer rows alongside.
    await shape.live(() => cluster.query('INSERT INTO p8 VALUES (3, 2); INSERT INTO c8 VALUES (3, 3)'))
    await shape.expectMatches(byId('c8'))
    await shape.live(() => cluster.query('UPDATE p8 SET gp_id = 1 WHERE id = 2'))
    await shape.expectMatches(byId('c8'))
    await shape.live(() => cluster.query('BEGIN; UPDATE gp8 SET on_ = true WHERE id = 1; DELETE FROM gp8 WHERE id = 2; INSERT INTO c8 VALUES (4, 1); COMMIT'))
    await shape.expectMatches(byId('c8'))
    await shape.live(() => cluster.query('UPDATE p8 SET id = 5 WHERE id = 1; UPDATE c8 SET p_id = 5 WHERE id = 1'))
    await shape.converge(byId('c8'))
    expect(shape.handle).toBe(handle)
    expect(shape.tracker.duplicateInserts).toBe(0)
  })

  it('11: an innermost change that keeps the middle set moves nothing and keeps the handle; four levels follow moves', async () => {
    await cluster.query(`
      CREATE TABLE s11 (id int PRIMARY KEY, on_ bool);
      CREATE TABLE gp11 (id int PRIMARY KEY, on_ bool, s_id int);
      CREATE TABLE p11 (id int PRIMARY KEY, gp_id int, gp2_id int);
      CREATE TABLE c11 (id int PRIMARY KEY, p_id int, n int DEFAULT 0);
      INSERT INTO s11 VALUES (1, true);
      INSERT INTO gp11 VALUES (1, true, 1), (2, true, 1), (3, false, 1);
      INSERT INTO p11 VALUES (1, 1, 2), (2, 3, 4);
      INSERT INTO c11 VALUES (1, 1), (2, 2);`)
    const shape = new Follower('c11', 'p_id IN (SELECT id FROM p11 WHERE gp_id IN (SELECT id FROM gp11 WHERE on_) OR gp2_id IN (SELECT id FROM gp11 WHERE NOT on_))')
    await shape.sync()
    await shape.expectMatches(byId('c11'))
    const handle = shape.handle
    // p11 1 is in through gp 1 (on); gp 2 going off brings it in through the second subquery too: the middle set keeps 1.
    // An outer update after it ends the long-poll: the only line it gets.
    const sentinel = (): Promise<unknown> => cluster.query('UPDATE c11 SET n = n + 1 WHERE id = 1')
    const quiet = await shape.live(async () => {
      await cluster.query('UPDATE gp11 SET on_ = false WHERE id = 2')
      await sentinel()
    })
    expect(shape.handle).toBe(handle)
    expect(events(quiet)).toEqual([])
    expect(changes(quiet).map((m) => [m.key, m.headers['operation']])).toEqual([['"public"."c11"/"1"', 'update']])
    await shape.expectMatches(byId('c11'))
    // gp 1 going off empties the first set; p11 1 stays in through gp 2: nothing either.
    const quiet2 = await shape.live(async () => {
      await cluster.query('UPDATE gp11 SET on_ = false WHERE id = 1')
      await sentinel()
    })
    expect(events(quiet2)).toEqual([])
    expect(changes(quiet2).map((m) => [m.key, m.headers['operation']])).toEqual([['"public"."c11"/"1"', 'update']])
    // gp 3 is off: p11 2 (gp2_id 3) enters the middle set, c11 2 moves in.
    const moved = await shape.live(() => cluster.query('UPDATE p11 SET gp2_id = 3 WHERE id = 2'))
    expect(events(moved).map((m) => m.headers['event'])).toEqual(['move-in'])
    await shape.expectMatches(byId('c11'))
    expect(shape.handle).toBe(handle)

    const deep = new Follower('c11', 'p_id IN (SELECT id FROM p11 WHERE gp_id IN (SELECT id FROM gp11 WHERE s_id IN (SELECT id FROM s11 WHERE on_)))')
    await deep.sync()
    await deep.expectMatches(byId('c11'))
    const deepHandle = deep.handle
    const out = await deep.live(() => cluster.query('UPDATE s11 SET on_ = false'))
    expect(events(out).map((m) => m.headers['event'])).toEqual(['move-out'])
    await deep.expectMatches(byId('c11'))
    const back = await deep.live(() => cluster.query('UPDATE s11 SET on_ = true'))
    expect(events(back).map((m) => m.headers['event'])).toEqual(['move-in'])
    await deep.expectMatches(byId('c11'))
    const quiet3 = await deep.live(async () => {
      await cluster.query('BEGIN; INSERT INTO s11 VALUES (2, true); UPDATE gp11 SET s_id = 2 WHERE id = 3; COMMIT')
      await sentinel()
    })
    expect(events(quiet3)).toEqual([])
    await deep.converge(byId('c11'))
    expect(deep.handle).toBe(deepHandle)
    expect(deep.tracker.duplicateInserts).toBe(0)
  })

  it('nested: NOT IN with NULLs and an emptied set below, a middle table without a key holding duplicate rows, a selective middle clause', async () => {
    await cluster.query(`
      CREATE TABLE gpn (id int PRIMARY KEY, ref int, v int);
      CREATE TABLE pn (gp_id int, team int, tag int);
      CREATE TABLE cn (id int PRIMARY KEY, tag int, n int DEFAULT 0);
      INSERT INTO gpn VALUES (1, 1, 1), (2, 2, 2);
      INSERT INTO pn VALUES (1, 1, 10), (1, 1, 10), (3, 1, 30), (NULL, 1, 40), (2, 2, 50);
      INSERT INTO cn VALUES (1, 10), (2, 30), (3, 40), (4, 50), (5, NULL);`)
    const shape = new Follower('cn', 'tag IN (SELECT tag FROM pn WHERE team = 1 AND gp_id NOT IN (SELECT ref FROM gpn WHERE v > 0))')
    await shape.sync()
    await shape.expectMatches(byId('cn'))
    const handle = shape.handle
    for (const step of [
      'INSERT INTO gpn VALUES (3, 3, 5)',
      'UPDATE gpn SET v = 0 WHERE id = 1',
      // One of the two identical rows: the value stays, counted once more.
      'DELETE FROM pn WHERE ctid = (SELECT ctid FROM pn WHERE tag = 10 LIMIT 1)',
      // A NULL joins the set below: NOT IN is NULL for every miss; then it leaves.
      'INSERT INTO gpn VALUES (4, NULL, 1)',
      'UPDATE gpn SET v = 0 WHERE id = 4',
      // The set below empties: NOT IN is true even for a NULL gp_id.
      'DELETE FROM gpn',
      'UPDATE pn SET team = 1 WHERE tag = 50',
      'INSERT INTO gpn VALUES (5, 2, 1); INSERT INTO pn VALUES (2, 1, 10)',
      'UPDATE pn SET gp_id = 7 WHERE tag = 10',
    ]) {
      await cluster.query(step)
      // An outer write after the step: once it is seen, so is the step.
      await cluster.query('UPDATE cn SET n = n + 1')
      await shape.converge(byId('cn'))
    }
    expect(shape.handle).toBe(handle)
    expect(shape.tracker.duplicateInserts).toBe(0)
  })

  it('20: a dependency snapshot held up for more than 5 s still answers the first request with 200 and the right rows', async () => {
    await cluster.query(`
      CREATE TABLE users20 (id int PRIMARY KEY, active bool);
      CREATE TABLE posts20 (id int PRIMARY KEY, user_id int);
      INSERT INTO users20 VALUES (1, true), (2, false);
      INSERT INTO posts20 VALUES (1, 1), (2, 2);`)
    // A first shape publishes both tables, so the second one's creation waits for nothing but its snapshot.
    await new Follower('posts20', 'user_id IN (SELECT id FROM users20)').sync()
    const locker = await cluster.connect()
    const shape = new Follower('posts20', 'user_id IN (SELECT id FROM users20 WHERE active)')
    let first: Promise<unknown> | undefined
    let settled = false
    try {
      await locker.query('BEGIN')
      await locker.query('LOCK TABLE users20 IN ACCESS EXCLUSIVE MODE')
      first = shape.sync().finally(() => (settled = true))
      await new Promise((r) => setTimeout(r, 6_000))
      expect(settled).toBe(false)
    } finally {
      await locker.query('COMMIT')
      await locker.end()
    }
    await first
    await shape.expectMatches(byId('posts20'))
    await shape.live(() => cluster.query('UPDATE users20 SET active = true WHERE id = 2'))
    await shape.expectMatches(byId('posts20'))
  }, 60_000)

  it('26: with no transaction held when its query is done, a move-in waits for the stream to pass the query before splicing', async () => {
    await cluster.query(`
      CREATE TABLE users26 (id int PRIMARY KEY, active bool);
      CREATE TABLE posts26 (id int PRIMARY KEY, user_id int, pad text);
      INSERT INTO users26 SELECT g, false FROM generate_series(1, 5) g;
      INSERT INTO posts26 VALUES (1, 1, '');`)
    const shape = new Follower('posts26', 'user_id IN (SELECT id FROM users26 WHERE active)')
    await shape.sync()
    const handle = shape.handle
    for (let round = 1; round <= 4; round++) {
      // A big transaction with a post of the entering user, written first and committed right after the move: it
      // commits before the move-in's query fixes its snapshot (so the query returns that post), but its many rows
      // reach the shape after the query is done. Spliced before the stream passed the query, the post came twice.
      const big = await cluster.connect()
      try {
        await big.query('BEGIN')
        await big.query(`INSERT INTO posts26 VALUES (${round * 100_000}, ${round + 1}, 'x')`)
        await big.query(`INSERT INTO posts26 SELECT ${round * 100_000} + g, 0, repeat('x', 100) FROM generate_series(1, 20000) g`)
        await shape.live(async () => {
          await cluster.query(`UPDATE users26 SET active = true WHERE id = ${round + 1}`)
          await big.query('COMMIT')
        })
      } finally {
        await big.end()
      }
      await shape.converge(byId('posts26'))
    }
    expect(shape.handle).toBe(handle)
    expect(shape.tracker.duplicateInserts).toBe(0)
  }, 120_000)

  it('27 and the held-changes bound: too many transactions, or changes, during one move-in drop the shape (409); the new shape is right', async () => {
    const limited = await startPipeline(cluster, await dirs.make('store27'), {
      slotName: 'sluice_held27',
      publicationName: 'sluice_held27',
      subqueryHeld: { transactions: 5, changes: 50 },
    })
    const limitedServer = await startServer(limited, { longPollTimeoutMs: LONG_POLL_MS })
    try {
      await cluster.query(`
        CREATE TABLE users27 (id int PRIMARY KEY, active bool, n int DEFAULT 0);
        CREATE TABLE posts27 (id int PRIMARY KEY, user_id int);
        INSERT INTO users27 SELECT g, g > 3 FROM generate_series(1, 100) g;
        INSERT INTO posts27 VALUES (1, 1), (2, 2), (3, 3), (4, 4);`)
      const where = 'user_id IN (SELECT id FROM users27 WHERE active)'
      const bursts: [number, () => Promise<unknown>][] = [
        // Six transactions of one change each, past 5 transactions.
        [
          2,
          async () => {
            for (let i = 0; i < 6; i++) await cluster.query('UPDATE users27 SET n = n + 1 WHERE id = 10')
          },
        ],
        // One transaction of 97 changes (the active users), past 50 changes.
        [3, () => cluster.query('UPDATE users27 SET n = n + 1 WHERE active')],
      ]
      for (const [user, burst] of bursts) {
        const shape = new Follower('posts27', where, {}, () => limitedServer)
        await shape.sync()
        await shape.expectMatches(byId('posts27'))
        const handle = shape.handle
        const locker = await cluster.connect()
        const got = await shape.live(async () => {
          try {
            // The lock holds the move-in's query up while the transactions arrive.
            await locker.query('BEGIN')
            await locker.query('LOCK TABLE posts27 IN ACCESS EXCLUSIVE MODE')
            await cluster.query(`UPDATE users27 SET active = true WHERE id = ${user}`)
            await burst()
            for (const until = Date.now() + 20_000; ; ) {
              const res = await call(limitedServer.port, shapeUrl({ table: 'posts27', where, offset: shape.offset, handle }))
              if (res.status === 409) break
              if (Date.now() > until) throw new Error(`the shape was not dropped (status ${res.status})`)
              await new Promise((r) => setTimeout(r, 50))
            }
          } finally {
            await locker.query('COMMIT')
            await locker.end()
          }
        })
        expect(got[0]!.headers).toEqual({ control: 'must-refetch' })
        expect(shape.handle).not.toBe(handle)
        await shape.expectMatches(byId('posts27'))
      }
    } finally {
      await limitedServer.close()
      await limited.stop()
    }
  }, 120_000)

  it('28 and 6 (inner): TRUNCATE of the outer or of an inner table invalidates the shape', async () => {
    await cluster.query(`
      CREATE TABLE users28 (id int PRIMARY KEY);
      CREATE TABLE posts28 (id int PRIMARY KEY, user_id int);
      INSERT INTO users28 VALUES (1);
      INSERT INTO posts28 VALUES (10, 1);`)
    const shape = new Follower('posts28', 'user_id IN (SELECT id FROM users28)')
    await shape.sync()
    const inner = await shape.live(() => cluster.query('TRUNCATE users28'))
    expect(inner[0]!.headers).toEqual({ control: 'must-refetch' })
    await shape.expectMatches(byId('posts28'))
    await shape.live(() => cluster.query('INSERT INTO users28 VALUES (1)'))
    await shape.expectMatches(byId('posts28'))
    const outer = await shape.live(() => cluster.query('TRUNCATE posts28'))
    expect(outer[0]!.headers).toEqual({ control: 'must-refetch' })
    await shape.expectMatches(byId('posts28'))
  })

  it('item 5: after a restart a subquery shape answers 409 and a new handle, and the new shape is right', async () => {
    await cluster.query(`
      CREATE TABLE users99 (id int PRIMARY KEY, active bool);
      CREATE TABLE posts99 (id int PRIMARY KEY, user_id int);
      INSERT INTO users99 VALUES (1, true);
      INSERT INTO posts99 VALUES (1, 1), (2, 2);`)
    const shape = new Follower('posts99', 'user_id IN (SELECT id FROM users99 WHERE active)')
    await shape.sync()
    const old = shape.handle
    await server.close()
    await pipeline.stop()
    pipeline = await startPipeline(cluster, storeDir)
    server = await startServer(pipeline, { longPollTimeoutMs: LONG_POLL_MS })
    const res = await get(shapeUrl({ table: 'posts99', where: shape.where, offset: shape.offset, handle: old }))
    expect(res.status).toBe(409)
    expect(res.header('electric-handle')).not.toBe(old)
    shape.handle = ''
    shape.offset = '-1'
    shape.tracker.rows.clear()
    await shape.sync()
    await shape.live(() => cluster.query('INSERT INTO users99 VALUES (2, true)'))
    await shape.expectMatches(byId('posts99'))
  })

  it('item 8: a random workload over random subquery shapes; every shape converges to Postgres after each batch', async () => {
    const seed = Number(process.env['SUBQUERY_SEED'] ?? Math.floor(Math.random() * 2 ** 31))
    const batches = Number(process.env['SUBQUERY_BATCHES'] ?? (process.env['SOAK'] === '1' ? 500 : 12))
    console.log(`subquery oracle: seed ${seed} (SUBQUERY_SEED=${seed}), ${batches} batches`)
    let state = seed
    const random = (): number => {
      state = (state * 1103515245 + 12345) % 2 ** 31
      return state / 2 ** 31
    }
    const pick = <T,>(list: readonly T[]): T => list[Math.floor(random() * list.length)]!
    const int = (n: number): number => Math.floor(random() * n)
    await cluster.query(`
      CREATE TABLE ou (id int PRIMARY KEY, active bool NOT NULL, team int);
      CREATE TABLE op (id int PRIMARY KEY, user_id int, team int, flag bool);
      INSERT INTO ou SELECT g, g % 2 = 0, g % 3 FROM generate_series(1, 8) g;
      INSERT INTO op SELECT g, g % 9, g % 4, g % 5 = 0 FROM generate_series(1, 40) g;`)
    const clauses = [
      'user_id IN (SELECT id FROM ou WHERE active)',
      'user_id NOT IN (SELECT id FROM ou WHERE NOT active)',
      'user_id IN (SELECT id FROM ou WHERE active) OR flag',
      'user_id IN (SELECT id FROM ou WHERE active) AND team IN (SELECT team FROM ou WHERE NOT active)',
      '(user_id, team) IN (SELECT id, team FROM ou)',
      'NOT (user_id IN (SELECT id FROM ou WHERE team = 1) OR flag)',
      // Nested: the middle level and its subquery on one table; a subquery reading the outer table itself.
      'user_id IN (SELECT id FROM ou WHERE team IN (SELECT team FROM ou WHERE NOT active) OR id > 10)',
      'team NOT IN (SELECT team FROM ou WHERE active AND id IN (SELECT user_id FROM op WHERE flag))',
    ]
    const shapes = clauses.map((where) => new Follower('op', where))
    for (const shape of shapes) await shape.sync()
    // Nothing in this workload calls for a 409 (no NULL joins a NOT IN set, no TRUNCATE, no DDL): a shape keeps its handle.
    const handles = shapes.map((shape) => shape.handle)
    let nextPost = 100
    let nextUser = 100
    const statement = (): string =>
      pick([
        () => `UPDATE ou SET active = NOT active WHERE id = ${1 + int(10)}`,
        () => `UPDATE ou SET team = ${int(4)} WHERE id = ${1 + int(10)}`,
        () => `INSERT INTO ou VALUES (${nextUser++ % 3 === 0 ? 9 + int(3) : nextUser}, ${random() < 0.5}, ${int(4)}) ON CONFLICT (id) DO UPDATE SET active = NOT ou.active`,
        () => `DELETE FROM ou WHERE id = ${1 + int(12)}`,
        () => `INSERT INTO op VALUES (${nextPost++}, ${int(13)}, ${int(4)}, ${random() < 0.3})`,
        () => `UPDATE op SET user_id = ${int(13)} WHERE id % 7 = ${int(7)}`,
        () => `UPDATE op SET team = ${int(4)}, flag = NOT flag WHERE id = ${1 + int(nextPost)}`,
        () => `DELETE FROM op WHERE id = ${1 + int(nextPost)}`,
      ])()
    const transaction = (): string => `BEGIN; ${Array.from({ length: 1 + int(3) }, statement).join('; ')}; COMMIT`
    for (let batch = 0; batch < batches; batch++) {
      // Concurrent transactions may deadlock on the same rows: Postgres rolls the victim back, which the shapes never see.
      const run = (sql: string): Promise<unknown> =>
        cluster.query(sql).catch(async (error: { code?: string }) => {
          if (error.code !== '40P01') throw error
          await cluster.query('ROLLBACK').catch(() => {})
        })
      await Promise.all(Array.from({ length: 1 + int(3) }, () => run(transaction())))
      for (const shape of shapes) {
        await shape.converge(byId('op'))
        expect(shape.tracker.duplicateInserts, `${shape.where}, seed ${seed}`).toBe(0)
      }
      expect(shapes.filter((shape, i) => shape.handle !== handles[i]).map((shape) => shape.where), `seed ${seed}`).toEqual([])
    }
  }, 300_000)
})
