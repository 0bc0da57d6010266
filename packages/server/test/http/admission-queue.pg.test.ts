import type { AddressInfo } from 'node:net'
import { setTimeout as sleep } from 'node:timers/promises'
import { usePostgres, useTempDir } from '@sluice/test-utils'
import type { Client } from 'pg'
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest'
import { type HttpOptions, buildApp } from '../../src/http/index.js'
import { metricsRoute } from '../../src/http/metrics-route.js'
import { ServerMetrics } from '../../src/metrics.js'
import type { Pipeline } from '../../src/pipeline.js'
import { shapeParams, startPipeline } from '../pipeline/harness.js'
import { type Res, call, shapeUrl } from './http-harness.js'

/**
 * The queue of `offset=-1` requests over the concurrent-initial limit
 * (docs/protocol.md §5.4), on a real server, a real pipeline and a real
 * Postgres. Slots are held by snapshots of a table another session keeps
 * locked: they stay in flight until that session commits, with no clock.
 * What the queue holds is read from /metrics (a real `ServerMetrics`).
 */

const cluster = usePostgres()
const dirs = useTempDir('admission-queue')
let pipeline: Pipeline
const cleanup: Array<() => Promise<unknown>> = []

beforeAll(async () => {
  await cluster.query(`
    CREATE TABLE queued_items (id int4 PRIMARY KEY, n int4 NOT NULL);
    INSERT INTO queued_items SELECT i, i FROM generate_series(1, 50) i;
    CREATE TABLE held (id int4 PRIMARY KEY);
  `)
  pipeline = await startPipeline(cluster, await dirs.make('store'))
})

afterEach(async () => {
  for (const c of cleanup.splice(0).reverse()) await c()
})

afterAll(async () => {
  await pipeline?.stop()
})

interface QueueServer {
  readonly port: number
  /** The admission figures as /metrics has them. */
  scrape(): Promise<{ initialInFlight: number; queued: number; creationQueued: number; abandoned: number; admittedAfterWait: number; refused: (reason: string) => number }>
  /** Polls /metrics until `check` holds (the server acts on a request some time after it is sent). */
  until(check: (m: Awaited<ReturnType<QueueServer['scrape']>>) => boolean): Promise<void>
}

async function start(http: Partial<HttpOptions>): Promise<QueueServer> {
  const metrics = new ServerMetrics({ pipeline, connectionString: cluster.url, slotName: 'sluice_slot', defaultMetrics: false })
  const app = buildApp({ shapes: pipeline.shapeService, http, metrics })
  app.register(metricsRoute, { metrics })
  await app.listen({ port: 0, host: '127.0.0.1' })
  cleanup.push(() => metrics.close())
  cleanup.push(() => app.close())
  const port = (app.server.address() as AddressInfo).port
  const scrape: QueueServer['scrape'] = async () => {
    const text = (await call(port, '/metrics')).text
    const value = (name: string): number => {
      const line = text.split('\n').find((l) => l.startsWith(`${name} `))
      return line === undefined ? Number.NaN : Number(line.slice(name.length + 1))
    }
    return {
      initialInFlight: value('sluice_http_requests_in_flight{kind="initial"}'),
      queued: value('sluice_http_admission_queue_length{kind="initial"}'),
      creationQueued: value('sluice_http_admission_queue_length{kind="creation"}'),
      abandoned: value('sluice_http_admission_queue_abandoned_total'),
      admittedAfterWait: value('sluice_http_admission_queued_admitted_total'),
      refused: (reason) => value(`sluice_http_admission_refused_total{kind="initial",reason="${reason}"}`) || 0,
    }
  }
  const until: QueueServer['until'] = async (check) => {
    for (;;) {
      if (check(await scrape())) return
      await sleep(20)
    }
  }
  return { port, scrape, until }
}

/** Holds `held` locked until the returned release: snapshots of it wait, each keeping its admission slot. */
async function lockHeld(): Promise<{ client: Client; release: () => Promise<void> }> {
  const client = await cluster.connect()
  await client.query('BEGIN; LOCK TABLE held IN ACCESS EXCLUSIVE MODE')
  let released = false
  const release = async (): Promise<void> => {
    if (released) return
    released = true
    await client.query('COMMIT')
    await client.end()
  }
  cleanup.push(release)
  return { client, release }
}

/** A distinct new shape of `table` per `n`. */
const newShape = (table: string, n: number): string => shapeUrl({ table, offset: '-1', where: `id >= ${n}` })

/** Shapes of `held` made so far: each test holds its slots with new ones (a shape made already needs no snapshot). */
let heldShapes = 0

/** Holds `count` initial slots with snapshots of the locked table; resolves once all are in flight. */
function holdSlots(server: QueueServer, count: number): { answers: Array<Promise<Res>>; inFlight: Promise<void> } {
  const answers = Array.from({ length: count }, () => call(server.port, newShape('held', ++heldShapes)))
  return { answers, inFlight: server.until((m) => m.initialInFlight === count) }
}

