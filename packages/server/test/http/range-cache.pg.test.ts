import { useTempDir, usePostgres } from '@sluice/test-utils'
import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { buildApp } from '../../src/http/index.js'
import type { HttpMetrics } from '../../src/http/http-metrics.js'
import type { RangeCacheStats } from '../../src/http/range-cache.js'
import type { Pipeline } from '../../src/pipeline.js'
import type { PipelineOptions } from '../../src/pipeline.js'
import { eventually } from '../compat/compat-harness.js'
import { caughtUp, startPipeline } from '../pipeline/harness.js'
import { type Res, type TestServer, call, shapeUrl } from './http-harness.js'

/**
 * The range cache on real servers: two apps on one pipeline (one store, the
 * same bytes on disk), one with the cache, one without. Every body the cached
 * server answers, from memory or not, must be the uncached server's byte for
 * byte, headers included, whatever the chunk size, the offsets and the writes
 * in between; and a shape deleted or compacted must not be answered from
 * bodies of its old log.
 */

const cluster = usePostgres()
const dirs = useTempDir('range-cache-http')

interface Pair {
  readonly cached: TestServer
  readonly uncached: TestServer
  /** The cached server's cache figures. */
  stats(): RangeCacheStats
  close(): Promise<void>
}

async function startPair(pipeline: Pipeline, rangeCacheBytes = 8 * 1024 * 1024): Promise<Pair> {
  let read: (() => RangeCacheStats) | undefined
  // The figures as /metrics reads them: the app hands its cache's stats to the metrics object it was given.
  const metrics: HttpMetrics = {
    addBytesServed() {},
    setLiveWaiters() {},
    addLogRead() {},
    watchRangeCache(stats) {
      read = stats
    },
  }
  const start = async (cacheBytes: number, withMetrics: boolean): Promise<TestServer> => {
    const app = buildApp({ shapes: pipeline.shapeService, http: { rangeCacheBytes: cacheBytes, allowDelete: true }, ...(withMetrics ? { metrics } : {}) })
    await app.listen({ port: 0, host: '127.0.0.1' })
    const port = (app.server.address() as { port: number }).port
    return { app, port, close: () => app.close() }
  }
  const cached = await start(rangeCacheBytes, true)
  const uncached = await start(0, false)
  return {
    cached,
    uncached,
    stats: () => read!(),
    close: async () => {
      await cached.close()
      await uncached.close()
    },
  }
}

function comparableHeaders(res: Res): Record<string, string | string[] | undefined> {
  // The clock's, and the cursor of live responses (random by design).
  const { date: _date, 'electric-cursor': _cursor, ...rest } = res.headers
  return rest
}

function expectSame(a: Res, b: Res, what: string): void {
  expect(a.status, what).toBe(b.status)
  expect(comparableHeaders(a), what).toEqual(comparableHeaders(b))
  expect(a.body.equals(b.body), `${what}: bodies differ (${a.body.length} vs ${b.body.length} bytes)`).toBe(true)
}

/** Asks both servers; the cached one three times (a key is kept on its second request, served on its third). */
async function same(pair: Pair, params: Record<string, string>, what: string): Promise<Res> {
  const want = await call(pair.uncached.port, shapeUrl(params))
  let got: Res | undefined
  for (let i = 0; i < 3; i++) {
    got = await call(pair.cached.port, shapeUrl(params))
    expectSame(got, want, `${what} (request ${i + 1})`)
  }
  return got!
}

async function withPipeline<T>(table: string, options: Partial<PipelineOptions>, body: (pipeline: Pipeline, pair: Pair) => Promise<T>, cacheBytes?: number): Promise<T> {
  const pipeline = await startPipeline(cluster, await dirs.make('store'), options)
  const pair = await startPair(pipeline, cacheBytes)
  try {
    return await body(pipeline, pair)
  } finally {
    await pair.close()
    await pipeline.stop()
    await cluster.query(`DROP TABLE IF EXISTS ${table}`)
  }
}

/** Follows the shape from `res` until up-to-date through both servers, answering every offset on the way. */
async function follow(pair: Pair, table: string, handle: string, res: Res, offsets: string[]): Promise<Res> {
  for (let guard = 0; res.header('electric-up-to-date') === undefined || guard === 0; guard++) {
    if (guard > 10_000) throw new Error('never up-to-date')
    const offset = res.header('electric-offset')!
    offsets.push(offset)
    res = await same(pair, { table, handle, offset }, `offset ${offset}`)
  }
  return res
}

