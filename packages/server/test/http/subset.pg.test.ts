import { once } from 'node:events'
import { get as httpGet } from 'node:http'
import { connect } from 'node:net'
import { ShapeStream } from '@electric-sql/client'
import { useTempDir, usePostgres } from '@sluice/test-utils'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { Pipeline } from '../../src/pipeline.js'
import { isFullXidVisible, widenXid } from '../../src/shapes/snapshot/index.js'
import { caughtUp, startPipeline } from '../pipeline/harness.js'
import { type Res, type TestServer, call, messages, shapeUrl, startServer } from './http-harness.js'

/**
 * Subset snapshots (docs/protocol.md §6) on a real server, pipeline and Postgres:
 * the GET and POST forms, validation texts, ORDER BY / LIMIT / OFFSET against
 * Postgres's own ordering, hostile order_by and where texts (400, table
 * intact), and the metadata a `log=changes_only` client filters the live stream
 * with, checked against transactions committed around the snapshot.
 */

const cluster = usePostgres()
const dirs = useTempDir('subset')
let pipeline: Pipeline
let server: TestServer

interface Subset {
  metadata: { xmin: string; xmax: string; xip_list: string[]; snapshot_mark: number; database_lsn: string }
  data: Array<{ key: string; value: Record<string, string | null>; headers: Record<string, unknown> }>
}

beforeAll(async () => {
  // `line` is also the name of the snapshot query's output column: ORDER BY must still mean the table's column.
  await cluster.query(`
    CREATE TABLE people (id int4 PRIMARY KEY, name text NOT NULL, age int4, team text, line int4, doc json);
    INSERT INTO people
      SELECT i, 'p' || i, CASE WHEN i % 4 = 0 THEN NULL ELSE 20 + (i * 7) % 13 END,
             CASE WHEN i % 3 = 0 THEN 'red' ELSE 'blue' END, (i * 37) % 11, '{"a":1}'
      FROM generate_series(1, 30) i;
  `)
  pipeline = await startPipeline(cluster, await dirs.make('store'))
  server = await startServer(pipeline, { longPollTimeoutMs: 2000 })
})

afterAll(async () => {
  await server?.close()
  await pipeline?.stop()
})

const get = (path: string): Promise<Res> => call(server.port, path)
const post = (path: string, body: unknown): Promise<Res> =>
  call(server.port, path, { method: 'POST', headers: { 'content-type': 'application/json' }, body: typeof body === 'string' ? body : JSON.stringify(body) })
const invalid = (errors: unknown): unknown => ({ message: 'Invalid request', errors })
const ids = (res: Res): number[] => (res.json() as Subset).data.map((row) => Number(row.value['id']))

async function pgIds(sql: string, params: unknown[] = []): Promise<number[]> {
  const { rows } = await cluster.query<{ id: number }>(sql, params)
  return rows.map((row) => row.id)
}

/** Waits up to 10 s for every subset connection to be idle: none left inside a transaction. */
async function subsetConnectionsIdle(): Promise<void> {
  const deadline = Date.now() + 10_000
  for (;;) {
    const { rows } = await cluster.query<{ n: string }>(
      `SELECT count(*)::text AS n FROM pg_stat_activity WHERE application_name = 'sluice_subset' AND state <> 'idle'`,
    )
    if (rows[0]!.n === '0') return
    if (Date.now() > deadline) throw new Error(`${rows[0]!.n} subset connections still busy`)
    await new Promise((resolve) => setTimeout(resolve, 50))
  }
}

async function peopleCount(): Promise<number> {
  const { rows } = await cluster.query<{ n: string }>('SELECT count(*)::text AS n FROM people')
  return Number(rows[0]!.n)
}

