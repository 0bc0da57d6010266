import { connect, type Socket } from 'node:net'
import type { AddressInfo } from 'node:net'
import { setFlagsFromString } from 'node:v8'
import { runInNewContext } from 'node:vm'
import { loadSendfile } from '@sluice/sendfile'
import { useTempDir, usePostgres } from '@sluice/test-utils'
import type { FastifyInstance } from 'fastify'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { buildApp } from '../../../src/http/index.js'
import { LiveWaiters } from '../../../src/http/live/index.js'
import type { Pipeline } from '../../../src/pipeline.js'
import { startPipeline } from '../../pipeline/harness.js'
import { call, shapeUrl } from '../http-harness.js'

/**
 * Parked long-polls over real sockets: a client that goes away frees what its
 * request held (its waiter and its admission slot), however far the request
 * had got, many thousands of times over.
 */
const cluster = usePostgres()
const dirs = useTempDir('parked')
/** Clients per round: also the server's limit of concurrent live requests, so one slot kept by a gone client shows as a 503. */
const ROUND = 500
const CYCLES = Number(process.env.SOAK === '1' ? 50_000 : 10_000)
/** Longest wait for the server to reach a state it must reach (a failure guard, not a timing assertion). */
const SETTLE_MS = 60_000

let pipeline: Pipeline
let app: FastifyInstance
let waiters: LiveWaiters
let port: number

beforeAll(async () => {
  await cluster.query('CREATE TABLE parked (id int4 PRIMARY KEY, v text); INSERT INTO parked VALUES (1, $$a$$)')
  pipeline = await startPipeline(cluster, await dirs.make('store'))
  waiters = new LiveWaiters({ store: pipeline.shapeService })
  // With the native addon, as the server runs: the requests that wait are parked outside node:http.
  const addon = loadSendfile()
  if (!addon.available) throw new Error(`the native addon is not available: ${addon.reason}`)
  app = buildApp({ shapes: pipeline.shapeService, waiters, http: { longPollTimeoutMs: 600_000, maxConcurrentExisting: ROUND }, addon: addon.sendfile })
  await app.listen({ port: 0, host: '127.0.0.1' })
  port = (app.server.address() as AddressInfo).port
})

afterAll(async () => {
  waiters?.close()
  await app?.close()
  await pipeline?.stop()
})

async function until(what: string, check: () => boolean): Promise<void> {
  const deadline = performance.now() + SETTLE_MS
  while (!check()) {
    if (performance.now() > deadline) throw new Error(`never: ${what}`)
    await new Promise((r) => setTimeout(r, 5))
  }
}

/** Opens `n` sockets, each sending one live request; resolves with them once every request is written. */
async function sendLive(n: number, path: string, statuses: string[]): Promise<Socket[]> {
  const sockets = await Promise.all(
    Array.from(
      { length: n },
      () =>
        new Promise<Socket>((resolve, reject) => {
          const socket = connect(port, '127.0.0.1', () => {
            socket.write(`GET ${path} HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n`, () => resolve(socket))
          })
          // Anything the server answers before the client leaves (a 503, say) is remembered: its status line.
          socket.once('data', (bytes: Buffer) => statuses.push(bytes.toString('latin1').split('\r\n')[0]!))
          socket.on('error', reject)
        }),
    ),
  )
  return sockets
}

describe('parked long-polls and clients that go away', () => {
  it(`${CYCLES} connect-and-abort cycles leave no waiter, no admission slot and no heap growth`, async () => {
    setFlagsFromString('--expose-gc')
    const gc = runInNewContext('gc') as () => void
    const first = await call(port, shapeUrl({ table: 'parked', offset: '-1' }))
    const handle = first.header('electric-handle')!
    const path = shapeUrl({ table: 'parked', offset: first.header('electric-offset')!, handle, live: 'true' })
    const statuses: string[] = []

    // Odd rounds leave once every request is parked; even rounds at once, wherever their requests have got to.
    const round = async (r: number): Promise<void> => {
      const sockets = await sendLive(ROUND, path, statuses)
      if (r % 2 === 1) await until(`${ROUND} parked`, () => waiters.size === ROUND)
      for (const s of sockets) s.destroy()
      await until('every waiter gone', () => waiters.size === 0)
    }

    for (let r = 1; r <= 4; r++) await round(r) // warm up
    // The even rounds' requests may still be on their way to parking when their clients leave: let them finish.
    await new Promise((r) => setTimeout(r, 200))
    gc()
    const heapBefore = process.memoryUsage().heapUsed
    for (let r = 1; r <= CYCLES / ROUND; r++) await round(r)
    await new Promise((r) => setTimeout(r, 200))
    expect(waiters.size).toBe(0)
    gc()
    const heapAfter = process.memoryUsage().heapUsed

    expect(statuses).toEqual([])
    expect(waiters.has(handle)).toBe(false)
    // Every admission slot is back: a full round of live requests parks, and each is answered when a write comes.
    const statusesAfter: string[] = []
    const sockets = await sendLive(ROUND, path, statusesAfter)
    await until(`${ROUND} parked after the cycles`, () => waiters.size === ROUND)
    await cluster.query(`INSERT INTO parked VALUES (2, 'b')`)
    await until('every parked request answered', () => statusesAfter.length === ROUND)
    expect(new Set(statusesAfter)).toEqual(new Set(['HTTP/1.1 200 OK']))
    for (const s of sockets) s.destroy()
    // A parked request held is a few KB (docs/performance-notes.md): 10k of them kept would be tens of MB.
    expect(heapAfter - heapBefore).toBeLessThan(4 * 1024 * 1024)
  }, 300_000)
})
