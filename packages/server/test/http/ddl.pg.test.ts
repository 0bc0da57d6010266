import { CacheControl, MUST_REFETCH_BODY } from '@sluice/protocol'
import { useTempDir, usePostgres } from '@sluice/test-utils'
import { setTimeout as sleep } from 'node:timers/promises'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { Pipeline } from '../../src/pipeline.js'
import { startPipeline } from '../pipeline/harness.js'
import { type Res, type TestServer, call, messages, shapeUrl, startServer } from './http-harness.js'

/**
 * How shapes react to DDL on their table (docs/protocol.md §5.4): a change of
 * a row's key or of the columns that arrive, a dropped or renamed table. On a
 * real server over a real pipeline and Postgres. The long-poll timeout is long
 * on purpose: a waiting request that gets its answer from the timeout is a 200
 * up-to-date, so a 409 shows the DDL itself ended the wait.
 */

const cluster = usePostgres()
const dirs = useTempDir('http-ddl')
let pipeline: Pipeline
let server: TestServer
const LONG_POLL_MS = 60_000
const TEST_TIMEOUT_MS = 90_000

beforeAll(async () => {
  pipeline = await startPipeline(cluster, await dirs.make('store'))
  server = await startServer(pipeline, { longPollTimeoutMs: LONG_POLL_MS, allowDelete: true })
})

afterAll(async () => {
  await server?.close()
  await pipeline?.stop()
})

const get = (path: string): Promise<Res> => call(server.port, path)

/** `-1`, then on until up-to-date: the shape's handle, offset, schema and rows by key. */
async function sync(table: string): Promise<{ handle: string; offset: string; schema: Record<string, Record<string, unknown>>; rows: Map<string, unknown> }> {
  let res = await get(shapeUrl({ table, offset: '-1' }))
  expect(res.status).toBe(200)
  const handle = res.header('electric-handle')!
  const schema = JSON.parse(res.header('electric-schema')!) as Record<string, Record<string, unknown>>
  const rows = new Map<string, unknown>()
  for (let i = 0; ; i++) {
    expect(res.status).toBe(200)
    for (const m of messages(res)) {
      if (m.key === undefined) continue
      if (m.headers['operation'] === 'delete') rows.delete(m.key)
      else rows.set(m.key, { ...(rows.get(m.key) as object | undefined), ...m.value })
    }
    if (res.header('electric-up-to-date') !== undefined) break
    if (i > 100) throw new Error('never up-to-date')
    res = await get(shapeUrl({ table, offset: res.header('electric-offset')!, handle }))
  }
  return { handle, offset: res.header('electric-offset')!, schema, rows }
}

/** A long-poll on the shape, once it is parked on the server (so DDL after this call happens while it waits). */
async function parkedLongPoll(table: string, handle: string, offset: string): Promise<Res> {
  const pending = get(shapeUrl({ table, offset, handle, live: 'true' }))
  // A parked long-poll holds no Postgres resource to observe; give it a moment to reach its wait.
  await sleep(100)
  return pending
}

function expectRefetch(res: Res, oldHandle: string): string | undefined {
  expect(res.status).toBe(409)
  expect(res.text).toBe(MUST_REFETCH_BODY)
  const fresh = res.header('electric-handle')
  if (fresh === undefined) expect(res.header('cache-control')).toBe(CacheControl.conflictWithoutHandle)
  else expect(fresh).not.toBe(oldHandle)
  return fresh
}

async function replicaIdentity(table: string): Promise<string> {
  const { rows } = await cluster.query<{ r: string }>(`SELECT relreplident::text AS r FROM pg_class WHERE oid = $1::regclass`, [table])
  return rows[0]!.r
}