describe('subset over GET and POST (§6)', () => {
  it('GET: subset__where with subset__params as a JSON string, the object body, headers and row headers', async () => {
    const res = await get(shapeUrl({ table: 'people', offset: '-1', subset__where: 'age > $1 AND team = $2', subset__params: '{"1":"25","2":"blue"}' }))
    expect(res.status).toBe(200)
    expect(res.header('electric-snapshot')).toBe('true')
    expect(res.header('cache-control')).toBe('no-cache')
    expect(res.header('content-type')).toBe('application/json; charset=utf-8')
    expect(res.header('electric-handle')).toMatch(/^\d+-\d+$/)
    expect(res.header('electric-offset')).toBeDefined()
    expect(res.header('etag')).toBeUndefined()
    expect(JSON.parse(res.header('electric-schema')!)).toMatchObject({ id: { type: 'int4', pk_index: 0, not_null: true }, name: { type: 'text' } })
    const body = res.json() as Subset
    expect(Object.keys(body)).toEqual(['metadata', 'data'])
    const { metadata } = body
    expect(Object.keys(metadata)).toEqual(['xmin', 'xmax', 'xip_list', 'snapshot_mark', 'database_lsn'])
    expect(metadata.xmin).toMatch(/^\d+$/)
    expect(metadata.xmax).toMatch(/^\d+$/)
    expect(metadata.database_lsn).toMatch(/^\d+$/)
    expect(Number.isInteger(metadata.snapshot_mark) && metadata.snapshot_mark >= 0 && metadata.snapshot_mark < 2 ** 31).toBe(true)
    expect(ids(res).sort((a, b) => a - b)).toEqual(await pgIds(`SELECT id FROM people WHERE age > 25 AND team = 'blue' ORDER BY id`))
    const row = body.data.find((r) => r.value['id'] === '1')!
    expect(row).toEqual({
      key: '"public"."people"/"1"',
      value: { id: '1', name: 'p1', age: '27', team: 'blue', line: '4', doc: '{"a":1}' },
      headers: { operation: 'insert', relation: ['public', 'people'], snapshot_mark: metadata.snapshot_mark },
    })
  })

  it('POST: flat body with params as an object of numbers, and the {"subset":{…}} wrapper, give the same rows', async () => {
    const url = shapeUrl({ table: 'people', offset: '-1' })
    const flat = await post(url, { where: 'age >= $1', params: { '1': 30 }, order_by: 'id', limit: 4 })
    expect(flat.status).toBe(200)
    expect(flat.header('cache-control')).toBe('no-cache')
    expect(flat.header('electric-snapshot')).toBe('true')
    const wrapped = await post(url, { subset: { where: 'age >= $1', params: { '1': '30' }, order_by: 'id', limit: 4 } })
    expect(wrapped.status).toBe(200)
    const expected = await pgIds('SELECT id FROM people WHERE age >= 30 ORDER BY id LIMIT 4')
    expect(ids(flat)).toEqual(expected)
    expect(ids(wrapped)).toEqual(expected)
    expect(flat.header('electric-handle')).toBe(wrapped.header('electric-handle'))
  })

  it('POST: subset__* in the query join the body; the URL’s columns apply', async () => {
    const res = await post(shapeUrl({ table: 'people', offset: '-1', columns: 'id,name', subset__order_by: 'id DESC' }), { where: 'id <= 3' })
    expect(res.status).toBe(200)
    const body = res.json() as Subset
    expect(body.data.map((r) => r.value)).toEqual([
      { id: '3', name: 'p3' },
      { id: '2', name: 'p2' },
      { id: '1', name: 'p1' },
    ])
    expect(Object.keys(JSON.parse(res.header('electric-schema')!))).toEqual(['id', 'name'])
  })

  describe('a POST body cannot replace the shape pinned in the URL', () => {
    beforeAll(async () => {
      await cluster.query(`CREATE TABLE secrets (id int4 PRIMARY KEY, token text); INSERT INTO secrets VALUES (1, 'hunter2')`)
    })

    const pinned = shapeUrl({ table: 'people', where: 'id = 1', offset: '-1', log: 'changes_only' })
    const notInBody = "can't be set in a request body: the shape and the request's position come from the URL; a body carries subset parameters only"

    it('the probe’s request (table and where in the body) is a 400 naming table, and no secret row leaves', async () => {
      const res = await post(pinned, { table: 'secrets', where: 'true' })
      expect(res.status).toBe(400)
      expect(res.json()).toEqual(invalid({ table: [notInBody] }))
      expect(res.text).not.toContain('hunter2')
    })

    const shapeKeys: Array<[string, unknown]> = [
      ['table', 'secrets'],
      ['columns', 'id,token'],
      ['replica', 'full'],
      ['log', 'full'],
      ['queryable_columns', 'id'],
      ['handle', '1-2'],
      ['live', 'true'],
      ['live_sse', 'true'],
      ['cursor', '1'],
      ['secret', 'x'],
      ['expired_handle', '1-2'],
    ]
    it.each(shapeKeys)('%s in a body, bare or beside a {"subset"} wrapper, is a 400 naming it', async (key, value) => {
      for (const body of [{ [key]: value, where: 'id > 0' }, { [key]: value, subset: { where: 'true' } }, { [key]: value }]) {
        const res = await post(pinned, body)
        expect(res.status).toBe(400)
        expect(res.json()).toEqual(invalid({ [key]: [notInBody] }))
      }
    })

    it('a subset where in the body is ANDed with the pinned where, never in its place', async () => {
      for (const body of [{ where: 'true' }, { subset: { where: 'true' } }, { where: 'id > 0 OR true' }]) {
        const res = await post(pinned, body)
        expect(res.status).toBe(200)
        expect(ids(res)).toEqual([1])
      }
    })

    it('a subset key given both in the URL and the body is a 400 naming it', async () => {
      const res = await post(shapeUrl({ table: 'people', where: 'id = 1', offset: '-1', log: 'changes_only', subset__where: 'id > 0' }), { where: 'true' })
      expect(res.status).toBe(400)
      expect(res.json()).toEqual(invalid({ subset: { where: ['is given both in the URL and in the request body'] } }))
    })
  })

  it('bad POST bodies: invalid JSON, not an object, no subset', async () => {
    const url = shapeUrl({ table: 'people', offset: '-1' })
    const broken = await post(url, '{"where": ')
    expect(broken.status).toBe(400)
    expect((broken.json() as { error: string }).error).toBe('Invalid JSON in request body')
    expect(broken.header('cache-control')).toBe('no-cache')
    const list = await post(url, '[1,2]')
    expect(list.status).toBe(400)
    expect(list.json()).toEqual({ error: 'Request body must be a JSON object' })
    const empty = await post(url, '{}')
    expect(empty.status).toBe(400)
    expect(empty.json()).toEqual(invalid({ subset: ["can't be blank"] }))
  })

  it('the shape where and the subset where combine, each with its own $1', async () => {
    const res = await get(
      shapeUrl({ table: 'people', offset: '-1', where: 'team = $1', 'params[1]': 'red', subset__where: 'age < $1 OR age IS NULL', subset__params: '{"1":"28"}', subset__order_by: 'id' }),
    )
    expect(res.status).toBe(200)
    expect(ids(res)).toEqual(await pgIds(`SELECT id FROM people WHERE team = 'red' AND (age < 28 OR age IS NULL) ORDER BY id`))
  })

  it('a $1 inside a string literal is text, not a parameter', async () => {
    await cluster.query(`INSERT INTO people VALUES (100, '$1 é', 50, 'green', 1, null)`)
    try {
      const res = await get(shapeUrl({ table: 'people', offset: '-1', where: 'team = $1', 'params[1]': 'green', subset__where: `name = '$1 é' AND age = $1`, subset__params: '{"1":"50"}' }))
      expect(res.status).toBe(200)
      expect(ids(res)).toEqual([100])
    } finally {
      await cluster.query('DELETE FROM people WHERE id = 100')
    }
  })
})

