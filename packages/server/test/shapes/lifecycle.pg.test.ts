import { existsSync, readdirSync } from 'node:fs'
import { join } from 'node:path'
import { MUST_REFETCH_BODY } from '@sluice/protocol'
import { shapeDir as logDir } from '@sluice/storage'
import { useTempDir, usePostgres } from '@sluice/test-utils'
import type { Offset } from '@electric-sql/client'
import { afterEach, describe, expect, it } from 'vitest'
import type { BuildAppOptions } from '../../src/http/index.js'
import { ServerMetrics } from '../../src/metrics.js'
import type { Pipeline, PipelineOptions } from '../../src/pipeline.js'
import { type SchemaEntry, expectedClientRows } from '../compat/client-values.js'
import { type RecordedExchange, eventually, openStream, rowKey, shapeOf } from '../compat/compat-harness.js'
import { type Res, type TestServer, call, shapeUrl, startServer } from '../http/http-harness.js'
import { caughtUp, startPipeline } from '../pipeline/harness.js'

/**
 * The shape lifecycle (docs/operations.md, "Shape lifecycle") on a real
 * pipeline, real HTTP and a real Postgres: shapes unused for the TTL expire
 * (files gone, 409 for a client that comes back, the official client
 * refetching to Postgres's rows), shapes with waiting live requests do not;
 * past --max-shapes the least recently used go first, idle ones before those
 * with waiters, whose requests get 409; and the creation limits answer 429
 * and 503 with retry-after and a JSON body naming the code.
 */

const cluster = usePostgres()
const dirs = useTempDir('lifecycle')

const SCHEMA: Record<string, SchemaEntry> = {
  id: { type: 'int4', pk_index: 0, not_null: true },
  n: { type: 'int4' },
}

let running: Array<{ pipeline: Pipeline; server: TestServer }> = []
afterEach(async () => {
  for (const { pipeline, server } of running) {
    await server.close()
    await pipeline.stop()
  }
  running = []
})

async function start(pipelineOptions: Partial<PipelineOptions>, http: BuildAppOptions['http'] = {}): Promise<{ pipeline: Pipeline; server: TestServer; dir: string; get: (path: string, headers?: Record<string, string>) => Promise<Res> }> {
  const dir = await dirs.make('store')
  const pipeline = await startPipeline(cluster, dir, pipelineOptions)
  const server = await startServer(pipeline, { longPollTimeoutMs: 3000, ...http })
  running.push({ pipeline, server })
  return { pipeline, server, dir, get: (path, headers = {}) => call(server.port, path, { headers }) }
}

let tables = 0
async function createTable(rows = 20): Promise<string> {
  const name = `life_${++tables}`
  await cluster.query(`CREATE TABLE ${name} (id int4 PRIMARY KEY, n int4); INSERT INTO ${name} SELECT i, i FROM generate_series(1, ${rows}) i;`)
  return name
}

/** Creates the shape `where` selects and reads it to up-to-date; its handle and the offset reached. */
async function follow(get: (path: string) => Promise<Res>, table: string, where: string): Promise<{ handle: string; offset: string }> {
  let res = await get(shapeUrl({ table, offset: '-1', where }))
  expect(res.status).toBe(200)
  const handle = res.header('electric-handle')!
  while (res.header('electric-up-to-date') === undefined) {
    res = await get(shapeUrl({ table, offset: res.header('electric-offset')!, handle, where }))
    expect(res.status).toBe(200)
  }
  return { handle, offset: res.header('electric-offset')! }
}

const shapeDir = (dir: string, handle: string): string => logDir(join(dir, 'logs'), handle)

/**
 * Expiry's clock, moved by the test: nothing expires by the machine's speed,
 * only when the test lets the TTL pass (twice: a sweep pairs the clock with
 * the uses so far, and the next one a TTL later finds them old).
 */
