// One write wakes many live requests of one shape: they are answered from one read of the new entries.
// A real pipeline on a real Postgres, a real HTTP port, and the server's own /metrics counter of log reads.
import { type IncomingMessage, get } from 'node:http'
import type { AddressInfo } from 'node:net'
import { parseOffset, upToDateMessage } from '@sluice/protocol'
import { usePostgres, useTempDir } from '@sluice/test-utils'
import type { FastifyInstance } from 'fastify'
import { afterEach, describe, expect, it } from 'vitest'
import { LiveWaiters, frameEntries, frameEvent } from '../../../src/http/live/index.js'
import { buildApp } from '../../../src/http/index.js'
import { logBody } from '../../../src/http/log-body.js'
import { metricsRoute } from '../../../src/http/metrics-route.js'
import { ServerMetrics } from '../../../src/metrics.js'
import type { Pipeline } from '../../../src/pipeline.js'
import { readSpans } from '@sluice/storage'
import { startPipeline } from '../../pipeline/harness.js'
import { type Res, call, shapeUrl } from '../http-harness.js'

const cluster = usePostgres()
const dirs = useTempDir('shared-reads')
const cleanup: Array<() => Promise<unknown> | unknown> = []
afterEach(async () => {
  for (const c of cleanup.splice(0).reverse()) await c()
})

interface Setup {
  pipeline: Pipeline
  port: number
  waiters: LiveWaiters
  logReads(): Promise<number>
}

async function setup(): Promise<Setup> {
  const pipeline = await startPipeline(cluster, await dirs.make('store'))
  cleanup.push(() => pipeline.stop())
  const metrics = new ServerMetrics({ pipeline, connectionString: cluster.url, slotName: 'sluice_slot', sampleMaxAgeMs: 0, defaultMetrics: false })
  cleanup.push(() => metrics.close())
  const waiters = new LiveWaiters({ store: pipeline.shapeService, resolutionMs: 20 })
  cleanup.push(() => waiters.close())
  const app: FastifyInstance = buildApp({ shapes: pipeline.shapeService, http: { longPollTimeoutMs: 30_000, sseTimeoutMs: 30_000 }, waiters, metrics })
  app.register(metricsRoute, { metrics })
  await app.listen({ port: 0, host: '127.0.0.1' })
  cleanup.push(() => app.close())
  const port = (app.server.address() as AddressInfo).port
  const logReads = async (): Promise<number> => {
    const text = (await call(port, '/metrics')).text
    const line = text.split('\n').find((l) => l.startsWith('sluice_http_log_reads_total '))
    if (line === undefined) throw new Error('no sluice_http_log_reads_total in /metrics')
    return Number(line.slice(line.lastIndexOf(' ') + 1))
  }
  return { pipeline, port, waiters, logReads }
}

/** Follows the shape from offset=-1 to up-to-date: its handle and the head offset. */
async function syncTo(port: number, table: string): Promise<{ handle: string; offset: string }> {
  let offset = '-1'
  let handle: string | undefined
  for (;;) {
    const res = await call(port, shapeUrl({ table, offset, ...(handle === undefined ? {} : { handle }) }))
    expect(res.status).toBe(200)
    handle = res.header('electric-handle')!
    offset = res.header('electric-offset')!
    if (res.header('electric-up-to-date') !== undefined) return { handle, offset }
  }
}

async function until(cond: () => boolean, what: string): Promise<void> {
  for (let i = 0; i < 1000; i++) {
    if (cond()) return
    await new Promise((r) => setTimeout(r, 10))
  }
  throw new Error(`timed out waiting for ${what}`)
}

/** An SSE stream, collecting its text, until `stop`. */
function sse(port: number, path: string): { text: () => string; stop: () => void; open: Promise<IncomingMessage> } {
  let text = ''
  let req: ReturnType<typeof get> | undefined
  const open = new Promise<IncomingMessage>((resolve, reject) => {
    req = get({ host: '127.0.0.1', port, path, headers: { accept: 'text/event-stream' } }, (res) => {
      res.setEncoding('utf8')
      res.on('data', (c: string) => (text += c))
      res.on('error', () => {})
      resolve(res)
    })
    req.on('error', reject)
  })
  return { text: () => text, stop: () => req?.destroy(), open }
}

const ROWS = 50