describe('order_by, limit and offset', () => {
  const cases: Array<[string, string]> = [
    ['age DESC, id', 'age DESC, id'],
    ['age NULLS FIRST, id DESC', 'age NULLS FIRST, id DESC'],
    ['age DESC NULLS LAST, team, id', 'age DESC NULLS LAST, team, id'],
    ['"line" DESC, "id" ASC', 'line DESC, id ASC'],
    ['team DESC, line, id', 'team DESC, line, id'],
  ]
  for (const [orderBy, sql] of cases) {
    it(`ORDER BY ${orderBy} with LIMIT/OFFSET matches Postgres`, async () => {
      const all = await get(shapeUrl({ table: 'people', offset: '-1', subset__order_by: orderBy }))
      expect(all.status).toBe(200)
      expect(ids(all)).toEqual(await pgIds(`SELECT id FROM people ORDER BY ${sql}`))
      const page = await get(shapeUrl({ table: 'people', offset: '-1', subset__order_by: orderBy, subset__limit: '5', subset__offset: '7' }))
      expect(page.status).toBe(200)
      expect(ids(page)).toEqual(await pgIds(`SELECT id FROM people ORDER BY ${sql} LIMIT 5 OFFSET 7`))
    })
  }

  it('an offset past the end is an empty data list', async () => {
    const res = await get(shapeUrl({ table: 'people', offset: '-1', subset__order_by: 'id', subset__offset: '1000' }))
    expect(res.status).toBe(200)
    expect((res.json() as Subset).data).toEqual([])
  })

  it('validation texts: limit, offset, order_by required, params', async () => {
    const url = (extra: Record<string, string>): string => shapeUrl({ table: 'people', offset: '-1', ...extra })
    const cases: Array<[Record<string, string>, unknown]> = [
      [{ subset__limit: '0', subset__order_by: 'id' }, { subset: { limit: ['must be greater than 0'] } }],
      [{ subset__offset: '-1', subset__order_by: 'id' }, { subset: { offset: ['must be greater than or equal to 0'] } }],
      [{ subset__limit: 'ten', subset__order_by: 'id' }, { subset: { limit: ['is invalid'] } }],
      [{ subset__limit: '5' }, { subset: { order_by: ['order_by is required when limit or offset is present'] } }],
      [{ subset__where: 'id = $1', subset__params: '{"1":' }, { subset: { params: ['params must be valid JSON'] } }],
      [{ subset__where: 'id = $1', subset__params: '[1]' }, { subset: { params: ['params must be a JSON object'] } }],
      [{ subset__where: 'id = $1', subset__params: '{"2":"1"}' }, { subset: { where: ['Parameters must be numbered sequentially, starting from 1'] } }],
      [{ subset__where: 'id = $1', subset__params: '{"a":"1"}' }, { subset: { where: ['Parameters can only use numbers as keys'] } }],
    ]
    for (const [extra, errors] of cases) {
      const res = await get(url(extra))
      expect(res.status, JSON.stringify(extra)).toBe(400)
      expect(res.json(), JSON.stringify(extra)).toEqual(invalid(errors))
      expect(res.header('cache-control')).toBe('no-store')
    }
  })

  it('an order_by column whose type has no ordering is a 400 naming Postgres’s complaint', async () => {
    const res = await get(shapeUrl({ table: 'people', offset: '-1', subset__order_by: 'doc' }))
    expect(res.status).toBe(400)
    const errors = (res.json() as { errors: { subset: string[] } }).errors
    expect(errors.subset[0]).toMatch(/could not identify an ordering operator for type json/)
  })
})

