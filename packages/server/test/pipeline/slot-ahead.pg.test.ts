/**
 * A store directory behind its replication slot: Postgres will never send the
 * transactions between the store's durable watermark and the slot's
 * confirmed_flush_lsn again, so restored shapes would silently miss them. The
 * pipeline must invalidate them at start (a backup put back here), and must
 * not on an ordinary restart, also after the slot skipped WAL nobody
 * subscribed to while the database was otherwise idle.
 */
import { cpSync, rmSync } from 'node:fs'
import { join } from 'node:path'
import { MUST_REFETCH_BODY } from '@sluice/protocol'
import { useTempDir, usePostgres } from '@sluice/test-utils'
import { afterEach, beforeAll, describe, expect, it } from 'vitest'
import { ServerMetrics } from '../../src/metrics.js'
import type { Pipeline } from '../../src/pipeline.js'
import type { ShapeLogger } from '../../src/shapes/shape-manager.js'
import { call, shapeUrl, startServer } from '../http/http-harness.js'
import { caughtUp, compareShape, parseLsnText, shapeParams, sorted, startPipeline } from './harness.js'

const cluster = usePostgres()
const dirs = useTempDir('slot-ahead')
let running: Pipeline[] = []

interface Logged {
  readonly level: 'info' | 'warn' | 'error'
  readonly data: Record<string, unknown>
  readonly message: string
}

function collectingLogger(into: Logged[]): ShapeLogger {
  const push = (level: Logged['level']) => (data: object, message: string) => void into.push({ level, data: data as Record<string, unknown>, message })
  return { info: push('info'), warn: push('warn'), error: push('error') }
}

async function start(dir: string, logged: Logged[] = []): Promise<Pipeline> {
  const pipeline = await startPipeline(cluster, dir, { logger: collectingLogger(logged) })
  running.push(pipeline)
  return pipeline
}

async function stop(pipeline: Pipeline): Promise<void> {
  await pipeline.stop()
  running = running.filter((p) => p !== pipeline)
}

async function slotLsn(): Promise<bigint> {
  const { rows } = await cluster.query<{ lsn: string }>(`SELECT confirmed_flush_lsn::text AS lsn FROM pg_replication_slots WHERE slot_name = 'sluice_slot'`)
  return parseLsnText(rows[0]!.lsn)
}

async function expectEqualToPostgres(pipeline: Pipeline, handle: string, where?: string): Promise<void> {
  const { actual, expected } = await compareShape(pipeline, cluster, handle, where === undefined ? {} : { where })
  expect(sorted(actual)).toEqual(sorted(expected))
}

const everything = shapeParams('public', 'acct')
const anns = shapeParams('public', 'acct', { where: "owner = 'ann'" })

afterEach(async () => {
  for (const p of running) await p.stop()
  running = []
  // An inactive slot keeps WAL forever; each test starts from a slot of its own.
  await cluster.dropReplicationSlots()
})

beforeAll(async () => {
  await cluster.query(`
    CREATE TABLE acct (id int4 PRIMARY KEY, owner text NOT NULL, n int4 NOT NULL);
    CREATE TABLE unsubscribed (id serial PRIMARY KEY, pad text);
  `)
})

async function resetTable(): Promise<void> {
  await cluster.query(`DELETE FROM acct; INSERT INTO acct SELECT i, (ARRAY['ann','bob'])[1 + i % 2], i FROM generate_series(1, 40) i`)
}