describe('the initial-request queue (§5.4)', () => {
  it('serves a burst past the limit without a 503 while the queue has room', async () => {
    const server = await start({ maxConcurrentInitial: 2, initialQueueLength: 20, initialQueueWaitMs: 60_000 })
    const lock = await lockHeld()
    const held = holdSlots(server, 2)
    await held.inFlight
    const burst = Array.from({ length: 12 }, (_, i) => call(server.port, newShape('queued_items', 100 + i)))
    await server.until((m) => m.queued === 12)
    await lock.release()
    const answers = await Promise.all([...held.answers, ...burst])
    expect(answers.map((r) => r.status)).toEqual(Array.from({ length: 14 }, () => 200))
    const after = await server.scrape()
    expect(after.admittedAfterWait).toBe(12)
    expect(after.refused('queue_full') + after.refused('queue_wait') + after.refused('limit')).toBe(0)
    await server.until((m) => m.initialInFlight === 0 && m.queued === 0)
  })

  it('answers 503 with retry-after and Electric’s JSON body when the queue is full', async () => {
    const server = await start({ maxConcurrentInitial: 1, initialQueueLength: 2, initialQueueWaitMs: 60_000 })
    const lock = await lockHeld()
    const held = holdSlots(server, 1)
    await held.inFlight
    const queued = [call(server.port, newShape('queued_items', 200)), call(server.port, newShape('queued_items', 201))]
    await server.until((m) => m.queued === 2)
    const refused = await call(server.port, newShape('queued_items', 202))
    expect(refused.status).toBe(503)
    expect(refused.json()).toEqual({ code: 'concurrent_request_limit_exceeded', message: 'Concurrent initial request limit exceeded (limit: 1), please retry' })
    expect(Number(refused.header('retry-after'))).toBeGreaterThanOrEqual(1)
    expect(refused.header('cache-control')).toBe('no-store')
    expect((await server.scrape()).refused('queue_full')).toBe(1)
    await lock.release()
    expect((await Promise.all([...held.answers, ...queued])).map((r) => r.status)).toEqual([200, 200, 200])
  })

  it('answers 503 with retry-after to a request that waited its longest, and frees its place', async () => {
    const server = await start({ maxConcurrentInitial: 1, initialQueueLength: 5, initialQueueWaitMs: 300 })
    const lock = await lockHeld()
    const held = holdSlots(server, 1)
    await held.inFlight
    const waited = await call(server.port, newShape('queued_items', 300))
    expect(waited.status).toBe(503)
    expect(waited.json()).toEqual({ code: 'concurrent_request_limit_exceeded', message: 'Concurrent initial request limit exceeded (limit: 1), please retry' })
    expect(Number(waited.header('retry-after'))).toBeGreaterThanOrEqual(1)
    const m = await server.scrape()
    expect([m.refused('queue_wait'), m.refused('queue_full'), m.queued, m.initialInFlight]).toEqual([1, 0, 0, 1])
    // The expired request created nothing.
    expect(await pipeline.shapeService.find(shapeParams('public', 'queued_items', { where: 'id >= 300' }))).toBeUndefined()
    await lock.release()
    expect((await held.answers[0]!).status).toBe(200)
  })

  it('a client that goes away while queued leaves the queue at once: no slot taken, no shape made', async () => {
    const server = await start({ maxConcurrentInitial: 1, initialQueueLength: 5, initialQueueWaitMs: 60_000 })
    const lock = await lockHeld()
    const held = holdSlots(server, 1)
    await held.inFlight
    const controller = new AbortController()
    const gone = call(server.port, newShape('queued_items', 400), { signal: controller.signal }).catch((e: unknown) => e)
    const stays = call(server.port, newShape('queued_items', 401))
    await server.until((m) => m.queued === 2)
    controller.abort()
    expect(await gone).toBeInstanceOf(Error)
    // Left while the slot it waited for is still held.
    await server.until((m) => m.queued === 1 && m.abandoned === 1)
    expect((await server.scrape()).initialInFlight).toBe(1)
    await lock.release()
    expect((await held.answers[0]!).status).toBe(200)
    expect((await stays).status).toBe(200)
    await server.until((m) => m.initialInFlight === 0 && m.queued === 0)
    expect((await server.scrape()).admittedAfterWait).toBe(1)
    expect(await pipeline.shapeService.find(shapeParams('public', 'queued_items', { where: 'id >= 400' }))).toBeUndefined()
    expect(await pipeline.shapeService.find(shapeParams('public', 'queued_items', { where: 'id >= 401' }))).toBeDefined()
  })

  it('admits queued requests in arrival order', async () => {
    const server = await start({ maxConcurrentInitial: 1, initialQueueLength: 10, initialQueueWaitMs: 60_000 })
    const lock = await lockHeld()
    const held = holdSlots(server, 1)
    await held.inFlight
    const order: number[] = []
    const queued: Array<Promise<Res>> = []
    for (let i = 0; i < 6; i++) {
      queued.push(
        call(server.port, newShape('queued_items', 500 + i)).then((r) => {
          order.push(i)
          return r
        }),
      )
      // Each in the queue before the next is sent: their arrival order is this loop's.
      await server.until((m) => m.queued === i + 1)
    }
    await lock.release()
    expect((await Promise.all(queued)).map((r) => r.status)).toEqual(Array.from({ length: 6 }, () => 200))
    // One slot: each is admitted only when the one before has been answered.
    expect(order).toEqual([0, 1, 2, 3, 4, 5])
  })

  it('closing the server answers queued requests 503 at once instead of waiting for their turn', async () => {
    const metrics = new ServerMetrics({ pipeline, connectionString: cluster.url, slotName: 'sluice_slot', defaultMetrics: false })
    cleanup.push(() => metrics.close())
    const app = buildApp({ shapes: pipeline.shapeService, http: { maxConcurrentInitial: 1, initialQueueLength: 5, initialQueueWaitMs: 60_000 }, metrics })
    app.register(metricsRoute, { metrics })
    await app.listen({ port: 0, host: '127.0.0.1' })
    const port = (app.server.address() as AddressInfo).port
    const lock = await lockHeld()
    const held = call(port, newShape('held', ++heldShapes))
    const queued = call(port, newShape('queued_items', 700))
    for (;;) {
      if ((await call(port, '/metrics')).text.includes('sluice_http_admission_queue_length{kind="initial"} 1')) break
      await sleep(20)
    }
    const closed = app.close()
    const answer = await queued
    expect(answer.status).toBe(503)
    expect(answer.json()).toEqual({ message: 'Server is shutting down' })
    await lock.release()
    expect((await held).status).toBe(200)
    await closed
  })

  it('a new shape past --max-creating-shapes waits for a creation slot, then is served', async () => {
    const server = await start({ maxConcurrentInitial: 10, maxCreatingShapes: 1, initialQueueLength: 5, initialQueueWaitMs: 60_000 })
    const lock = await lockHeld()
    const held = holdSlots(server, 1)
    await held.inFlight
    const waiting = [call(server.port, newShape('queued_items', 800)), call(server.port, newShape('queued_items', 801))]
    await server.until((m) => m.creationQueued === 2)
    // Waiting for a creation slot, they hold their initial ones.
    expect((await server.scrape()).initialInFlight).toBe(3)
    await lock.release()
    expect((await Promise.all([held.answers[0]!, ...waiting])).map((r) => r.status)).toEqual([200, 200, 200])
    await server.until((m) => m.initialInFlight === 0 && m.creationQueued === 0)
  })

  it('a client that goes away while its new shape waits for a creation slot frees its place, and that shape is never made', async () => {
    const server = await start({ maxConcurrentInitial: 10, maxCreatingShapes: 1, initialQueueLength: 2, initialQueueWaitMs: 60_000 })
    const lock = await lockHeld()
    const held = holdSlots(server, 1)
    await held.inFlight
    const controller = new AbortController()
    const gone = [900, 901].map((n) => call(server.port, newShape('queued_items', n), { signal: controller.signal }).catch((e: unknown) => e))
    await server.until((m) => m.creationQueued === 2)
    controller.abort()
    for (const answer of gone) expect(await answer).toBeInstanceOf(Error)
    // Their places are free: a request that stays waits in the queue instead of a 503 for a full one.
    await server.until((m) => m.creationQueued === 0 && m.initialInFlight === 1)
    const stays = call(server.port, newShape('queued_items', 902))
    await server.until((m) => m.creationQueued === 1)
    await lock.release()
    expect((await held.answers[0]!).status).toBe(200)
    expect((await stays).status).toBe(200)
    for (const n of [900, 901]) expect(await pipeline.shapeService.find(shapeParams('public', 'queued_items', { where: `id >= ${n}` }))).toBeUndefined()
  })

  it('with a queue of length 0, refuses past the limit at once as before', async () => {
    const server = await start({ maxConcurrentInitial: 1, initialQueueLength: 0 })
    const lock = await lockHeld()
    const held = holdSlots(server, 1)
    await held.inFlight
    const refused = await call(server.port, newShape('queued_items', 600))
    expect(refused.status).toBe(503)
    expect(Number(refused.header('retry-after'))).toBeGreaterThanOrEqual(6)
    expect((await server.scrape()).refused('limit')).toBe(1)
    await lock.release()
    expect((await held.answers[0]!).status).toBe(200)
  })
})