describe('a change of a row’s key invalidates the table’s shapes', () => {
  it('a new primary key: the waiting long-poll gets 409, and the new shape keys rows by it and names it in its schema', { timeout: TEST_TIMEOUT_MS }, async () => {
    await cluster.query(`CREATE TABLE pk_t (id int4 PRIMARY KEY, a text NOT NULL); INSERT INTO pk_t VALUES (1, 'x')`)
    const before = await sync('pk_t')
    expect(before.schema['id']).toMatchObject({ pk_index: 0 })
    const waiting = parkedLongPoll('pk_t', before.handle, before.offset)
    // With the new key, (1, 'y') is a second row, not an update of (1, 'x').
    await cluster.query(`ALTER TABLE pk_t DROP CONSTRAINT pk_t_pkey, ADD PRIMARY KEY (id, a); INSERT INTO pk_t VALUES (1, 'y')`)
    expectRefetch(await waiting, before.handle)
    expectRefetch(await get(shapeUrl({ table: 'pk_t', offset: before.offset, handle: before.handle })), before.handle)
    const after = await sync('pk_t')
    expect(after.handle).not.toBe(before.handle)
    expect([...after.rows.keys()].sort()).toEqual(['"public"."pk_t"/"1"/"x"', '"public"."pk_t"/"1"/"y"'])
    expect(after.schema['id']).toMatchObject({ pk_index: 0 })
    expect(after.schema['a']).toMatchObject({ pk_index: 1 })
  })

  it('a new primary key with no write after it: a fresh offset=-1 gets a new shape, not the stale one', { timeout: TEST_TIMEOUT_MS }, async () => {
    await cluster.query(`CREATE TABLE pk_quiet (id int4 PRIMARY KEY, a text NOT NULL); INSERT INTO pk_quiet VALUES (1, 'x')`)
    const before = await sync('pk_quiet')
    await cluster.query(`ALTER TABLE pk_quiet DROP CONSTRAINT pk_quiet_pkey, ADD PRIMARY KEY (a)`)
    const after = await sync('pk_quiet')
    expect(after.handle).not.toBe(before.handle)
    expect([...after.rows.keys()]).toEqual(['"public"."pk_quiet"/"x"'])
    expect(after.schema['a']).toMatchObject({ pk_index: 0 })
    expect(after.schema['id']).not.toHaveProperty('pk_index')
  })

  it('a REPLICA IDENTITY change: the waiting long-poll gets 409, and the new shape has FULL back', { timeout: TEST_TIMEOUT_MS }, async () => {
    await cluster.query(`CREATE TABLE ri_t (id int4 PRIMARY KEY, a text); INSERT INTO ri_t VALUES (1, 'x')`)
    const before = await sync('ri_t')
    expect(await replicaIdentity('ri_t')).toBe('f')
    const waiting = parkedLongPoll('ri_t', before.handle, before.offset)
    // No write follows: nothing in the replication stream says the table changed.
    await cluster.query(`ALTER TABLE ri_t REPLICA IDENTITY DEFAULT`)
    expectRefetch(await waiting, before.handle)
    const after = await sync('ri_t')
    expect(after.handle).not.toBe(before.handle)
    expect(await replicaIdentity('ri_t')).toBe('f')
  })
})