describe('a replication slot ahead of the shape store', () => {
  it('a store restored from an older copy loses its shapes (409, fresh snapshot) instead of missing changes', async () => {
    await resetTable()
    const dir = await dirs.make('store')
    const backup = await dirs.make('backup')

    let pipeline = await start(dir)
    const a = await pipeline.shapes.resolve(everything)
    const b = await pipeline.shapes.resolve(anns)
    await Promise.all([pipeline.shapes.ready(a.handle), pipeline.shapes.ready(b.handle)])
    await cluster.query(`INSERT INTO acct VALUES (100, 'ann', 100), (101, 'bob', 101); UPDATE acct SET n = n + 1000 WHERE id <= 5`)
    await caughtUp(pipeline, cluster)
    await stop(pipeline)
    const backedUpLsn = pipeline.store.durableLsn
    // The backup: a plain copy of the stopped server's storage directory.
    cpSync(dir, backup, { recursive: true })

    // Life goes on without the backup: more changes, the slot moves past what the backup holds.
    pipeline = await start(dir)
    expect(pipeline.replicationGap).toBeUndefined()
    expect(pipeline.shapes.status(a.handle)).toBe('active')
    await cluster.query(`INSERT INTO acct VALUES (200, 'ann', 200); DELETE FROM acct WHERE id IN (2, 3); UPDATE acct SET owner = 'ann' WHERE id = 4`)
    await caughtUp(pipeline, cluster)
    await stop(pipeline)
    const slotBefore = await slotLsn()
    expect(slotBefore).toBeGreaterThan(backedUpLsn + 1n)

    // The backup is put back.
    rmSync(dir, { recursive: true, force: true })
    cpSync(backup, dir, { recursive: true })
    const logged: Logged[] = []
    pipeline = await start(dir, logged)

    expect(pipeline.replicationGap).toEqual({ slotLsn: slotBefore, storeLsn: backedUpLsn, invalidated: 2 })
    const warns = logged.filter((l) => l.level === 'warn' && l.message.includes('replication slot is ahead'))
    expect(warns).toHaveLength(1)
    const formatted = (lsn: bigint) => `${(lsn >> 32n).toString(16).toUpperCase()}/${(lsn & 0xffffffffn).toString(16).toUpperCase()}`
    expect(warns[0]!.data).toEqual({ slotLsn: formatted(slotBefore), storeLsn: formatted(backedUpLsn), invalidated: 2 })
    expect(warns[0]!.message).toContain(formatted(slotBefore))
    expect(warns[0]!.message).toContain(formatted(backedUpLsn))
    for (const old of [a.handle, b.handle]) {
      expect(pipeline.shapes.status(old)).toBe('expired')
      expect(pipeline.shapes.log(old)).toBeUndefined()
      expect(pipeline.store.get(old)).toBeUndefined()
    }
    expect(pipeline.shapes.handles()).toEqual([])
    expect(pipeline.shapes.lookup(a.definition)).toBeUndefined()

    const metrics = new ServerMetrics({ pipeline, connectionString: cluster.url, slotName: 'sluice_slot', defaultMetrics: false })
    try {
      const text = await metrics.registry.getSingleMetricAsString('sluice_shapes_invalidated_total')
      expect(text).toContain('sluice_shapes_invalidated_total{reason="replication_gap"} 2')
    } finally {
      await metrics.close()
    }

    // A client still holding the old handle is told to start over, with the new shape's handle.
    const server = await startServer(pipeline)
    let fresh: string
    try {
      const res = await call(server.port, shapeUrl({ table: 'acct', offset: '0_0', handle: a.handle }))
      expect(res.status).toBe(409)
      expect(res.text).toBe(MUST_REFETCH_BODY)
      fresh = res.header('electric-handle') ?? ''
      expect(fresh).not.toBe('')
      expect(fresh).not.toBe(a.handle)
    } finally {
      await server.close()
    }
    expect(pipeline.shapes.lookup(a.definition)).toBe(fresh)
    await pipeline.shapes.ready(fresh)
    // The new shape's snapshot has everything, including what the restored log had missed.
    await expectEqualToPostgres(pipeline, fresh)
    expect(pipeline.shapes.log(fresh)).toBeDefined()
    const rebuiltAnns = await pipeline.shapes.resolve(anns)
    expect(rebuiltAnns.created).toBe(true)
    expect(rebuiltAnns.handle).not.toBe(b.handle)
    await pipeline.shapes.ready(rebuiltAnns.handle)
    await expectEqualToPostgres(pipeline, rebuiltAnns.handle, "owner = 'ann'")

    // And later changes flow into them.
    await cluster.query(`INSERT INTO acct VALUES (300, 'ann', 300); UPDATE acct SET n = -1 WHERE id = 1; DELETE FROM acct WHERE id = 6; UPDATE acct SET owner = 'bob' WHERE id = 200`)
    await caughtUp(pipeline, cluster)
    await expectEqualToPostgres(pipeline, fresh)
    await expectEqualToPostgres(pipeline, rebuiltAnns.handle, "owner = 'ann'")

    // The invalidation is done once: the next start finds the store and the slot in step.
    await stop(pipeline)
    pipeline = await start(dir)
    expect(pipeline.replicationGap).toBeUndefined()
    expect(pipeline.shapes.handles().sort()).toEqual([fresh, rebuiltAnns.handle].sort())
  })

  it('an ordinary restart keeps every shape, also after the slot skipped WAL of tables nobody subscribed to', async () => {
    await resetTable()
    const dir = await dirs.make('store')
    let pipeline = await start(dir)
    const a = await pipeline.shapes.resolve(everything)
    const b = await pipeline.shapes.resolve(anns)
    await Promise.all([pipeline.shapes.ready(a.handle), pipeline.shapes.ready(b.handle)])
    await cluster.query(`INSERT INTO acct VALUES (100, 'ann', 100); UPDATE acct SET n = n + 1000 WHERE id <= 5`)
    await caughtUp(pipeline, cluster)

    // WAL nobody subscribed to, while the published tables stay idle: the slot is allowed past it.
    await cluster.query(`INSERT INTO unsubscribed (pad) SELECT repeat('x', 200) FROM generate_series(1, 500)`)
    const { rows } = await cluster.query<{ lsn: string }>('SELECT pg_current_wal_lsn()::text AS lsn')
    const walAfter = parseLsnText(rows[0]!.lsn)
    const deadline = Date.now() + 60_000
    while ((await slotLsn()) < walAfter) {
      if (Date.now() > deadline) throw new Error(`the slot did not pass ${walAfter} (at ${await slotLsn()})`)
      await new Promise((r) => setTimeout(r, 20))
    }
    await stop(pipeline)
    // The store's watermark covers every commit the slot will not send again.
    expect(await slotLsn()).toBeLessThanOrEqual(pipeline.store.durableLsn + 1n)

    const logged: Logged[] = []
    pipeline = await start(dir, logged)
    expect(pipeline.replicationGap).toBeUndefined()
    expect(logged.filter((l) => l.level === 'warn')).toEqual([])
    expect(pipeline.shapes.handles().sort()).toEqual([a.handle, b.handle].sort())
    for (const h of [a.handle, b.handle]) expect(pipeline.shapes.status(h)).toBe('active')
    await expectEqualToPostgres(pipeline, a.handle)
    await expectEqualToPostgres(pipeline, b.handle, "owner = 'ann'")

    await cluster.query(`INSERT INTO acct VALUES (101, 'ann', 101); DELETE FROM acct WHERE id = 7; UPDATE acct SET owner = 'ann' WHERE id = 9`)
    await caughtUp(pipeline, cluster)
    await expectEqualToPostgres(pipeline, a.handle)
    await expectEqualToPostgres(pipeline, b.handle, "owner = 'ann'")
  })
})