describe('hostile input', () => {
  const orderBys: Array<[string, RegExp]> = [
    ['id; DROP TABLE people', /^Unexpected `;` in order by$/],
    ['id;', /^Unexpected `;` in order by$/],
    ['(SELECT id FROM people)', /only column names.*found a subquery/],
    ['pg_sleep(5)', /only column names.*found a function call/],
    ['lower(name)', /only column names.*found a function call/],
    ['age + 1', /only column names.*found an operator/],
    ['1', /only column names.*found a constant/],
    ['nope', /^At location 18: unknown reference "nope"$/],
    ['id, "Name"', /^At location 22: unknown reference "Name"$/],
    ['people.id', /unknown reference "people"\."id"/],
    ['public.people.id', /unknown reference/],
    ['*', /^At location 18: syntax error at or near "\*"$/],
    ['people.*', /unknown reference "people"\.\*/],
    ['id USING <', /USING operators are not allowed/],
    ['name COLLATE "C"', /found COLLATE/],
    ['id LIMIT 1', /malformed order_by ending with SQL clauses/],
    ['id FOR UPDATE', /malformed order_by ending with SQL clauses/],
    ['id UNION SELECT 1', /^At location \d+: syntax error at or near "UNION"$/],
    ['id /* unterminated', /^At location \d+: unterminated \/\* comment/],
    ['id\u0000; DROP TABLE people', /NUL/],
    ['', /order_by/],
  ]
  for (const [orderBy, message] of orderBys) {
    it(`order_by ${JSON.stringify(orderBy)} is a 400 and the table is intact`, async () => {
      const before = await peopleCount()
      const res = await get(shapeUrl({ table: 'people', offset: '-1', subset__where: 'id > 0', subset__order_by: orderBy }))
      if (orderBy === '') {
        // A blank order_by is absent (Ecto's rule): the subset is just its where clause.
        expect(res.status).toBe(200)
      } else {
        expect(res.status).toBe(400)
        const errors = (res.json() as { errors: { subset: { order_by: string[] } } }).errors
        expect(errors.subset.order_by).toHaveLength(1)
        expect(errors.subset.order_by[0]).toMatch(message)
      }
      expect(await peopleCount()).toBe(before)
    })
  }

  it('a comment in order_by never reaches Postgres: the keys are printed back, the rest is dropped', async () => {
    const res = await get(shapeUrl({ table: 'people', offset: '-1', subset__order_by: 'id DESC -- ; DROP TABLE people', subset__limit: '3' }))
    expect(res.status).toBe(200)
    expect(ids(res)).toEqual(await pgIds('SELECT id FROM people ORDER BY id DESC LIMIT 3'))
    expect(await peopleCount()).toBeGreaterThan(0)
  })

  const wheres: Array<[string, RegExp]> = [
    ['1=1; DROP TABLE people', /more than one statement/],
    ['id IN (SELECT id FROM people)', /.+/],
    ['pg_sleep(5) IS NULL', /pg_sleep/],
    ['nope = 1', /nope/],
    ["name = 'x' -- ' OR true", /WHERE clause must return a boolean|.+/],
    ['id = 1) OR (1=1', /syntax error/],
    ['age', /boolean/],
  ]
  for (const [where, message] of wheres) {
    it(`subset where ${JSON.stringify(where)} is a 400 under subset.where and the table is intact`, async () => {
      const before = await peopleCount()
      const res = await post(shapeUrl({ table: 'people', offset: '-1' }), { where })
      if (where.includes('--')) {
        // The comment swallows the rest: a plain, harmless clause.
        expect(res.status).toBe(200)
        expect((res.json() as Subset).data).toEqual([])
      } else {
        expect(res.status, res.text).toBe(400)
        const errors = (res.json() as { errors: { subset: { where: string[] } } }).errors
        expect(errors.subset.where[0]).toMatch(message)
      }
      expect(await peopleCount()).toBe(before)
    })
  }

  it('an error raised on some row is a 400 that quotes no row value', async () => {
    const res = await get(shapeUrl({ table: 'people', offset: '-1', subset__where: '100 / (id - 7) > 0' }))
    expect(res.status).toBe(400)
    const errors = (res.json() as { errors: { subset: string[] } }).errors
    expect(errors.subset[0]).toBe('Postgres raised an error evaluating the subset on some row (SQLSTATE 22012)')
  })
})

