import { type FsPort, nodeFs } from '@sluice/storage'
import { createFaultyFs, usePostgres, useTempDir } from '@sluice/test-utils'
import { afterEach, beforeAll, describe, expect, it } from 'vitest'
import type { Pipeline, PipelineOptions } from '../../src/pipeline.js'
import { type TestServer, startServer } from '../http/http-harness.js'
import { caughtUp, startPipeline } from '../pipeline/harness.js'
import { startPostgresAgain, stopPostgres } from '../replication/harness.js'
import { ShapeClient, health, healthBecomes, selectRows } from './health-harness.js'

/**
 * `/v1/health` tells the truth (docs/protocol.md §1): a real pipeline on the
 * test cluster behind the real HTTP app, each fault brought about the way it
 * happens (the storage engine's filesystem failing its calls, Postgres
 * stopped, the slot dropped, the stream paused), and health back at 200 once
 * the fault clears, with clients of a shape holding what Postgres holds.
 */
const cluster = usePostgres()
const dirs = useTempDir('health')
let running: Array<{ pipeline: Pipeline; server: TestServer }> = []

afterEach(async () => {
  for (const { pipeline, server } of running) {
    await server.close()
    await pipeline.stop().catch(() => {})
  }
  running = []
})

async function start(options: Partial<PipelineOptions> = {}): Promise<{ pipeline: Pipeline; server: TestServer; port: number }> {
  const pipeline = await startPipeline(cluster, await dirs.make('store'), options)
  const server = await startServer(pipeline)
  running.push({ pipeline, server })
  return { pipeline, server, port: server.port }
}

/**
 * node:fs, noting which descriptors are the journal's segments: a test can
 * then fail the writes of shape log files (write-back) and leave the journal
 * (commits) alone.
 */
function journalAwareFs(): { fs: FsPort; journalFds: Set<number> } {
  const journalFds = new Set<number>()
  const fs: FsPort = {
    ...nodeFs,
    openSync: (path, flags, mode) => {
      const fd = nodeFs.openSync(path, flags, mode)
      if (path.includes('/journal/')) journalFds.add(fd)
      else journalFds.delete(fd)
      return fd
    },
  }
  return { fs, journalFds }
}

beforeAll(async () => {
  for (const t of ['io_rows', 'tail_rows', 'down_rows', 'pause_rows']) await cluster.query(`CREATE TABLE ${t} (id int4 PRIMARY KEY, v text)`)
})