const TTL_MS = 1000
function manualClock(): { readonly now: () => number; pass(pipeline: Pipeline): Promise<void> } {
  let at = 0
  return {
    now: () => at,
    async pass(pipeline) {
      for (let i = 0; i < 2; i++) {
        at += TTL_MS
        await pipeline.shapes.sweep()
      }
    },
  }
}

async function expireUnused(pipeline: Pipeline, clock: ReturnType<typeof manualClock>, handle: string): Promise<void> {
  // A timer's sweep may be running with the clock as it was: pass the TTL until the shape is gone.
  await eventually(async () => {
    await clock.pass(pipeline)
    return pipeline.shapes.status(handle) !== 'active'
  }, 'the shape to expire')
}

describe('expiry', () => {
  it('a shape unused for the TTL expires: its files go, and a client that comes back gets 409 and the new handle', async () => {
    const clock = manualClock()
    const { pipeline, dir, get } = await start({ shapeTtlMs: TTL_MS, shapeClock: clock.now })
    const table = await createTable()
    const { handle, offset } = await follow(get, table, 'n > 5')
    expect(existsSync(shapeDir(dir, handle))).toBe(true)

    await expireUnused(pipeline, clock, handle)
    expect(pipeline.shapes.size).toBe(0)
    expect(pipeline.shapes.stats().expired).toBe(1)
    expect(existsSync(shapeDir(dir, handle))).toBe(false)
    // Trash is emptied in the background.
    await eventually(() => readdirSync(join(dir, 'logs', 'trash')).length === 0, 'the trash to be emptied')

    const back = await get(shapeUrl({ table, offset, handle, where: 'n > 5' }))
    expect(back.status).toBe(409)
    expect(back.text).toBe(MUST_REFETCH_BODY)
    const next = back.header('electric-handle')
    expect(next).toBeDefined()
    expect(next).not.toBe(handle)
    // The retired handle stays retired: a live request naming it gets 409 too, never a 400.
    const live = await get(shapeUrl({ table, offset, handle, where: 'n > 5', live: 'true' }))
    expect(live.status).toBe(409)
  })

  it('a shape a live request waits on does not expire; an unused one beside it does', async () => {
    const clock = manualClock()
    const { pipeline, server, get } = await start({ shapeTtlMs: TTL_MS, shapeClock: clock.now }, { longPollTimeoutMs: 60_000 })
    const table = await createTable()
    const busy = await follow(get, table, 'n > 1')
    const idle = await follow(get, table, 'n > 2')
    const parked = call(server.port, shapeUrl({ table, offset: busy.offset, handle: busy.handle, where: 'n > 1', live: 'true' }))
    await eventually(() => pipeline.shapes.waitedOn(busy.handle), 'the long-poll to park')
    await expireUnused(pipeline, clock, idle.handle)
    // Many TTLs later the waited-on shape is still there.
    for (let i = 0; i < 5; i++) await clock.pass(pipeline)
    expect(pipeline.shapes.stats().expired).toBe(1)
    expect(pipeline.shapes.status(busy.handle)).toBe('active')
    await cluster.query(`UPDATE ${table} SET n = n + 100 WHERE id = 3`)
    const woken = await parked
    expect(woken.status).toBe(200)
  })

  it('the official client following an expired shape comes back, refetches and ends equal to Postgres', async () => {
    const clock = manualClock()
    const { pipeline, server, get } = await start({ shapeTtlMs: TTL_MS, shapeClock: clock.now })
    const table = await createTable(30)
    const where = 'n <= 20'
    const url = `http://127.0.0.1:${server.port}/v1/shape`
    const { handle, offset } = await follow(get, table, where)
    await expireUnused(pipeline, clock, handle)
    // Rows change while the client is away.
    await cluster.query(`DELETE FROM ${table} WHERE id = 1; UPDATE ${table} SET n = 0 WHERE id = 25; INSERT INTO ${table} VALUES (100, 7)`)
    await caughtUp(pipeline, cluster)

    const exchanges: RecordedExchange[] = []
    const { stream, abort } = openStream(url, { params: { table, where }, handle, offset: offset as Offset }, exchanges)
    try {
      const shape = shapeOf(stream)
      const expected = await expectedClientRows(cluster, table, SCHEMA, (r) => rowKey('public', table, r['id']!), where)
      await eventually(() => shape.isUpToDate && shape.currentValue.size === expected.size, 'the client to catch up')
      expect(new Map(shape.currentValue)).toEqual(expected)
      expect(exchanges[0]!.status).toBe(409)
      expect(exchanges.some((e) => e.url.searchParams.get('offset') === '-1' && e.status === 200)).toBe(true)
    } finally {
      abort.abort()
    }
  })
})

