/**
 * Subquery shapes across a failed flush. The store rolls back what it had
 * accepted but not synced, and the stream delivers it again from the durable
 * watermark; a subquery shape's result sets (kept in memory) had already taken
 * those transactions, so on the second delivery a move-in or move-out found
 * nothing left to move and wrote nothing, while its first lines were gone with
 * the rollback: the client never saw the rows. Such a shape is now invalidated
 * at the failure, and a client following it refetches and ends equal to
 * Postgres.
 */
import { type FsPort, nodeFs } from '@sluice/storage'
import { createFaultyFs, usePostgres, useTempDir } from '@sluice/test-utils'
import { afterEach, describe, expect, it } from 'vitest'
import type { Pipeline } from '../../src/pipeline.js'
import { type TestServer, startServer } from '../http/http-harness.js'
import { SubqueryFollower, type SubqueryShapeSpec } from '../http/subquery-workload.js'
import { caughtUp, startPipeline } from './harness.js'

const cluster = usePostgres()
const dirs = useTempDir('subquery-rollback')

let cleanup: Array<() => Promise<unknown>> = []
afterEach(async () => {
  for (const step of cleanup.reverse()) await step()
  cleanup = []
})

const SPEC: SubqueryShapeSpec = {
  table: { name: 'rb_issues', pk: ['id'], ints: ['project_id'], texts: ['title'] },
  where: 'project_id IN (SELECT id FROM rb_projects WHERE owner = $1)',
  params: ['alice'],
  columns: undefined,
  replica: 'default',
}

describe('subquery shapes and a failed flush', () => {
  it('a move-in and a move-out rolled back by a failed flush reach the client: the shape is invalidated and the client refetches', { timeout: 120_000 }, async () => {
    await cluster.query(`
      CREATE TABLE rb_projects (id int4 PRIMARY KEY, owner text NOT NULL);
      CREATE TABLE rb_issues (id int4 PRIMARY KEY, project_id int4, title text);
      INSERT INTO rb_projects VALUES (1, 'alice'), (2, 'bob');
      INSERT INTO rb_issues SELECT i, 1 + i % 3, 'issue ' || i FROM generate_series(1, 30) i;`)
    const faulty = createFaultyFs<FsPort>(nodeFs)
    const pipeline: Pipeline = await startPipeline(cluster, await dirs.make('store'), { storageFs: faulty.fs })
    cleanup.push(() => pipeline.stop())
    const server: TestServer = await startServer(pipeline)
    cleanup.push(() => server.close())

    const follower = new SubqueryFollower(SPEC)
    await follower.sync(server.port)
    expect(follower.actual().size).toBe(10)
    const before = follower.handle

    // Every sync fails while project 3 moves in and project 1 moves out: what was written for them is rolled back.
    const rule = faulty.rules.failAlways('fdatasync', { code: 'EIO' })
    await cluster.query(`INSERT INTO rb_projects VALUES (3, 'alice')`)
    await cluster.query(`UPDATE rb_projects SET owner = 'bob' WHERE id = 1`)
    await expect.poll(() => pipeline.health.commitFailures, { timeout: 30_000 }).toBeGreaterThan(0)
    await new Promise((r) => setTimeout(r, 300))
    expect(pipeline.store.durableLsn).toBeLessThan(pipeline.router.lastRoutedLsn)
    rule.remove()

    await cluster.query(`INSERT INTO rb_issues VALUES (31, 3, 'after')`)
    await caughtUp(pipeline, cluster)
    await follower.sync(server.port)
    expect(await follower.difference((text, values) => cluster.query(text, values as unknown[]))).toBeUndefined()
    expect(follower.actual().size).toBe(11)
    // It got there by a refetch of a new shape, not by the old one.
    expect(follower.stats.refetches).toBe(1)
    expect(follower.handle).not.toBe(before)
  })
})