describe('large subsets stream', () => {
  it('a subset over 1 MiB streams whole and parses; clients leaving mid-stream free their connections', async () => {
    await cluster.query(`CREATE TABLE wide (id int4 PRIMARY KEY, body text NOT NULL)`)
    await cluster.query(`INSERT INTO wide SELECT i, repeat(md5(i::text), 16) FROM generate_series(1, 6000) i`)
    const url = shapeUrl({ table: 'wide', offset: '-1', subset__where: 'id > $1', subset__params: '{"1":"10"}', subset__order_by: 'id DESC' })
    const res = await get(url)
    expect(res.status).toBe(200)
    expect(res.body.length).toBeGreaterThan(3 * 1024 * 1024)
    expect(res.header('content-length')).toBeUndefined()
    expect(res.header('electric-snapshot')).toBe('true')
    const body = res.json() as Subset
    expect(body.data).toHaveLength(5990)
    expect(body.data[0]!.value['id']).toBe('6000')
    expect(body.data.at(-1)!.value['id']).toBe('11')
    expect(body.data.every((row) => row.headers['snapshot_mark'] === body.metadata.snapshot_mark)).toBe(true)

    // More clients than the subset pool has connections leave after the first bytes.
    for (let i = 0; i < 4; i++) {
      const controller = new AbortController()
      await new Promise<void>((resolve) => {
        const req = httpGet({ host: '127.0.0.1', port: server.port, path: url, signal: controller.signal }, (stream) => {
          stream.once('data', () => {
            controller.abort()
            resolve()
          })
        })
        req.on('error', () => resolve())
      })
    }
    const after = await get(shapeUrl({ table: 'wide', offset: '-1', subset__where: 'id <= 3', subset__order_by: 'id' }))
    expect(after.status).toBe(200)
    expect(ids(after)).toEqual([1, 2, 3])
    // Their transactions ended: no subset connection is left inside one.
    await subsetConnectionsIdle()
  })

  it('clients that leave while their new shape is still being made free their connection too', async () => {
    await cluster.query(`CREATE TABLE wider (id int4 PRIMARY KEY, body text NOT NULL)`)
    await cluster.query(`INSERT INTO wider SELECT i, repeat(md5(i::text), 16) FROM generate_series(1, 30000) i`)
    // Each a new shape (its own where), so the request is still waiting for the shape's snapshot when its
    // client leaves, before the subset's query starts; each subset would be megabytes, streamed.
    for (let i = 0; i < 4; i++) {
      const url = shapeUrl({ table: 'wider', offset: '-1', where: `id > ${i}`, subset__where: 'id > $1', subset__params: '{"1":"10"}', subset__order_by: 'id' })
      const controller = new AbortController()
      const req = httpGet({ host: '127.0.0.1', port: server.port, path: url, signal: controller.signal })
      req.on('error', () => {})
      await new Promise((resolve) => setTimeout(resolve, 20))
      controller.abort()
    }
    // More than the pool's connections were asked for: one left inside a transaction would hold this one up.
    const after = await get(shapeUrl({ table: 'wider', offset: '-1', where: 'id > 0', subset__where: 'id <= 3', subset__order_by: 'id' }))
    expect(after.status).toBe(200)
    expect(ids(after)).toEqual([1, 2, 3])
    await subsetConnectionsIdle()
  })
})