describe('eviction past --max-shapes', () => {
  it('evicts the least recently used shape, and a client that comes back gets 409', async () => {
    const { pipeline, dir, get } = await start({ maxShapes: 3, shapeTtlMs: 0 })
    const table = await createTable()
    const a = await follow(get, table, 'n > 1')
    const b = await follow(get, table, 'n > 2')
    const c = await follow(get, table, 'n > 3')
    // A used again: B is now the least recently used.
    expect((await get(shapeUrl({ table, offset: a.offset, handle: a.handle, where: 'n > 1' }))).status).toBe(200)
    await follow(get, table, 'n > 4')
    expect(pipeline.shapes.status(b.handle)).toBe('expired')
    expect(pipeline.shapes.status(a.handle)).toBe('active')
    expect(pipeline.shapes.status(c.handle)).toBe('active')
    expect(existsSync(shapeDir(dir, b.handle))).toBe(false)
    // C used again: A goes next.
    expect((await get(shapeUrl({ table, offset: c.offset, handle: c.handle, where: 'n > 3' }))).status).toBe(200)
    await follow(get, table, 'n > 5')
    expect(pipeline.shapes.status(a.handle)).toBe('expired')
    expect(pipeline.shapes.status(c.handle)).toBe('active')
    expect(pipeline.shapes.size).toBe(3)
    expect(pipeline.shapes.stats().evicted).toBe(2)
    const metrics = new ServerMetrics({ pipeline, connectionString: cluster.url, slotName: 'sluice_slot', defaultMetrics: false })
    try {
      const text = await metrics.registry.metrics()
      expect(text).toMatch(/^sluice_shapes_evicted_total 2$/m)
      expect(text).toMatch(/^sluice_shapes_expired_total 0$/m)
    } finally {
      await metrics.close()
    }

    const back = await get(shapeUrl({ table, offset: b.offset, handle: b.handle, where: 'n > 2' }))
    expect(back.status).toBe(409)
    expect(back.text).toBe(MUST_REFETCH_BODY)
  })

  it('evicts idle shapes before shapes with waiting live requests; those get 409 when nothing else can go', async () => {
    const { pipeline, server, get } = await start({ maxShapes: 2, shapeTtlMs: 0 }, { longPollTimeoutMs: 60_000 })
    const table = await createTable()
    const waited = await follow(get, table, 'n > 1')
    const idle = await follow(get, table, 'n > 2')
    const parked = call(server.port, shapeUrl({ table, offset: waited.offset, handle: waited.handle, where: 'n > 1', live: 'true' }))
    await eventually(() => pipeline.shapes.waitedOn(waited.handle), 'the long-poll to park')
    // The waited-on shape is the least recently used, but the idle one goes.
    const third = await follow(get, table, 'n > 3')
    expect(pipeline.shapes.status(idle.handle)).toBe('expired')
    expect(pipeline.shapes.status(waited.handle)).toBe('active')

    // Now the only other shape has a waiter: it is evicted, and its waiter gets 409 at once.
    const secondParked = call(server.port, shapeUrl({ table, offset: third.offset, handle: third.handle, where: 'n > 3', live: 'true' }))
    await eventually(() => pipeline.shapes.waitedOn(third.handle), 'the second long-poll to park')
    await follow(get, table, 'n > 4')
    const first = await parked
    expect(first.status).toBe(409)
    expect(first.text).toBe(MUST_REFETCH_BODY)
    // Its replacement would have evicted another shape: none is named.
    expect(first.header('electric-handle')).toBeUndefined()
    expect(pipeline.shapes.status(third.handle)).toBe('active')
    expect(pipeline.shapes.size).toBe(2)
    await cluster.query(`UPDATE ${table} SET n = n + 100 WHERE id = 5`)
    expect((await secondParked).status).toBe(200)
  })
})

