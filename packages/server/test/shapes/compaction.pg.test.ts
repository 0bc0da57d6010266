import type { AddressInfo } from 'node:net'
import { useTempDir, usePostgres } from '@sluice/test-utils'
import type { FastifyInstance } from 'fastify'
import { afterEach, describe, expect, it } from 'vitest'
import { buildApp } from '../../src/http/index.js'
import type { Pipeline } from '../../src/pipeline.js'
import { handleOfLogId } from '../../src/shapes/compaction/log-ids.js'
import { type SchemaEntry, expectedClientRows } from '../compat/client-values.js'
import { type RecordedExchange, StreamLog, eventually, openStream, rowKey, shapeOf } from '../compat/compat-harness.js'
import { caughtUp, startPipeline } from '../pipeline/harness.js'
import { type RawClient, pgTextRows, rawClient, rawSync } from './raw-client.js'

/**
 * Background compaction with real parts: Postgres, the pipeline, HTTP, the
 * official client. A shape's history is compacted; a client that synced
 * before it resumes from an offset inside the compacted part, new clients
 * download about the current rows, a client following live sees nothing but
 * changes, and a restart (with the old log not yet deleted) restores the
 * compacted log. Every client ends equal to Postgres.
 */

const cluster = usePostgres()
const dirs = useTempDir('compaction')
const running: Array<{ app: FastifyInstance; pipeline: Pipeline }> = []

afterEach(async () => {
  for (const s of running.splice(0)) {
    await s.app.close()
    await s.pipeline.stop()
  }
})

const SCHEMA: Record<string, SchemaEntry> = {
  id: { type: 'int4', pk_index: 0, not_null: true },
  v: { type: 'text' },
  n: { type: 'int4' },
  pad: { type: 'text' },
}

async function start(storageDir: string, options: Parameters<typeof startPipeline>[2] = {}, port = 0): Promise<{ pipeline: Pipeline; url: string; app: FastifyInstance }> {
  const pipeline = await startPipeline(cluster, storageDir, { chunkBytes: 2048, compactRatio: 0, ...options })
  const app = buildApp({ shapes: pipeline.shapeService, http: { longPollTimeoutMs: 1000 } })
  await app.listen({ port, host: '127.0.0.1' })
  running.push({ app, pipeline })
  return { pipeline, app, url: `http://127.0.0.1:${(app.server.address() as AddressInfo).port}/v1/shape` }
}

async function stop(server: { app: FastifyInstance; pipeline: Pipeline }): Promise<void> {
  running.splice(running.findIndex((s) => s.pipeline === server.pipeline), 1)
  await server.app.close()
  await server.pipeline.stop()
}

/** Rounds of updates (some of one column only), deletes, inserts and primary-key changes. */
async function history(table: string, rounds: number, from: number): Promise<void> {
  for (let r = from; r < from + rounds; r++) {
    await cluster.query(`UPDATE ${table} SET n = (n * 7 + ${r}) % 100 WHERE id % 3 = ${r % 3}`)
    await cluster.query(`UPDATE ${table} SET v = 'v${r}-' || id WHERE id % 5 = ${r % 5}`)
    if (r % 4 === 0) await cluster.query(`DELETE FROM ${table} WHERE id = (SELECT min(id) FROM ${table} WHERE id % 7 = ${r % 7})`)
    if (r % 3 === 0) await cluster.query(`INSERT INTO ${table} VALUES (${1000 + r}, 'new${r}', ${r % 100}, repeat('p', 40))`)
    if (r % 5 === 0) await cluster.query(`UPDATE ${table} SET id = id + 10000 WHERE id = (SELECT max(id) FROM ${table} WHERE id < 10000)`)
  }
}

const SHAPES: Array<{ name: string; params: Record<string, string>; where: string }> = [
  { name: 'whole table', params: {}, where: 'true' },
  { name: 'a where clause (rows move in and out)', params: { where: 'n < 50' }, where: 'n < 50' },
  { name: 'replica=full', params: { replica: 'full' }, where: 'true' },
]