describe('range cache', () => {
  it('answers what a server without it answers, byte for byte, for random chunk sizes, rows, transactions and offsets, and serves from memory', async () => {
    let run = 0
    let hits = 0
    await fc.assert(
      fc.asyncProperty(
        fc.record({
          chunkBytes: fc.integer({ min: 64, max: 64 * 1024 }),
          rows: fc.array(fc.integer({ min: 0, max: 3000 }), { minLength: 0, maxLength: 80 }),
          transactions: fc.array(fc.array(fc.integer({ min: 0, max: 5000 }), { minLength: 1, maxLength: 15 }), { minLength: 0, maxLength: 5 }),
        }),
        async ({ chunkBytes, rows, transactions }) => {
          const table = `rc_items_${run++}`
          await cluster.query(`CREATE TABLE ${table} (id int4 PRIMARY KEY, body text)`)
          let nextId = 1
          for (const size of rows) await cluster.query(`INSERT INTO ${table} VALUES ($1, repeat('r', $2))`, [nextId++, size])
          await withPipeline(table, { chunkBytes }, async (pipeline, pair) => {
            const offsets: string[] = []
            let res = await same(pair, { table, offset: '-1' }, 'offset -1')
            const handle = res.header('electric-handle')!
            res = await follow(pair, table, handle, res, offsets)
            for (const sizes of transactions) {
              const statements = sizes.map((size) => {
                if (nextId > 1 && size % 3 === 0) return `UPDATE ${table} SET body = repeat('u', ${size}) WHERE id = ${1 + (size % (nextId - 1))}`
                return `INSERT INTO ${table} VALUES (${nextId++}, repeat('t', ${size}))`
              })
              await cluster.query(`BEGIN; ${statements.join('; ')}; COMMIT`)
              await caughtUp(pipeline, cluster)
              // Offsets answered before the write now start ranges that may reach further: never the bytes kept from before.
              for (const offset of offsets) await same(pair, { table, handle, offset }, `offset ${offset} after a write`)
              res = await same(pair, { table, handle, offset: res.header('electric-offset')! }, 'after a transaction')
              res = await follow(pair, table, handle, res, offsets)
            }
            const stats = pair.stats()
            expect(stats.bytes).toBeLessThanOrEqual(stats.maxBytes)
            hits += stats.hits
          })
        },
      ),
      { numRuns: process.env['SOAK'] === '1' ? 40 : 4 },
    )
    // Every offset=-1 was asked three times: the third at least came from memory.
    expect(hits).toBeGreaterThan(0)
  })

  it('drops a deleted shape: the shape made again for the same table is answered from its own log', async () => {
    const table = 'rc_deleted'
    await cluster.query(`CREATE TABLE ${table} (id int4 PRIMARY KEY, body text)`)
    await cluster.query(`INSERT INTO ${table} SELECT i, repeat('a', 100) FROM generate_series(1, 50) i`)
    await withPipeline(table, {}, async (pipeline, pair) => {
      const first = await same(pair, { table, offset: '-1' }, 'offset -1')
      const before = pair.stats()
      expect(before.entries).toBe(1)
      expect(before.hits).toBe(1)
      const handle = first.header('electric-handle')!
      expect((await call(pair.cached.port, shapeUrl({ table, handle }), { method: 'DELETE' })).status).toBe(202)
      await eventually(() => pair.stats().entries === 0, 'the deleted shape dropped from the cache')
      expect(pair.stats().bytes).toBe(0)
      await cluster.query(`UPDATE ${table} SET body = repeat('b', 100)`)
      await caughtUp(pipeline, cluster)
      const again = await same(pair, { table, offset: '-1' }, 'offset -1 of the new shape')
      expect(again.header('electric-handle')).not.toBe(handle)
      expect(again.text).toContain('bbbb')
      expect(again.text).not.toContain('aaaa')
    })
  })

  it('after a compaction answers from the compacted log, not from bodies of the old one', async () => {
    const table = 'rc_compacted'
    await cluster.query(`CREATE TABLE ${table} (id int4 PRIMARY KEY, body text)`)
    await cluster.query(`INSERT INTO ${table} SELECT i, repeat('a', 100) FROM generate_series(1, 20) i`)
    const options = { chunkBytes: 1024, compactRatio: 2, compactMinEntries: 50, compactIntervalMs: 20, compactRetireMs: 50 }
    await withPipeline(table, options, async (pipeline, pair) => {
      const offsets: string[] = []
      const first = await same(pair, { table, offset: '-1' }, 'offset -1')
      const handle = first.header('electric-handle')!
      await follow(pair, table, handle, first, offsets)
      const held = pair.stats()
      expect(held.entries).toBeGreaterThan(0)
      for (let round = 0; round < 5; round++) {
        await cluster.query(`UPDATE ${table} SET body = repeat('${'bcdef'[round]}', 100) WHERE id % 2 = 0`)
      }
      await caughtUp(pipeline, cluster)
      await eventually(() => pipeline.compactor.stats.compactions > 0, 'a compaction')
      // The same handle, the same offsets, other bytes: the compacted log's snapshot chunks no longer hold the rows changed since.
      const after = await same(pair, { table, handle, offset: '-1' }, 'offset -1 after the compaction')
      expect(after.body.equals(first.body)).toBe(false)
      for (const offset of offsets) await same(pair, { table, handle, offset }, `offset ${offset} after the compaction`)
    })
  })

  it('stays within its bound however many ranges are asked for', async () => {
    const table = 'rc_bound'
    await cluster.query(`CREATE TABLE ${table} (id int4 PRIMARY KEY, body text)`)
    await cluster.query(`INSERT INTO ${table} SELECT i, repeat('x', 200) FROM generate_series(1, 400) i`)
    // 16 KiB: at most 2 KiB a body (an eighth), so 1 KiB chunks fit and many ranges compete for room.
    await withPipeline(
      table,
      { chunkBytes: 1024 },
      async (_pipeline, pair) => {
        const offsets: string[] = []
        const first = await same(pair, { table, offset: '-1' }, 'offset -1')
        await follow(pair, table, first.header('electric-handle')!, first, offsets)
        const stats = pair.stats()
        expect(offsets.length).toBeGreaterThan(40)
        expect(stats.bytes).toBeLessThanOrEqual(16 * 1024)
        expect(stats.evictions).toBeGreaterThan(0)
        expect(stats.hits).toBeGreaterThan(0)
      },
      16 * 1024,
    )
  })
})
