import { execFileSync } from 'node:child_process'
import { closeSync, openSync, unlinkSync, writeSync } from 'node:fs'
import { join } from 'node:path'
import { type FsPort, nodeFs } from '@sluice/storage'
import { createFaultyFs, usePostgres, useTempDir } from '@sluice/test-utils'
import type { FastifyInstance } from 'fastify'
import { afterEach, beforeAll, describe, expect, it } from 'vitest'
import { buildApp } from '../../src/http/index.js'
import { metricsRoute } from '../../src/http/metrics-route.js'
import { createLogger } from '../../src/logger.js'
import { ServerMetrics } from '../../src/metrics.js'
import type { Pipeline } from '../../src/pipeline.js'
import { call } from '../http/http-harness.js'
import { caughtUp, startPipeline } from '../pipeline/harness.js'
import { ShapeClient, health, healthBecomes, selectRows, until } from './health-harness.js'

/**
 * The disk under the store fills up while Postgres keeps committing, then
 * space comes back. Where the test may mount (root), the store lives on a
 * small tmpfs of its own, filled to its last page by a ballast file and freed
 * by deleting it: a real full disk, every layer of the store seeing the
 * kernel's ENOSPC. Elsewhere (or with FULL_DISK=faulty-fs) the
 * fault-injecting filesystem fails the store's writes, and the creation of
 * files, with ENOSPC until it is cleared. Either way: health says 503
 * storage_disk_full and the metrics agree, identical errors are logged once
 * with a count, health comes back to 200 by itself once there is space, and
 * clients of the shape (one that followed it before the fault, one starting
 * afresh) end up with exactly the rows Postgres has.
 */
const cluster = usePostgres()
const dirs = useTempDir('full-disk')

/** The tmpfs: room for the store's files, small enough to fill in a moment. */
const TMPFS_SIZE = '32m'
/** Failed commits to wait for before space comes back, so that the log has repeats to fold. */
const FAILURES_BEFORE_FREEING = 10

interface FullDisk {
  readonly kind: 'tmpfs' | 'faulty-fs'
  readonly storageDir: string
  readonly storageFs: FsPort | undefined
  fill(): void
  free(): void
  /** After the pipeline has stopped. */
  release(): void
}

/** A tmpfs mounted on `dir` (root only), else undefined. */
function tmpfsDisk(dir: string): FullDisk | undefined {
  try {
    execFileSync('mount', ['-t', 'tmpfs', '-o', `size=${TMPFS_SIZE},mode=0700`, 'sluice-full-disk', dir], { stdio: 'pipe' })
  } catch {
    return undefined
  }
  const ballast = join(dir, 'ballast')
  return {
    kind: 'tmpfs',
    storageDir: join(dir, 'store'),
    storageFs: undefined,
    fill: () => {
      const fd = openSync(ballast, 'w')
      try {
        // Big writes first, then page-sized ones for what they left: the disk ends with no page free.
        for (const size of [1024 * 1024, 4096]) {
          const chunk = Buffer.alloc(size, 1)
          for (;;) {
            try {
              if (writeSync(fd, chunk) < size) break
            } catch (error) {
              if ((error as NodeJS.ErrnoException).code === 'ENOSPC') break
              throw error
            }
          }
        }
      } finally {
        closeSync(fd)
      }
    },
    free: () => unlinkSync(ballast),
    release: () => execFileSync('umount', [dir], { stdio: 'pipe' }),
  }
}

function faultyDisk(dir: string): FullDisk {
  const faulty = createFaultyFs<FsPort>(nodeFs)
  return {
    kind: 'faulty-fs',
    storageDir: join(dir, 'store'),
    storageFs: faulty.fs,
    fill: () => {
      for (const method of ['writeSync', 'write', 'openSync'] as const) faulty.rules.failAlways(method, { code: 'ENOSPC' })
    },
    free: () => faulty.rules.clear(),
    release: () => {},
  }
}

type LogLine = { level: number; msg: string; err?: { message?: string; code?: string }; repeated?: number; failures?: number }

let cleanup: Array<() => Promise<void> | void> = []

afterEach(async () => {
  for (const step of cleanup.reverse()) await step()
  cleanup = []
})

beforeAll(async () => {
  await cluster.query(`CREATE TABLE full_rows (id int4 PRIMARY KEY, v text)`)
})

async function scrape(port: number): Promise<string> {
  const res = await call(port, '/metrics')
  expect(res.status).toBe(200)
  return res.text
}

function metric(text: string, name: string): number | undefined {
  const line = text.split('\n').find((l) => l.startsWith(`${name} `))
  return line === undefined ? undefined : Number(line.slice(name.length + 1))
}

