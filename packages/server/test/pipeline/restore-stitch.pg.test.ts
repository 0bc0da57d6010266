/**
 * Regression test (found by crash.pg.test.ts): a shape restored after a crash
 * must not take again a transaction its snapshot already holds.
 *
 * The snapshot can see a transaction that the router has not reached yet
 * (replication lags; here it is paused). The router then drops that
 * transaction for the new shape (stitching). If the process dies before the
 * store's durable watermark covers it, Postgres sends it again after the
 * restart, and the restored shape, which had no stitching any more, appended
 * it: the row was in the log twice (a snapshot insert, then a live insert).
 */
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { openReadOnlyLogStore } from '@sluice/storage'
import { type NodeProcess, spawnNode, useTempDir, usePostgres } from '@sluice/test-utils'
import { afterEach, beforeAll, describe, expect, it } from 'vitest'
import { commitMarker, compareLog, firstDifference, parseLsnText, shapeParams } from './harness.js'

const FIXTURE = join(dirname(fileURLToPath(import.meta.url)), 'fixtures', 'pipeline-child.ts')
const cluster = usePostgres()
const dirs = useTempDir('restore-stitch')
const children: NodeProcess[] = []

// Registered after useTempDir's hooks, so it runs before they remove the store directory.
afterEach(async () => {
  for (const c of children.splice(0)) await c.kill('SIGKILL')
})

beforeAll(async () => {
  await cluster.query(`CREATE TABLE tally (id int4 PRIMARY KEY, k int4 NOT NULL, label text); INSERT INTO tally SELECT i, i % 10, 'x' FROM generate_series(1, 50) i`)
})

describe('restored shapes and their snapshots', () => {
  it('a shape restored after a crash does not take again a transaction its snapshot already holds', async () => {
    const storageDir = await dirs.make('store')
    // Flushes come from snapshots and `sync` only: nothing makes the stitched transaction durable before the kill.
    const config = { connectionString: cluster.url, storageDir, options: { flushIntervalMs: 600_000 } }
    const start = async (): Promise<NodeProcess> => {
      const child = spawnNode(FIXTURE)
      children.push(child)
      await child.waitForLine((l) => l === 'loaded', { timeoutMs: 60_000 })
      child.send(`go ${JSON.stringify(config)}`)
      await child.waitForLine((l) => l.startsWith('started '), { timeoutMs: 60_000 })
      return child
    }
    const shape = async (child: NodeProcess, tag: string, where: string): Promise<string> => {
      child.send(`shape ${tag} ${JSON.stringify(shapeParams('public', 'tally', { where }))}`)
      const line = await child.waitForLine((l) => l.startsWith(`ready ${tag} `) || l.startsWith(`shape-failed ${tag} `))
      expect(line.startsWith('ready '), line).toBe(true)
      return line.split(' ')[2]!
    }

    let child = await start()
    await shape(child, 'a', 'k < 100')
    child.send('pause-replication')
    const { rows } = await cluster.query<{ lsn: string }>(`INSERT INTO tally VALUES (1000, 77, 'seen by the snapshot') RETURNING pg_current_wal_insert_lsn()::text AS lsn`)
    const b = await shape(child, 'b', 'k = 77')
    child.send('resume-replication')
    // The router reaches the insert and drops it for b (its snapshot has the row); nothing is flushed.
    child.send(`routed r ${parseLsnText(rows[0]!.lsn)}`)
    await child.waitForLine((l) => l.startsWith('routed r '))
    await child.kill('SIGKILL')

    child = await start()
    await cluster.query(`INSERT INTO tally VALUES (1001, 77, 'after the restart')`)
    const lsn = await commitMarker(cluster)
    child.send(`sync s ${lsn}`)
    await child.waitForLine((l) => l.startsWith('synced s '))
    const ro = openReadOnlyLogStore({ dir: join(storageDir, 'logs') })
    try {
      const result = await compareLog(ro.get(b)!, cluster, { schema: 'public', table: 'tally', where: 'k = 77' })
      expect(firstDifference(result.actual, result.expected)).toBeUndefined()
      expect(result.actual.size).toBe(2)
      expect(result.structure.snapshotRows).toBe(1)
      expect(result.structure.transactions).toBe(1)
    } finally {
      await ro.close()
    }
  })
})
