/**
 * A subquery shape's move-in holds back every shape's watermark while it
 * runs, so it has connections of its own: it does not wait behind initial
 * snapshots that hold every snapshot connection (a snapshot of a large table,
 * or one blocked by a lock, as here).
 */
import { usePostgres, useTempDir } from '@sluice/test-utils'
import { afterEach, describe, expect, it } from 'vitest'
import type { Pipeline } from '../../src/pipeline.js'
import { startPipeline } from '../pipeline/harness.js'
import { type TestServer, call, shapeUrl, startServer } from './http-harness.js'
import { SubqueryFollower } from './subquery-workload.js'

const cluster = usePostgres()
const dirs = useTempDir('subquery-move-in-pool')

let cleanup: Array<() => Promise<unknown>> = []
afterEach(async () => {
  for (const step of cleanup.reverse()) await step()
  cleanup = []
})

describe('move-in connections', () => {
  it('a move-in completes while every snapshot connection waits on a locked table', { timeout: 120_000 }, async () => {
    await cluster.query(`
      CREATE TABLE mi_users (id int4 PRIMARY KEY, active bool NOT NULL);
      CREATE TABLE mi_posts (id int4 PRIMARY KEY, user_id int4, title text);
      CREATE TABLE mi_locked (id int4 PRIMARY KEY);
      INSERT INTO mi_users VALUES (1, true), (2, false);
      INSERT INTO mi_posts SELECT i, 1 + i % 2, 'post ' || i FROM generate_series(1, 20) i;`)
    const pipeline: Pipeline = await startPipeline(cluster, await dirs.make('store'), { snapshotConnections: 1 })
    cleanup.push(() => pipeline.stop())
    const server: TestServer = await startServer(pipeline)
    cleanup.push(() => server.close())
    const follower = new SubqueryFollower({
      table: { name: 'mi_posts', pk: ['id'], ints: ['user_id'], texts: ['title'] },
      where: 'user_id IN (SELECT id FROM mi_users WHERE active)',
      params: [],
      columns: undefined,
      replica: 'default',
    })
    await follower.sync(server.port)
    expect(follower.actual().size).toBe(10)

    // The one snapshot connection waits on a lock another session holds (on a table already published: a new
    // shape of it needs no ALTER PUBLICATION, which would wait on the lock first).
    expect((await call(server.port, shapeUrl({ table: 'mi_locked', offset: '-1' }))).status).toBe(200)
    const locker = await cluster.connect()
    cleanup.push(() => locker.end())
    await locker.query('BEGIN; LOCK TABLE mi_locked IN ACCESS EXCLUSIVE MODE')
    const blocked = call(server.port, shapeUrl({ table: 'mi_locked', offset: '-1', where: 'id > 0' }))
    await expect
      .poll(async () => (await cluster.query(`SELECT 1 FROM pg_stat_activity WHERE application_name = 'sluice_snapshot' AND wait_event_type = 'Lock'`)).rows.length, { timeout: 30_000 })
      .toBe(1)

    // User 2's posts move in, and reach the client while the snapshot still waits.
    await cluster.query('UPDATE mi_users SET active = true WHERE id = 2')
    await expect
      .poll(
        async () => {
          await follower.sync(server.port)
          return follower.actual().size
        },
        { timeout: 20_000, interval: 200 },
      )
      .toBe(20)
    expect(await follower.difference((text, values) => cluster.query(text, values as unknown[]))).toBeUndefined()
    expect(follower.stats.moveIns).toBe(1)
    expect((await cluster.query(`SELECT 1 FROM pg_stat_activity WHERE application_name = 'sluice_snapshot' AND wait_event_type = 'Lock'`)).rows).toHaveLength(1)

    await locker.query('COMMIT')
    expect((await blocked).status).toBe(200)
  })
})