describe('a full disk under the store', () => {
  it('health 503 storage_disk_full with metrics to match and folded logs; health 200 once space is back; clients converge to Postgres', { timeout: 240_000 }, async () => {
    const dir = await dirs.make('mnt')
    // FULL_DISK=faulty-fs runs the fallback where a tmpfs could be mounted.
    const disk = (process.env['FULL_DISK'] === 'faulty-fs' ? undefined : tmpfsDisk(dir)) ?? faultyDisk(dir)
    cleanup.push(() => disk.release())
    console.log(`full-disk test runs on: ${disk.kind}`)

    const lines: LogLine[] = []
    const logger = createLogger({ level: 'info', destination: { write: (text: string) => void lines.push(JSON.parse(text) as LogLine) } })
    const pipeline: Pipeline = await startPipeline(cluster, disk.storageDir, {
      ...(disk.storageFs === undefined ? {} : { storageFs: disk.storageFs }),
      logger,
      // The whole fault within one window: each distinct error is written once, its repeats summed at recovery.
      logDedupeWindowMs: 600_000,
    })
    cleanup.push(() => pipeline.stop().catch(() => {}))
    const metrics = new ServerMetrics({ pipeline, connectionString: cluster.url, slotName: 'sluice_slot', defaultMetrics: false })
    cleanup.push(() => metrics.close())
    const app: FastifyInstance = buildApp({ shapes: pipeline.shapeService, metrics })
    app.register(metricsRoute, { metrics })
    await app.listen({ port: 0, host: '127.0.0.1' })
    cleanup.push(() => app.close())
    const port = (app.server.address() as { port: number }).port

    const follower = new ShapeClient(port, 'full_rows')
    await cluster.query(`INSERT INTO full_rows SELECT i, 'before ' || i FROM generate_series(1, 100) i`)
    await caughtUp(pipeline, cluster)
    await follower.catchUp()
    expect(follower.rows.size).toBe(100)
    expect((await health(port)).status).toBe(200)
    expect(metric(await scrape(port), 'sluice_healthy')).toBe(1)

    disk.fill()
    // Postgres keeps committing; the store's next commit needs a page the disk no longer has.
    let next = 101
    const down = await until('health to report the full disk', async () => {
      await cluster.query(`INSERT INTO full_rows SELECT i, repeat('d', 200) FROM generate_series($1::int, $1::int + 49) i`, [next])
      next += 50
      const h = await health(port)
      return h.status === 503 && h.body.reasons?.some((r) => r.code === 'storage_disk_full') ? h.body : undefined
    })
    expect(down.status).toBe('unavailable')
    expect(down.message).toMatch(/ENOSPC/)
    await cluster.query(`UPDATE full_rows SET v = 'updated while full' WHERE id % 7 = 0`)
    await cluster.query(`DELETE FROM full_rows WHERE id % 11 = 0`)
    await until(`${FAILURES_BEFORE_FREEING} failed commits`, async () => (pipeline.health.commitFailures >= FAILURES_BEFORE_FREEING ? true : undefined))

    const during = await scrape(port)
    expect(metric(during, 'sluice_healthy')).toBe(0)
    expect(metric(during, 'sluice_health_reason{code="storage_disk_full"}')).toBe(1)
    expect(metric(during, 'sluice_storage_commit_failures_total')).toBeGreaterThanOrEqual(FAILURES_BEFORE_FREEING)
    // Still 503: nothing frees space by itself.
    expect((await health(port)).status).toBe(503)

    disk.free()
    await healthBecomes(port, 200)
    const after = await scrape(port)
    expect(metric(after, 'sluice_healthy')).toBe(1)
    expect(metric(after, 'sluice_health_reason{code="storage_disk_full"}')).toBe(0)

    await cluster.query(`INSERT INTO full_rows SELECT i, 'after ' || i FROM generate_series($1::int, $1::int + 9) i`, [next])
    await caughtUp(pipeline, cluster)
    const expected = await selectRows(cluster, 'full_rows')
    await follower.catchUp()
    expect(follower.sorted()).toEqual(expected)
    const fresh = new ShapeClient(port, 'full_rows')
    await fresh.catchUp()
    expect(fresh.sorted()).toEqual(expected)

    // Every distinct error once in full; its repeats in one summary line, written when commits resumed.
    const errorLines = lines.filter((l) => l.msg === 'storage error' || l.msg.startsWith('storage error (repeated'))
    const full = errorLines.filter((l) => l.msg === 'storage error')
    // Identical up to numbers (the next journal segment's name): LogDedupe's errorKey.
    const keys = full.map((l) => `${l.err?.code}\0${l.err?.message?.replace(/\d+/g, '#')}`)
    expect(new Set(keys).size).toBe(keys.length)
    const summaries = errorLines.filter((l) => l.repeated !== undefined)
    expect(summaries.length).toBeGreaterThan(0)
    expect(summaries.length).toBeLessThanOrEqual(full.length)
    const failures = pipeline.health.commitFailures
    expect(errorLines.length).toBeLessThan(failures)
    const recovered = lines.find((l) => l.msg === 'storage commits again')
    expect(recovered?.failures).toBeGreaterThanOrEqual(FAILURES_BEFORE_FREEING)
    const disconnects = lines.filter((l) => l.msg === 'replication disconnected')
    expect(new Set(disconnects.map((l) => l.err?.message?.replace(/\d+/g, '#'))).size).toBe(disconnects.length)
  })
})
