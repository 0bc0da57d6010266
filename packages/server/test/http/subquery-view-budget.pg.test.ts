import { useTempDir, usePostgres } from '@sluice/test-utils'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { Pipeline } from '../../src/pipeline.js'
import { caughtUp, startPipeline } from '../pipeline/harness.js'
import { type TestServer, call, messages, shapeUrl, startServer } from './http-harness.js'

/**
 * `--max-subquery-view-entries`: the values held in all subquery shapes' views
 * are bounded. A shape whose views would not fit is refused with 503
 * `subquery_views_full` (before or while its snapshot loads them); a live
 * shape whose views grow past the bound is invalidated (409), and what it held
 * is freed for others.
 */

const LIMIT = 6
const cluster = usePostgres()
const dirs = useTempDir('subquery-view-budget')
let pipeline: Pipeline
let server: TestServer

beforeAll(async () => {
  pipeline = await startPipeline(cluster, await dirs.make('store'), { maxSubqueryViewEntries: LIMIT })
  server = await startServer(pipeline, { longPollTimeoutMs: 2_000 })
}, 120_000)

afterAll(async () => {
  await server?.close()
  await pipeline?.stop()
})

const where = (user: number): string => `list_id IN (SELECT list_id FROM vb_members WHERE user_id = ${user})`
const first = (user: number) => call(server.port, shapeUrl({ table: 'vb_todos', where: where(user), offset: '-1' }))
const held = (): number => pipeline.shapes.stats().subqueryViewEntries

describe('the bound on subquery shapes’ views', () => {
  it('refuses a shape that would not fit with 503 subquery_views_full, and invalidates one that grows past it', async () => {
    await cluster.query(`
      CREATE TABLE vb_members (id serial PRIMARY KEY, user_id int NOT NULL, list_id int NOT NULL);
      CREATE TABLE vb_todos (id serial PRIMARY KEY, list_id int NOT NULL);
      INSERT INTO vb_members (user_id, list_id) SELECT 1, g FROM generate_series(1, 4) g;
      INSERT INTO vb_members (user_id, list_id) SELECT 2, g FROM generate_series(1, 3) g;
      INSERT INTO vb_members (user_id, list_id) VALUES (3, 1), (3, 1);
      INSERT INTO vb_todos (list_id) SELECT g FROM generate_series(1, 5) g;
    `)
    // User 1's view: 4 values, within the bound.
    const one = await first(1)
    expect(one.status, one.text).toBe(200)
    expect(held()).toBe(4)

    // User 2's would take it to 7: refused while its snapshot loads the view, and nothing of it stays counted.
    const two = await first(2)
    expect(two.status, two.text).toBe(503)
    expect(two.json()).toEqual({ code: 'subquery_views_full', message: 'Too many values held for subquery shapes, please retry later' })
    expect(two.header('retry-after')).toBe('5')
    expect(held()).toBe(4)

    // User 3's holds one value (two rows carry it): it fits.
    const three = await first(3)
    expect(three.status, three.text).toBe(200)
    expect(held()).toBe(5)

    // User 1's view grows by two values: past the bound, so that shape is invalidated and its values freed.
    const handle = one.header('electric-handle')!
    const offset = one.header('electric-offset')!
    await cluster.query('INSERT INTO vb_members (user_id, list_id) VALUES (1, 5), (1, 6)')
    await caughtUp(pipeline, cluster)
    const until = Date.now() + 10_000
    while (held() !== 1 && Date.now() < until) await new Promise((r) => setTimeout(r, 50))
    expect(held()).toBe(1)
    const after = await call(server.port, shapeUrl({ table: 'vb_todos', where: where(1), offset, handle }))
    expect(after.status, after.text).toBe(409)
    expect(messages(after).some((m) => m.headers['control'] === 'must-refetch')).toBe(true)

    // With room again, user 2's shape is made. (The 409 above resolved user 1's definition, which starts a new
    // shape in the background; while its 6-value view is loaded and refused, its values count: a 503 meanwhile
    // is retried, as a client does.)
    let again = await first(2)
    for (const until = Date.now() + 10_000; again.status === 503 && Date.now() < until; ) {
      await new Promise((r) => setTimeout(r, 100))
      again = await first(2)
    }
    expect(again.status, again.text).toBe(200)
    expect(held()).toBe(4)
  }, 120_000)

  it('refuses a view past the bound while its rows are still being read: the rest of a large inner table is never fetched', async () => {
    const ROWS = 200_000
    await cluster.query(`
      CREATE TABLE vb_big_members (user_id int NOT NULL, list_id int NOT NULL);
      INSERT INTO vb_big_members SELECT 9, g FROM generate_series(1, ${ROWS}) g;
    `)
    const scanned = async (): Promise<number> => {
      const { rows } = await cluster.query<{ n: string }>(`SELECT seq_tup_read::text AS n FROM pg_stat_user_tables WHERE relname = 'vb_big_members'`)
      return Number(rows[0]!.n)
    }
    const before = held()
    const res = await call(server.port, shapeUrl({ table: 'vb_todos', where: 'list_id IN (SELECT list_id FROM vb_big_members WHERE user_id = 9)', offset: '-1' }))
    expect(res.status, res.text).toBe(503)
    expect(res.json()).toMatchObject({ code: 'subquery_views_full' })
    expect(held()).toBe(before)
    // Postgres reports a backend's table statistics within seconds of its transaction: the scan's count arrives.
    await expect.poll(scanned, { timeout: 20_000, interval: 250 }).toBeGreaterThan(0)
    // One batch of the cursor was read, not the table: the refusal came before the rest was in memory.
    expect(await scanned()).toBeLessThan(ROWS / 4)
  }, 120_000)
})