describe('shape resolution', () => {
  it('SSE with a subset is refused', async () => {
    const first = await get(shapeUrl({ table: 'people', offset: '-1' }))
    const res = await get(
      shapeUrl({ table: 'people', offset: first.header('electric-offset')!, handle: first.header('electric-handle')!, live: 'true', live_sse: 'true', subset__where: 'id = 1' }),
    )
    expect(res.status).toBe(400)
    expect(res.json()).toEqual(invalid({ live_sse: ["can't be true for a subset snapshot"] }))
  })

  it('a missing table is Electric’s 400; a handle of another shape is a 409 with the current handle', async () => {
    const missing = await get(shapeUrl({ table: 'nobody', offset: '-1', subset__where: 'id = 1' }))
    expect(missing.status).toBe(400)
    expect(missing.json()).toEqual(invalid({ table: ['Table "public"."nobody" does not exist. If the table name contains capitals or special characters you must quote it.'] }))
    const current = await get(shapeUrl({ table: 'people', offset: '-1' }))
    const stale = await get(shapeUrl({ table: 'people', offset: '0_0', handle: '123-456', subset__where: 'id = 1' }))
    expect(stale.status).toBe(409)
    expect(stale.header('electric-handle')).toBe(current.header('electric-handle'))
    expect(stale.text).toBe('[{"headers":{"control":"must-refetch"}}]')
    const viaPost = await post(shapeUrl({ table: 'people', offset: '0_0', handle: '123-456' }), { where: 'id = 1' })
    expect(viaPost.status).toBe(409)
    expect(viaPost.header('cache-control')).toBe('no-cache')
  })

  it('with the right handle and offset, the subset answers for that shape', async () => {
    const current = await get(shapeUrl({ table: 'people', offset: '-1' }))
    const res = await get(shapeUrl({ table: 'people', offset: current.header('electric-offset')!, handle: current.header('electric-handle')!, subset__where: 'id = 2' }))
    expect(res.status).toBe(200)
    expect(res.header('electric-handle')).toBe(current.header('electric-handle'))
    expect(ids(res)).toEqual([2])
  })
})