describe('a dropped or renamed table ends its shapes at once', () => {
  it('DROP TABLE: the waiting long-poll and the old handle get 409; expired_handle gets 503 + retry-after until the table is back', { timeout: TEST_TIMEOUT_MS }, async () => {
    await cluster.query(`CREATE TABLE gone_t (id int4 PRIMARY KEY, v text); INSERT INTO gone_t VALUES (1, 'a')`)
    const before = await sync('gone_t')
    const waiting = parkedLongPoll('gone_t', before.handle, before.offset)
    await cluster.query(`DROP TABLE gone_t`)
    const res = await waiting
    expect(expectRefetch(res, before.handle)).toBeUndefined()
    // The client that followed the shape: 409, never a 400 it cannot handle.
    expect(expectRefetch(await get(shapeUrl({ table: 'gone_t', offset: before.offset, handle: before.handle })), before.handle)).toBeUndefined()
    // A subset snapshot of that shape (the official client's requestSnapshot names its handle): 409 too.
    expect(expectRefetch(await get(shapeUrl({ table: 'gone_t', offset: before.offset, handle: before.handle, subset__where: 'id > 0' })), before.handle)).toBeUndefined()
    // Its refetch (the official client sends the retired handle as expired_handle): retry later.
    const refetch = await get(shapeUrl({ table: 'gone_t', offset: '-1', expired_handle: before.handle }))
    expect(refetch.status).toBe(503)
    expect(Number(refetch.header('retry-after'))).toBeGreaterThan(0)
    expect(refetch.json()).toHaveProperty('message')
    // A request that never followed a shape of it: the table does not exist.
    expect((await get(shapeUrl({ table: 'gone_t', offset: '-1' }))).status).toBe(400)
    await cluster.query(`CREATE TABLE gone_t (id int4 PRIMARY KEY, v text); INSERT INTO gone_t VALUES (2, 'b')`)
    const back = await get(shapeUrl({ table: 'gone_t', offset: '-1', expired_handle: before.handle }))
    expect(back.status).toBe(200)
    expect(back.header('electric-handle')).not.toBe(before.handle)
    expect(messages(back).map((m) => m.key)).toContain('"public"."gone_t"/"2"')
  })

  it('a shape deleted on request, then its table dropped: expired_handle gets 503, the old handle 409', { timeout: TEST_TIMEOUT_MS }, async () => {
    await cluster.query(`CREATE TABLE deleted_t (id int4 PRIMARY KEY); INSERT INTO deleted_t VALUES (1)`)
    const before = await sync('deleted_t')
    expect((await call(server.port, shapeUrl({ handle: before.handle }), { method: 'DELETE' })).status).toBe(202)
    await cluster.query(`DROP TABLE deleted_t`)
    expectRefetch(await get(shapeUrl({ table: 'deleted_t', offset: before.offset, handle: before.handle })), before.handle)
    const refetch = await get(shapeUrl({ table: 'deleted_t', offset: '-1', expired_handle: before.handle }))
    expect(refetch.status).toBe(503)
    expect(Number(refetch.header('retry-after'))).toBeGreaterThan(0)
  })

  it('ALTER TABLE … RENAME: the waiting long-poll gets 409; the new name is a new shape with the rows', { timeout: TEST_TIMEOUT_MS }, async () => {
    await cluster.query(`CREATE TABLE old_name (id int4 PRIMARY KEY); INSERT INTO old_name VALUES (1)`)
    const before = await sync('old_name')
    const waiting = parkedLongPoll('old_name', before.handle, before.offset)
    await cluster.query(`ALTER TABLE old_name RENAME TO new_name`)
    expectRefetch(await waiting, before.handle)
    const renamed = await sync('new_name')
    expect([...renamed.rows.keys()]).toEqual(['"public"."new_name"/"1"'])
  })

  it('a table dropped while its shape is being created: 4xx or 409, never 500', { timeout: TEST_TIMEOUT_MS }, async () => {
    // Two places a creation can wait on the table: setting REPLICA IDENTITY FULL (a table not yet
    // published) and the snapshot's share lock (a table already published with FULL).
    await cluster.query(`CREATE TABLE drop_pub (id int4 PRIMARY KEY); INSERT INTO drop_pub VALUES (1);
                         CREATE TABLE drop_snap (id int4 PRIMARY KEY); INSERT INTO drop_snap VALUES (1);
                         ALTER TABLE drop_snap REPLICA IDENTITY FULL; ALTER PUBLICATION sluice_publication ADD TABLE drop_snap`)
    for (const table of ['drop_pub', 'drop_snap']) {
      const locker = await cluster.connect()
      try {
        await locker.query(`BEGIN; LOCK TABLE ${table} IN ACCESS EXCLUSIVE MODE`)
        const pending = get(shapeUrl({ table, offset: '-1' }))
        // Drop only once the creation waits on the lock.
        for (;;) {
          const { rows } = await cluster.query(`SELECT 1 FROM pg_locks WHERE NOT granted AND relation = $1::regclass`, [table])
          if (rows.length > 0) break
          await sleep(10)
        }
        await locker.query(`DROP TABLE ${table}; COMMIT`)
        const res = await pending
        expect(res.status === 409 || (res.status >= 400 && res.status < 500), `${table}: ${res.status} ${res.text}`).toBe(true)
      } finally {
        await locker.end()
      }
    }
  })
})