describe('live requests woken by one write', () => {
  it('long-polls at one offset share one read; at another offset, one more; SSE streams share it too; bodies are those of the unshared path', async () => {
    const table = 'shared_reads_items'
    await cluster.query(`DROP TABLE IF EXISTS ${table}`)
    await cluster.query(`CREATE TABLE ${table} (id int PRIMARY KEY, v text)`)
    await cluster.query(`INSERT INTO ${table} SELECT g, 'seed' FROM generate_series(1, 3) g`)
    const { pipeline, port, waiters, logReads } = await setup()
    const { handle, offset } = await syncTo(port, table)

    // Group A: parked at the head. Group B: parked at an offset past the head (waiting for the log to reach it).
    const A = 12
    const B = 5
    const S = 6
    const ahead = `${parseOffset(offset).tx + 1n}_0`
    const live = (at: string): Promise<Res> => call(port, shapeUrl({ table, handle, offset: at, live: 'true', cursor: '1' }))
    const groupA = Array.from({ length: A }, () => live(offset))
    const groupB = Array.from({ length: B }, () => live(ahead))
    const streams = Array.from({ length: S }, () => sse(port, shapeUrl({ table, handle, offset, live: 'true', live_sse: 'true', cursor: '1' })))
    cleanup.push(() => streams.forEach((s) => s.stop()))
    await Promise.all(streams.map((s) => s.open))
    await until(() => waiters.size === A + B + S, `${A + B + S} parked requests (have ${waiters.size})`)
    const before = await logReads()

    // One transaction of ROWS rows: one flush wakes every parked request.
    await cluster.query(`INSERT INTO ${table} SELECT g, repeat('x', g) FROM generate_series(100, ${99 + ROWS}) g`)
    const [a, b] = [await Promise.all(groupA), await Promise.all(groupB)]
    await until(() => streams.every((s) => s.text().includes('"up-to-date"')), 'every SSE stream to get the write')
    const reads = (await logReads()) - before
    // One read for group A and the SSE streams (the same range), one for group B (another start offset).
    expect(reads).toBe(2)

    for (const res of [...a, ...b]) {
      expect(res.status).toBe(200)
      expect((res.json() as unknown[]).length).toBe(ROWS + 1)
    }
    const log = pipeline.shapeService.get(handle)!
    // The unshared path's bytes for the same ranges.
    const expected = async (after: string): Promise<Buffer> => {
      const read = log.read(parseOffset(after))
      const body = await logBody(read, upToDateMessage(read.nextOffset.tx))
      const bytes = Buffer.from(body.bytes)
      body.done()
      return bytes
    }
    const wantA = await expected(offset)
    const wantB = await expected(ahead)
    for (const res of a) expect(res.body.equals(wantA)).toBe(true)
    for (const res of b) expect(res.body.equals(wantB)).toBe(true)
    expect(a[0]!.header('electric-offset')).toBe(b[0]!.header('electric-offset'))

    const read = log.read(parseOffset(offset))
    const events = Buffer.concat([frameEntries(readSpans(read)).events, frameEvent(upToDateMessage(read.nextOffset.tx))]).toString('utf8')
    read.release()
    for (const s of streams) expect(s.text()).toBe(events)
  })

  it('a shared range over 1 MiB goes out in pieces: one read, and every body that of the unshared path', async () => {
    const table = 'shared_reads_big'
    await cluster.query(`DROP TABLE IF EXISTS ${table}`)
    await cluster.query(`CREATE TABLE ${table} (id int PRIMARY KEY, v text)`)
    const { pipeline, port, waiters, logReads } = await setup()
    const { handle, offset } = await syncTo(port, table)
    const polls = Array.from({ length: 4 }, () => call(port, shapeUrl({ table, handle, offset, live: 'true', cursor: '1' })))
    await until(() => waiters.size === 4, '4 parked long-polls')
    const before = await logReads()
    // About 2.4 MB of rows in one transaction.
    await cluster.query(`INSERT INTO ${table} SELECT g, repeat(md5(g::text), 1900) FROM generate_series(1, 40) g`)
    const done = await Promise.all(polls)
    expect((await logReads()) - before).toBe(1)
    const read = pipeline.shapeService.get(handle)!.read(parseOffset(offset))
    const body = await logBody(read, upToDateMessage(read.nextOffset.tx))
    const want = Buffer.from(body.bytes)
    body.done()
    expect(want.length).toBeGreaterThan(2 * 1024 * 1024)
    for (const res of done) {
      expect(res.status).toBe(200)
      expect(res.header('content-length')).toBe(String(want.length))
      expect(res.body.equals(want)).toBe(true)
    }
  })

  it('a later write is read again: nothing is served from an earlier burst', async () => {
    const table = 'shared_reads_again'
    await cluster.query(`DROP TABLE IF EXISTS ${table}`)
    await cluster.query(`CREATE TABLE ${table} (id int PRIMARY KEY, v text)`)
    const { port, waiters, logReads } = await setup()
    let { handle, offset } = await syncTo(port, table)
    for (let round = 0; round < 3; round++) {
      const polls = Array.from({ length: 8 }, () => call(port, shapeUrl({ table, handle, offset, live: 'true', cursor: '1' })))
      await until(() => waiters.size === 8, '8 parked long-polls')
      const before = await logReads()
      await cluster.query(`INSERT INTO ${table} VALUES ($1, $2)`, [round, `round ${round}`])
      const done = await Promise.all(polls)
      expect((await logReads()) - before).toBe(1)
      for (const res of done) {
        expect(res.status).toBe(200)
        expect(res.body.equals(done[0]!.body)).toBe(true)
        const rows = (res.json() as Array<{ value?: { v?: string } }>).filter((m) => m.value !== undefined)
        expect(rows.map((m) => m.value!.v)).toEqual([`round ${round}`])
      }
      offset = done[0]!.header('electric-offset')!
      handle = done[0]!.header('electric-handle')!
    }
  })
})