describe('log=changes_only: the metadata describes the snapshot', () => {
  it('a transaction open during the subset is in xip, its rows are absent, and its live change carries txids and lsn the client can filter with', async () => {
    await cluster.query('CREATE TABLE tasks (id int4 PRIMARY KEY, title text, done bool NOT NULL DEFAULT false)')
    await cluster.query(`INSERT INTO tasks SELECT i, 't' || i FROM generate_series(1, 10) i`)
    const params = { table: 'tasks', log: 'changes_only' }
    const now = await get(shapeUrl({ ...params, offset: 'now' }))
    expect(now.status).toBe(200)
    const handle = now.header('electric-handle')!

    // A writer holds a transaction open across the subset snapshot.
    const writer = await cluster.connect()
    let openXid: bigint
    try {
      await writer.query('BEGIN')
      await writer.query(`INSERT INTO tasks VALUES (11, 'open during snapshot')`)
      await writer.query(`UPDATE tasks SET title = 'changed while open' WHERE id = 2`)
      openXid = BigInt((await writer.query<{ xid: string }>('SELECT pg_current_xact_id()::text AS xid')).rows[0]!.xid)
      // A later transaction commits meanwhile, so the snapshot's xmax passes the open one and lists it in xip.
      await cluster.query(`INSERT INTO tasks VALUES (12, 'committed meanwhile')`)
      await caughtUp(pipeline, cluster)

      const res = await get(shapeUrl({ ...params, offset: now.header('electric-offset')!, handle, subset__where: 'id <= $1', subset__params: '{"1":"11"}', subset__order_by: 'id' }))
      expect(res.status).toBe(200)
      expect(res.header('electric-handle')).toBe(handle)
      const body = res.json() as Subset
      expect(body.data.map((r) => r.value['id'])).toEqual(['1', '2', '3', '4', '5', '6', '7', '8', '9', '10'])
      expect(body.data.find((r) => r.value['id'] === '2')!.value['title']).toBe('t2')
      const snapshot = { xmin: BigInt(body.metadata.xmin), xmax: BigInt(body.metadata.xmax), xip: body.metadata.xip_list.map(BigInt) }
      // In progress when the snapshot was taken. (Postgres sets xmax to the latest completed xid + 1, so an open
      // xid above every finished one would be at or past xmax instead; the commit above rules that out.)
      expect(openXid < snapshot.xmax, JSON.stringify(body.metadata)).toBe(true)
      expect(body.metadata.xip_list).toContain(String(openXid))
      expect(isFullXidVisible(snapshot, openXid)).toBe(false)
      await writer.query('COMMIT')

      // A transaction committed after the snapshot: after xmax, past database_lsn.
      await cluster.query(`UPDATE tasks SET done = true WHERE id = 3`)
      const after = BigInt((await cluster.query<{ xid: string }>('SELECT pg_current_xact_id()::text AS xid')).rows[0]!.xid)
      expect(after >= snapshot.xmax).toBe(true)
      await caughtUp(pipeline, cluster)

      // Following the stream from electric-offset gives both transactions, each with txids and lsn.
      const follow = await get(shapeUrl({ ...params, offset: res.header('electric-offset')!, handle }))
      expect(follow.status).toBe(200)
      const changes = messages(follow).filter((m) => m.headers['operation'] !== undefined)
      const databaseLsn = BigInt(body.metadata.database_lsn)
      for (const change of changes) {
        const txids = change.headers['txids'] as number[]
        expect(txids).toHaveLength(1)
        // Neither transaction is visible in the snapshot: the client keeps their changes.
        expect(isFullXidVisible(snapshot, widenXid(snapshot, txids[0]!))).toBe(false)
        expect(BigInt(change.headers['lsn'] as string) >= databaseLsn || !isFullXidVisible(snapshot, widenXid(snapshot, txids[0]!))).toBe(true)
      }
      expect(changes.map((m) => [m.headers['operation'], m.key])).toEqual([
        ['insert', '"public"."tasks"/"11"'],
        ['update', '"public"."tasks"/"2"'],
        ['update', '"public"."tasks"/"3"'],
      ])
      expect(changes[0]!.headers['txids']).toEqual([Number(openXid & 0xffffffffn)])
    } finally {
      await writer.end()
    }
  })

  it('a transaction committed before the subset is visible in it and is not past electric-offset', async () => {
    await cluster.query('CREATE TABLE notes (id int4 PRIMARY KEY, body text)')
    const params = { table: 'notes', log: 'changes_only' }
    const now = await get(shapeUrl({ ...params, offset: 'now' }))
    const handle = now.header('electric-handle')!
    await cluster.query(`INSERT INTO notes VALUES (1, 'before')`)
    const xid = BigInt((await cluster.query<{ xid: string }>('SELECT max(xmin::text::int8)::text AS xid FROM notes')).rows[0]!.xid)
    await caughtUp(pipeline, cluster)
    const res = await get(shapeUrl({ ...params, offset: now.header('electric-offset')!, handle, subset__where: 'id = 1' }))
    const body = res.json() as Subset
    expect(body.data.map((r) => r.value)).toEqual([{ id: '1', body: 'before' }])
    const snapshot = { xmin: BigInt(body.metadata.xmin), xmax: BigInt(body.metadata.xmax), xip: body.metadata.xip_list.map(BigInt) }
    expect(isFullXidVisible(snapshot, widenXid(snapshot, Number(xid)))).toBe(true)
    // The insert is at or before electric-offset: the stream from there does not repeat it.
    const follow = await get(shapeUrl({ ...params, offset: res.header('electric-offset')!, handle }))
    expect(follow.status).toBe(200)
    expect(messages(follow).filter((m) => m.headers['operation'] !== undefined)).toEqual([])
  })

  it('@electric-sql/client: requestSnapshot on a changes_only ShapeStream materialises the subset rows, then live changes', async () => {
    await cluster.query('CREATE TABLE cards (id int8 PRIMARY KEY, label text NOT NULL, rank int4)')
    await cluster.query(`INSERT INTO cards SELECT i, 'c' || i, 100 - i FROM generate_series(1, 20) i`)
    const stream = new ShapeStream<{ id: bigint; label: string; rank: number | null }>({
      url: `http://127.0.0.1:${server.port}/v1/shape`,
      params: { table: 'cards' },
      log: 'changes_only',
    })
    const rows = new Map<string, Record<string, unknown>>()
    const seen: string[] = []
    const unsubscribe = stream.subscribe((batch) => {
      for (const message of batch) {
        if (!('key' in message)) continue
        const op = message.headers.operation
        seen.push(`${op}:${String(message.value.id)}`)
        if (op === 'delete') rows.delete(message.key)
        else rows.set(message.key, { ...(rows.get(message.key) ?? {}), ...message.value })
      }
    })
    try {
      const got = await stream.requestSnapshot({ where: 'rank >= $1', params: { '1': 90 }, orderBy: 'rank DESC', limit: 5 })
      expect(got.data.map((m) => m.value.id)).toEqual([1n, 2n, 3n, 4n, 5n])
      expect(got.data[0]!.value).toEqual({ id: 1n, label: 'c1', rank: 99 })
      const viaPost = await stream.fetchSnapshot({ where: 'id = $1', params: { '1': 7n }, method: 'POST' })
      expect(viaPost.data.map((m) => m.value)).toEqual([{ id: 7n, label: 'c7', rank: 93 }])

      await cluster.query(`UPDATE cards SET label = 'live' WHERE id = 2`)
      const deadline = Date.now() + 20_000
      while (rows.get('"public"."cards"/"2"')?.['label'] !== 'live') {
        if (Date.now() > deadline) throw new Error(`the live update never arrived; seen ${seen.join(' ')}`)
        await new Promise((resolve) => setTimeout(resolve, 50))
      }
      expect([...rows.keys()].sort()).toEqual([1, 2, 3, 4, 5].map((i) => `"public"."cards"/"${i}"`).sort())
      expect(rows.get('"public"."cards"/"2"')).toEqual({ id: 2n, label: 'live', rank: 98 })
    } finally {
      unsubscribe()
      stream.unsubscribeAll()
    }
  })
})

