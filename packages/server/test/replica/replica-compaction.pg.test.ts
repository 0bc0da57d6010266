/**
 * A read replica over a log that the writer compacts: the compacted log is a
 * new directory (`<handle>_c<n>`) and the old one is deleted after a grace
 * period, so a replica that kept reading the directory named by the handle
 * would answer 409 (or serve a log that no longer moves). Real writer, real
 * replica, one storage directory, real HTTP; the replica's fallback timer is
 * off, so it learns of the new generation through its store watch alone.
 */
import { chmod } from 'node:fs/promises'
import type { AddressInfo } from 'node:net'
import { usePostgres, useTempDir } from '@sluice/test-utils'
import type { FastifyInstance } from 'fastify'
import { afterEach, describe, expect, it } from 'vitest'
import { loadConfig } from '../../src/config.js'
import { buildApp } from '../../src/http/index.js'
import type { Pipeline } from '../../src/pipeline.js'
import { type ReplicaServer, createReplicaServer } from '../../src/replica/replica-server.js'
import { handleOfLogId } from '../../src/shapes/compaction/log-ids.js'
import { rowKey } from '../compat/compat-harness.js'
import { caughtUp, startPipeline } from '../pipeline/harness.js'
import { pgTextRows, rawClient, rawSync } from '../shapes/raw-client.js'

const cluster = usePostgres()
const dirs = useTempDir('replica-compaction')
const running: Array<() => Promise<void>> = []

afterEach(async () => {
  for (const close of running.splice(0).reverse()) await close().catch(() => {})
})

async function until(check: () => boolean | Promise<boolean>, what: string): Promise<void> {
  for (let i = 0; i < 400; i++) {
    if (await check()) return
    await new Promise((resolve) => setTimeout(resolve, 25))
  }
  throw new Error(`never: ${what}`)
}

async function history(table: string, rounds: number, from: number): Promise<void> {
  for (let r = from; r < from + rounds; r++) {
    await cluster.query(`UPDATE ${table} SET n = (n * 7 + ${r}) % 100 WHERE id % 3 = ${r % 3}`)
    await cluster.query(`UPDATE ${table} SET v = 'v${r}-' || id WHERE id % 5 = ${r % 5}`)
    if (r % 4 === 0) await cluster.query(`DELETE FROM ${table} WHERE id = (SELECT min(id) FROM ${table} WHERE id % 7 = ${r % 7})`)
    if (r % 3 === 0) await cluster.query(`INSERT INTO ${table} VALUES (${1000 + r}, 'new${r}', ${r % 100}, repeat('p', 40))`)
  }
}

describe('read replica and log compaction', () => {
  it("follows the writer's compacted log: resuming, new and live clients on the replica end equal to Postgres, no 409", async () => {
    const table = 'rc_items'
    await cluster.query(`CREATE TABLE ${table} (id int4 PRIMARY KEY, v text, n int4, pad text)`)
    await cluster.query(`INSERT INTO ${table} SELECT i, 'v' || i, i % 100, repeat('p', 40) FROM generate_series(1, 40) i`)
    const dir = await dirs.make('store')
    await chmod(dir, 0o755)
    const pipeline: Pipeline = await startPipeline(cluster, dir, { chunkBytes: 2048, compactRetireMs: 100 })
    const app: FastifyInstance = buildApp({ shapes: pipeline.shapeService, http: { longPollTimeoutMs: 20_000 } })
    await app.listen({ port: 0, host: '127.0.0.1' })
    running.push(() => pipeline.stop(), () => app.close())
    const writerUrl = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}/v1/shape`
    const keyOf = (r: Record<string, string | null>): string => rowKey('public', table, r.id!)

    const early = rawClient({ table })
    await rawSync(writerUrl, early)
    const handle = early.handle!
    const replica: ReplicaServer = await createReplicaServer(
      loadConfig(['--database-url', cluster.url, '--storage-dir', dir, '--port', '0', '--log-level', 'silent', '--read-only', '--replica-poll', '0']),
    )
    running.push(() => replica.close())
    const replicaUrl = `http://127.0.0.1:${replica.port}/v1/shape`
    // A client of the replica from before the history, and one at the head just before the compaction (inside the compacted part).
    const before = rawClient({ table })
    await rawSync(replicaUrl, before)
    expect(before.handle).toBe(handle)
    await history(table, 30, 0)
    await caughtUp(pipeline, cluster)
    const mid = rawClient({ table })
    await until(async () => {
      await rawSync(replicaUrl, mid)
      return mid.offset === early.offset || !mid.offset.startsWith('0_')
    }, 'the replica past the snapshot')
    const full = (await rawSync(replicaUrl, rawClient({ table }))).bytes

    const shape = [...pipeline.shapes.readyShapes()].find((s) => s.handle === handle)!
    expect(await pipeline.compactor.compact(shape)).toBeDefined()
    expect(pipeline.shapes.log(handle)!.id).toBe(`${handle}_c1`)
    // The old log is deleted after the grace period: from then on only the new generation holds the shape.
    await until(() => pipeline.store.ids().filter((id) => handleOfLogId(id) === handle).length === 1, 'the old log deleted')

    // A long-poll parked on the replica at the head wakes for the next write (the flush names the new generation's id).
    const parkedFrom = rawClient({ table })
    await rawSync(replicaUrl, parkedFrom)
    expect(parkedFrom.handle).toBe(handle)
    const parked = fetch(`${replicaUrl}?table=${table}&handle=${handle}&offset=${parkedFrom.offset}&live=true`)
    await new Promise((resolve) => setTimeout(resolve, 200))
    await cluster.query(`UPDATE ${table} SET v = 'after' WHERE id = (SELECT min(id) FROM ${table})`)
    const woken = await parked
    expect(woken.status).toBe(200)
    const messages = (await woken.json()) as Array<{ key?: string; value?: { v?: string } }>
    expect(messages.filter((m) => m.key !== undefined).map((m) => m.value?.v)).toEqual(['after'])

    await history(table, 5, 30)
    await caughtUp(pipeline, cluster)
    const want = await pgTextRows(cluster, table, keyOf)
    await until(async () => {
      const probe = rawClient({ table })
      await rawSync(replicaUrl, probe)
      return probe.rows.size === want.size && [...want].every(([k, v]) => JSON.stringify(probe.rows.get(k)) === JSON.stringify(v))
    }, 'the replica caught up')
    // A new client downloads the compacted log; clients holding offsets before and inside the compacted part resume (200s only: rawSync throws on a 409).
    const fresh = rawClient({ table })
    const { bytes } = await rawSync(replicaUrl, fresh)
    expect(fresh.handle).toBe(handle)
    expect(bytes).toBeLessThan(full / 2)
    expect(fresh.rows).toEqual(want)
    for (const client of [before, mid, early]) {
      await rawSync(replicaUrl, client)
      expect(client.handle).toBe(handle)
      expect(client.rows).toEqual(want)
    }
  })
})