describe('creation limits', () => {
  it('answers 429 shape_rate_limited with retry-after past --client-shapes-per-minute, per client id header', async () => {
    const { get } = await start({ shapeTtlMs: 0 }, { clientShapesPerMinute: 2, clientIdHeader: 'x-client-id' })
    const table = await createTable()
    const as = (id: string) => ({ 'x-client-id': id })
    expect((await get(shapeUrl({ table, offset: '-1', where: 'n > 1' }), as('alice'))).status).toBe(200)
    expect((await get(shapeUrl({ table, offset: '-1', where: 'n > 2' }), as('alice'))).status).toBe(200)
    const refused = await get(shapeUrl({ table, offset: '-1', where: 'n > 3' }), as('alice'))
    expect(refused.status).toBe(429)
    expect(refused.json()).toEqual({ code: 'shape_rate_limited', message: 'Too many new shapes from this client (limit: 2 per minute), please retry later' })
    // One token back takes half a minute at two a minute.
    expect(Number(refused.header('retry-after'))).toBeGreaterThanOrEqual(1)
    expect(Number(refused.header('retry-after'))).toBeLessThanOrEqual(30)
    expect(refused.header('cache-control')).toBe('no-store')
    // Shapes that exist are served to the same client: only new ones count.
    expect((await get(shapeUrl({ table, offset: '-1', where: 'n > 1' }), as('alice'))).status).toBe(200)
    // Another client has a bucket of its own.
    expect((await get(shapeUrl({ table, offset: '-1', where: 'n > 3' }), as('bob'))).status).toBe(200)
  })

  it('answers 503 creation_limit_exceeded with retry-after past --max-creating-shapes (no queue)', async () => {
    const { pipeline, server, get } = await start({ shapeTtlMs: 0 }, { maxCreatingShapes: 1, initialQueueLength: 0 })
    const table = await createTable()
    // Published first, so the next creation gets as far as its snapshot, which the lock holds.
    await follow(get, table, 'n > 0')
    const locker = await cluster.connect()
    try {
      await locker.query('BEGIN')
      await locker.query(`LOCK TABLE ${table} IN ACCESS EXCLUSIVE MODE`)
      const held = call(server.port, shapeUrl({ table, offset: '-1', where: 'n > 1' }))
      await eventually(() => pipeline.shapes.stats().creating === 1, 'a shape being created')
      const refused = await get(shapeUrl({ table, offset: '-1', where: 'n > 2' }))
      expect(refused.status).toBe(503)
      expect(refused.json()).toEqual({ code: 'creation_limit_exceeded', message: 'Too many shapes being created at once (limit: 1), please retry' })
      const retryAfter = Number(refused.header('retry-after'))
      expect(retryAfter).toBeGreaterThanOrEqual(1)
      expect(retryAfter).toBeLessThanOrEqual(5)
      // Existing shapes are still served.
      expect((await get(shapeUrl({ table, offset: '-1', where: 'n > 0' }))).status).toBe(200)
      await locker.query('COMMIT')
      expect((await held).status).toBe(200)
      // The creation ended: the next one is admitted.
      expect((await get(shapeUrl({ table, offset: '-1', where: 'n > 2' }))).status).toBe(200)
    } finally {
      await locker.query('ROLLBACK').catch(() => {})
      await locker.end()
    }
  })
})