describe('/v1/health', () => {
  it('answers 503 storage_io_error while the store cannot commit (EIO), 200 again once it can; clients then hold what Postgres holds', { timeout: 120_000 }, async () => {
    const faulty = createFaultyFs<FsPort>(nodeFs)
    const { pipeline, port } = await start({ storageFs: faulty.fs })
    const client = new ShapeClient(port, 'io_rows')
    await cluster.query(`INSERT INTO io_rows SELECT i, 'before ' || i FROM generate_series(1, 20) i`)
    await caughtUp(pipeline, cluster)
    await client.catchUp()
    expect(await health(port)).toMatchObject({ status: 200, body: { status: 'active' } })

    const rule = faulty.rules.failAlways('fdatasync', { code: 'EIO' })
    await cluster.query(`INSERT INTO io_rows SELECT i, 'during ' || i FROM generate_series(21, 60) i`)
    await cluster.query(`UPDATE io_rows SET v = 'changed' WHERE id <= 5`)
    const down = await healthBecomes(port, 503, 'storage_io_error')
    expect(down.status).toBe('unavailable')
    expect(down.reason).toBe('storage_io_error')
    expect(down.message).toMatch(/EIO/)
    const reason = down.reasons!.find((r) => r.code === 'storage_io_error')!
    expect(new Date(reason.since).toISOString()).toBe(reason.since)
    const res = (await health(port)).res
    expect(res.header('cache-control')).toBe('no-cache, no-store, must-revalidate')
    expect(res.header('content-type')).toMatch(/^application\/json/)
    expect(pipeline.health.commitFailures).toBeGreaterThan(0)

    rule.remove()
    await healthBecomes(port, 200)
    expect((await health(port)).body).toEqual({ status: 'active' })
    await cluster.query(`DELETE FROM io_rows WHERE id = 60`)
    await caughtUp(pipeline, cluster)
    await client.catchUp()
    expect(client.sorted()).toEqual(await selectRows(cluster, 'io_rows'))
    expect(client.rows.size).toBe(59)
  })

  it('answers 503 storage_paused while write-back fails and the tails pass their budget, 200 once a checkpoint writes them out', { timeout: 120_000 }, async () => {
    const { fs, journalFds } = journalAwareFs()
    const faulty = createFaultyFs<FsPort>(fs)
    const logged: Array<{ level: string; message: string; err?: Error }> = []
    const logger = {
      info: (data: object, message: string) => logged.push({ level: 'info', message, ...data }),
      warn: (data: object, message: string) => logged.push({ level: 'warn', message, ...data }),
      error: (data: object, message: string) => logged.push({ level: 'error', message, ...data }),
    }
    const { pipeline, port } = await start({ storageFs: faulty.fs, tailBudgetBytes: 256 * 1024, logger, logDedupeWindowMs: 600_000 })
    const client = new ShapeClient(port, 'tail_rows')
    await client.catchUp()
    // More shapes, each with its own log to write back and a client to converge.
    const filtered = ['id % 2 = 0', 'id % 3 = 0', 'id % 5 = 0'].map((where) => ({ where, client: new ShapeClient(port, 'tail_rows', { where }) }))
    for (const f of filtered) await f.client.catchUp()
    // Shape logs' files refuse writes (a full disk would too); the journal, which commits, still takes them.
    const rules = [
      // Write-back goes through the port's thread-pool write; the journal writes synchronously, only to its own segments.
      faulty.rules.failAlways('write', { code: 'ENOSPC' }),
      faulty.rules.failAlways('writeSync', { code: 'ENOSPC', match: (args) => !journalFds.has(args[0] as number) }),
    ]
    for (let i = 0; i < 4 && !pipeline.store.underPressure; i++) {
      await cluster.query(`INSERT INTO tail_rows SELECT g, repeat('x', 500) FROM generate_series($1::int * 1000 + 1, $1::int * 1000 + 1000) g`, [i])
    }
    const down = await healthBecomes(port, 503, 'storage_paused').catch((error: Error) => {
      throw new Error(`${error.message}; store: ${JSON.stringify(pipeline.store.stats())}; routed ${pipeline.router.lastRoutedLsn}, durable ${pipeline.store.durableLsn}`)
    })
    expect(down.reasons!.map((r) => r.code)).toContain('storage_paused')
    // Nothing can be written back, so the pause lasts: it is still on now.
    expect(pipeline.replication.pauseReasons).toContain('storage_tails')
    expect(pipeline.store.underPressure).toBe(true)

    for (const rule of rules) rule.remove()
    await healthBecomes(port, 200).catch((error: Error) => {
      throw new Error(`${error.message}; store: ${JSON.stringify(pipeline.store.stats())}; logged: ${JSON.stringify(logged.map((l) => [l.message, l.err?.message]))}`)
    })
    await caughtUp(pipeline, cluster)
    await client.catchUp()
    expect(client.sorted()).toEqual(await selectRows(cluster, 'tail_rows'))
    for (const f of filtered) {
      await f.client.catchUp()
      expect(f.client.sorted()).toEqual(await selectRows(cluster, 'tail_rows', f.where))
    }
    // Whatever failed while the disk refused (the live watermark file, write-backs), each distinct error is one line.
    const errorLines = logged.filter((l) => l.message === 'storage error').map((l) => l.err?.message?.replace(/\d+/g, '#'))
    expect(new Set(errorLines).size).toBe(errorLines.length)
    expect(errorLines.some((m) => m?.startsWith('write back shape'))).toBe(true)
  })

  it('answers 503 replication_disconnected once Postgres has been gone longer than the timeout, 200 when it streams again', { timeout: 180_000 }, async () => {
    const { pipeline, port } = await start({ healthReplicationTimeoutMs: 300 })
    const client = new ShapeClient(port, 'down_rows')
    await cluster.query(`INSERT INTO down_rows VALUES (1, 'before')`)
    await caughtUp(pipeline, cluster)
    await client.catchUp()
    await stopPostgres(cluster, 'fast')
    try {
      const down = await healthBecomes(port, 503, 'replication_disconnected')
      expect(down.reason).toBe('replication_disconnected')
      expect(pipeline.replication.disconnectedSince).toBeDefined()
    } finally {
      await startPostgresAgain(cluster)
    }
    await healthBecomes(port, 200)
    await cluster.query(`INSERT INTO down_rows VALUES (2, 'after')`)
    await caughtUp(pipeline, cluster)
    await client.catchUp()
    expect(client.sorted()).toEqual(await selectRows(cluster, 'down_rows'))
  })

  it('answers 503 replication_paused while the stream is paused, 200 when it resumes', { timeout: 60_000 }, async () => {
    const { pipeline, port } = await start()
    pipeline.replication.pause('manual')
    const down = await healthBecomes(port, 503, 'replication_paused')
    expect(down.message).toMatch(/manual/)
    await cluster.query(`INSERT INTO pause_rows VALUES (1, 'while paused')`)
    pipeline.replication.resume('manual')
    await healthBecomes(port, 200)
    const client = new ShapeClient(port, 'pause_rows')
    await caughtUp(pipeline, cluster)
    await client.catchUp()
    expect(client.sorted()).toEqual(await selectRows(cluster, 'pause_rows'))
  })

  it('answers 503 replication_stopped when replication stops for good (its slot dropped)', { timeout: 60_000 }, async () => {
    const { pipeline, port } = await start()
    expect((await health(port)).status).toBe(200)
    await cluster.dropReplicationSlots()
    const down = await healthBecomes(port, 503, 'replication_stopped')
    expect(down.reason).toBe('replication_stopped')
    expect(await pipeline.replication.stopped).toBeInstanceOf(Error)
  })
})