describe('a subset whose client stops reading', () => {
  it('is cut once the client has taken nothing for the send timeout, and its snapshot is given up', async () => {
    // About 20 MB of rows: more than loopback's socket buffers hold, so the subset streams and waits on the client.
    await cluster.query(`CREATE TABLE subset_big (id int PRIMARY KEY, body text); INSERT INTO subset_big SELECT i, repeat(md5(i::text), 32) FROM generate_series(1, 20000) i`)
    const own = await startServer(pipeline, { sendTimeoutMs: 300 })
    const connections = (): Promise<number> => new Promise((resolve, reject) => own.app.server.getConnections((error, n) => (error ? reject(error) : resolve(n))))
    try {
      const socket = connect(own.port, '127.0.0.1')
      socket.on('error', () => {})
      socket.write(`GET ${shapeUrl({ table: 'subset_big', offset: '-1', subset__where: 'id > 0' })} HTTP/1.1\r\nHost: x\r\n\r\n`)
      await once(socket, 'data')
      socket.pause()
      // The server closes its side while this end still holds the connection open, reading nothing.
      for (const until = Date.now() + 10_000; (await connections()) > 0 && Date.now() < until; ) await new Promise((r) => setTimeout(r, 50))
      expect(await connections()).toBe(0)
      socket.destroy()
      // The subset's query and transaction ended with it: no session is busy with the table any more.
      const active = async (): Promise<number> =>
        (await cluster.query<{ n: number }>(`SELECT count(*)::int AS n FROM pg_stat_activity WHERE state <> 'idle' AND query ILIKE '%subset_big%' AND pid <> pg_backend_pid()`)).rows[0]!.n
      for (const until = Date.now() + 10_000; (await active()) > 0 && Date.now() < until; ) await new Promise((r) => setTimeout(r, 50))
      expect(await active()).toBe(0)
      const again = await call(own.port, shapeUrl({ table: 'subset_big', offset: '-1', subset__where: 'id < 3' }))
      expect(again.status).toBe(200)
      expect(ids(again).sort((a, b) => a - b)).toEqual([1, 2])
    } finally {
      await own.close()
    }
  })
})