describe('shape log compaction', () => {
  it('compacts a history; clients resuming inside it, new clients, live clients and a restart all end equal to Postgres', async () => {
    const table = 'cmp_items'
    await cluster.query(`CREATE TABLE ${table} (id int4 PRIMARY KEY, v text, n int4, pad text)`)
    await cluster.query(`INSERT INTO ${table} SELECT i, 'v' || i, i % 100, repeat('p', 40) FROM generate_series(1, 60) i`)
    const dir = await dirs.make('store')
    const first = await start(dir)
    const keyOf = (r: Record<string, string | null>): string => rowKey('public', table, r.id!)

    // Before any history: one client per shape syncs and stops, another follows live throughout.
    const early: RawClient[] = []
    const live: Array<{ log: StreamLog; shape: ReturnType<typeof shapeOf>; abort: AbortController; exchanges: RecordedExchange[] }> = []
    for (const s of SHAPES) {
      const client = rawClient({ table, ...s.params })
      await rawSync(first.url, client)
      early.push({ ...client, rows: new Map(client.rows) })
      const exchanges: RecordedExchange[] = []
      const { stream, abort } = openStream(first.url, { params: { table, ...s.params } }, exchanges)
      const shape = shapeOf(stream)
      live.push({ log: new StreamLog(stream), shape, abort, exchanges })
      await shape.value
    }
    try {
      await history(table, 40, 0)
      await caughtUp(first.pipeline, cluster)

      const before: number[] = []
      for (const s of SHAPES) before.push((await rawSync(first.url, rawClient({ table, ...s.params }))).bytes)
      const handles = early.map((c) => c.handle!)
      for (const handle of handles) {
        const shape = [...first.pipeline.shapes.readyShapes()].find((x) => x.handle === handle)!
        const result = await first.pipeline.compactor.compact(shape)
        expect(result, handle).toBeDefined()
        expect(result!.bytesAfter).toBeLessThan(result!.bytesBefore)
        expect(handleOfLogId(first.pipeline.shapes.log(handle)!.id)).toBe(handle)
        expect(first.pipeline.shapes.log(handle)!.id).not.toBe(handle)
      }
      expect(first.pipeline.compactor.stats.compactions).toBe(SHAPES.length)

      // Changes after the compaction reach every kind of client.
      await history(table, 6, 40)
      await caughtUp(first.pipeline, cluster)
      for (const [i, s] of SHAPES.entries()) {
        const want = await pgTextRows(cluster, table, keyOf, s.where)
        const fresh = rawClient({ table, ...s.params })
        const { bytes } = await rawSync(first.url, fresh)
        expect(fresh.handle, s.name).toBe(handles[i])
        expect(bytes, s.name).toBeLessThan(before[i]! / 2)
        expect(fresh.rows, s.name).toEqual(want)
        // The client that synced before the history resumes from its offset, inside the compacted part.
        const resumed = early[i]!
        await rawSync(first.url, resumed)
        expect(resumed.handle, s.name).toBe(handles[i])
        expect(resumed.rows, s.name).toEqual(want)
        // The official client that followed live throughout.
        const wantClient = await expectedClientRows(cluster, table, SCHEMA, keyOf, s.where)
        await eventually(() => equalMaps(live[i]!.shape.currentValue, wantClient), `live client of ${s.name}`)
        expect(live[i]!.log.controls()).not.toContain('must-refetch')
        expect(live[i]!.exchanges.filter((e) => e.status !== 200).map((e) => e.status)).toEqual([])
        expect(live[i]!.log.errors).toEqual([])
      }
      // A new official client on the compacted log.
      for (const s of SHAPES) {
        const { stream, abort } = openStream(first.url, { params: { table, ...s.params } })
        try {
          const shape = shapeOf(stream)
          await shape.value
          expect(new Map(shape.currentValue), s.name).toEqual(await expectedClientRows(cluster, table, SCHEMA, keyOf, s.where))
        } finally {
          abort.abort()
        }
      }

      // A restart while the old logs still wait for their deletion: the compacted ones come back.
      const port = Number(new URL(first.url).port)
      await stop(first)
      for (const l of live) l.abort.abort()
      await history(table, 3, 46)
      const second = await start(dir, {}, port)
      await caughtUp(second.pipeline, cluster)
      const ids = second.pipeline.store.ids()
      for (const handle of handles) {
        expect(second.pipeline.shapes.log(handle)!.id).toBe(`${handle}_c1`)
        expect(ids).not.toContain(handle)
      }
      for (const [i, s] of SHAPES.entries()) {
        const want = await pgTextRows(cluster, table, keyOf, s.where)
        const resumed = early[i]!
        await rawSync(second.url, resumed)
        expect(resumed.rows, s.name).toEqual(want)
        const fresh = rawClient({ table, ...s.params })
        await rawSync(second.url, fresh)
        expect(fresh.handle).toBe(handles[i])
        expect(fresh.rows, s.name).toEqual(want)
      }
    } finally {
      for (const l of live) l.abort.abort()
    }
  })

  it('deletes the old log after the grace period, and compacts again on top of a compacted log', async () => {
    const table = 'cmp_again'
    await cluster.query(`CREATE TABLE ${table} (id int4 PRIMARY KEY, v text, n int4, pad text)`)
    await cluster.query(`INSERT INTO ${table} SELECT i, 'v' || i, i % 100, repeat('p', 40) FROM generate_series(1, 30) i`)
    const server = await start(await dirs.make('store'), { compactRetireMs: 50 })
    const keyOf = (r: Record<string, string | null>): string => rowKey('public', table, r.id!)
    const early = rawClient({ table })
    await rawSync(server.url, early)
    const handle = early.handle!
    const shape = [...server.pipeline.shapes.readyShapes()].find((x) => x.handle === handle)!
    for (let generation = 1; generation <= 3; generation++) {
      await history(table, 10, generation * 10)
      await caughtUp(server.pipeline, cluster)
      expect(await server.pipeline.compactor.compact(shape)).toBeDefined()
      expect(server.pipeline.shapes.log(handle)!.id).toBe(`${handle}_c${generation}`)
      await eventually(() => server.pipeline.store.ids().filter((id) => handleOfLogId(id) === handle).length === 1, 'the old log deleted')
      await history(table, 2, 100 + generation * 2)
      await caughtUp(server.pipeline, cluster)
      const want = await pgTextRows(cluster, table, keyOf)
      const fresh = rawClient({ table })
      await rawSync(server.url, fresh)
      expect(fresh.rows).toEqual(want)
      await rawSync(server.url, early)
      expect(early.rows).toEqual(want)
    }
  })

  it('compacts by itself once a log passes --compact-ratio', async () => {
    const table = 'cmp_auto'
    await cluster.query(`CREATE TABLE ${table} (id int4 PRIMARY KEY, v text, n int4, pad text)`)
    await cluster.query(`INSERT INTO ${table} SELECT i, 'v' || i, i % 100, repeat('p', 40) FROM generate_series(1, 20) i`)
    const server = await start(await dirs.make('store'), { compactRatio: 2, compactMinEntries: 50, compactIntervalMs: 20, compactRetireMs: 50 })
    const client = rawClient({ table })
    await rawSync(server.url, client)
    await history(table, 30, 0)
    await caughtUp(server.pipeline, cluster)
    await eventually(() => server.pipeline.compactor.stats.compactions > 0, 'a compaction')
    expect(server.pipeline.compactor.stats.bytesReclaimed).toBeGreaterThan(0)
    await rawSync(server.url, client)
    expect(client.rows).toEqual(await pgTextRows(cluster, table, (r) => rowKey('public', table, r.id!)))
  })
})

function equalMaps(a: ReadonlyMap<string, unknown>, b: ReadonlyMap<string, unknown>): boolean {
  try {
    expect(new Map(a)).toEqual(b)
    return true
  } catch {
    return false
  }
}
