import { connect } from 'node:net'
import { useTempDir, usePostgres } from '@sluice/test-utils'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { Pipeline } from '../../src/pipeline.js'
import { startPipeline } from '../pipeline/harness.js'
import { type Res, type TestServer, call, shapeUrl, startServer } from './http-harness.js'

/**
 * Requests at the edges found in review: what an HTTP cache may store for an
 * answer without an Origin, a column whose name Node cannot put in a header as
 * it is, and a client that sends its request body a byte at a time.
 */

const cluster = usePostgres()
const dirs = useTempDir('http-edges')
let pipeline: Pipeline
let server: TestServer
const REQUEST_TIMEOUT_MS = 500

beforeAll(async () => {
  await cluster.query(`
    CREATE TABLE plain (id int4 PRIMARY KEY, title text);
    INSERT INTO plain VALUES (1, 'one');
    CREATE TABLE "odd" (id int4 PRIMARY KEY, "del${'\x7f'}name" text);
    INSERT INTO "odd" VALUES (1, 'x');
  `)
  pipeline = await startPipeline(cluster, await dirs.make('store'))
  server = await startServer(pipeline, { longPollTimeoutMs: 1000, requestTimeoutMs: REQUEST_TIMEOUT_MS })
})

afterAll(async () => {
  await server?.close()
  await pipeline?.stop()
})

const get = (path: string, headers: Record<string, string> = {}): Promise<Res> => call(server.port, path, { headers })

describe('CORS and HTTP caches', () => {
  it('an answer without an Origin (allow-origin *) still says vary: origin, so a cache never hands it to a browser origin', async () => {
    const bare = await get(shapeUrl({ table: 'plain', offset: '-1' }))
    expect(bare.status).toBe(200)
    expect(bare.header('access-control-allow-origin')).toBe('*')
    expect(bare.header('vary')).toBe('origin')
    const fromApp = await get(shapeUrl({ table: 'plain', offset: '-1' }), { origin: 'https://app.example' })
    expect(fromApp.header('access-control-allow-origin')).toBe('https://app.example')
    expect(fromApp.header('vary')).toBe('origin')
  })
})

describe('a column name with a DEL character', () => {
  it('is sent in electric-schema as its JSON escape instead of failing every read with 500', async () => {
    for (let i = 0; i < 2; i++) {
      const res = await get(shapeUrl({ table: 'odd', offset: '-1' }))
      expect(res.status).toBe(200)
      const schema = JSON.parse(res.header('electric-schema')!) as Record<string, unknown>
      expect(Object.keys(schema).sort()).toEqual(['del\x7fname', 'id'])
      expect(res.header('electric-schema')).toContain('\\u007f')
    }
  })
})

describe('a request body sent a byte at a time', () => {
  it('is cut when the whole request has not arrived within requestTimeoutMs', async () => {
    const socket = connect(server.port, '127.0.0.1')
    await new Promise<void>((resolve) => socket.once('connect', () => resolve()))
    const body = JSON.stringify({ where: 'id > 0', limit: 1, order_by: 'id' })
    socket.write(
      `POST ${shapeUrl({ table: 'plain', offset: '-1' })} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: ${body.length}\r\n\r\n`,
    )
    let received = ''
    socket.on('data', (chunk: Buffer) => (received += chunk.toString('latin1')))
    const closed = new Promise<void>((resolve) => socket.once('close', () => resolve()))
    socket.on('error', () => {})
    const started = Date.now()
    let sent = 0
    const trickle = setInterval(() => {
      if (sent < body.length && !socket.destroyed) socket.write(body[sent++]!)
    }, 200)
    await closed
    clearInterval(trickle)
    expect(sent).toBeLessThan(body.length)
    expect(Date.now() - started).toBeGreaterThanOrEqual(REQUEST_TIMEOUT_MS - 50)
    expect(received).toMatch(/^HTTP\/1\.1 408 /)
  })

  it('a long-poll is not a request still arriving: it is held past requestTimeoutMs and answered', async () => {
    const first = await get(shapeUrl({ table: 'plain', offset: '-1' }))
    const head = await get(shapeUrl({ table: 'plain', offset: first.header('electric-offset')!, handle: first.header('electric-handle')! }))
    const started = Date.now()
    const live = await get(
      shapeUrl({ table: 'plain', offset: head.header('electric-offset')!, handle: first.header('electric-handle')!, live: 'true', cursor: head.header('electric-cursor') ?? '0' }),
    )
    expect(live.status).toBe(200)
    expect(Date.now() - started).toBeGreaterThan(REQUEST_TIMEOUT_MS)
  })
})
