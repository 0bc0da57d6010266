import { type AddressInfo, type Socket, connect } from 'node:net'
import { setTimeout as sleep } from 'node:timers/promises'
import { type Sendfile, loadSendfile } from '@sluice/sendfile'
import { useTempDir, usePostgres } from '@sluice/test-utils'
import type { FastifyInstance } from 'fastify'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { type HttpOptions, buildApp } from '../../../src/http/index.js'
import { LiveWaiters } from '../../../src/http/live/index.js'
import type { Pipeline } from '../../../src/pipeline.js'
import { startPipeline } from '../../pipeline/harness.js'
import { call, shapeUrl } from '../http-harness.js'

/**
 * Long-polls parked outside node:http (src/http/parked-long-polls.ts), over
 * raw sockets: their answers are the bytes node:http writes for the same
 * request (two apps on one pipeline, one parking and one not), the
 * connection carries the client's next requests, and clients that leave,
 * read slowly, pipeline or send garbage lose nothing and leak nothing.
 */
const cluster = usePostgres()
const dirs = useTempDir('parked-answers')
const LONG_POLL_MS = 1_500

let pipeline: Pipeline
let addon: Sendfile
let parkingApp: FastifyInstance
let plainApp: FastifyInstance
let parkingPort: number
let plainPort: number
let parkingWaiters: LiveWaiters
let plainWaiters: LiveWaiters

async function listen(app: FastifyInstance): Promise<number> {
  await app.listen({ port: 0, host: '127.0.0.1' })
  return (app.server.address() as AddressInfo).port
}

beforeAll(async () => {
  const load = loadSendfile()
  if (!load.available) throw new Error(`the native addon is not available: ${load.reason}`)
  addon = load.sendfile
  await cluster.query('CREATE TABLE answers (id int4 PRIMARY KEY, v text); INSERT INTO answers VALUES (1, $$a$$)')
  pipeline = await startPipeline(cluster, await dirs.make('store'))
  parkingWaiters = new LiveWaiters({ store: pipeline.shapeService })
  plainWaiters = new LiveWaiters({ store: pipeline.shapeService })
  parkingApp = buildApp({ shapes: pipeline.shapeService, waiters: parkingWaiters, http: { longPollTimeoutMs: LONG_POLL_MS }, addon })
  plainApp = buildApp({ shapes: pipeline.shapeService, waiters: plainWaiters, http: { longPollTimeoutMs: LONG_POLL_MS, parkLongPolls: false }, addon })
  parkingPort = await listen(parkingApp)
  plainPort = await listen(plainApp)
})

afterAll(async () => {
  parkingWaiters?.close()
  plainWaiters?.close()
  await parkingApp?.close()
  await plainApp?.close()
  await pipeline?.stop()
})

/** A raw keep-alive connection that collects what it receives. */
class Client {
  readonly socket: Socket
  private received = Buffer.alloc(0)
  closed = false

  constructor(port: number) {
    this.socket = connect(port, '127.0.0.1')
    this.socket.on('data', (chunk: Buffer) => (this.received = Buffer.concat([this.received, chunk])))
    this.socket.on('close', () => (this.closed = true))
    this.socket.on('error', () => {})
  }

  get(path: string, headers = ''): void {
    this.socket.write(`GET ${path} HTTP/1.1\r\nhost: 127.0.0.1\r\norigin: http://app.example\r\n${headers}\r\n`)
  }

  /** The next whole response (by content-length), taken off what was received. */
  async response(timeoutMs = 10_000): Promise<{ head: string; status: number; headers: Array<[string, string]>; body: string }> {
    const deadline = Date.now() + timeoutMs
    for (;;) {
      const end = this.received.indexOf('\r\n\r\n')
      if (end >= 0) {
        const head = this.received.subarray(0, end).toString('latin1')
        const length = Number(/\r\ncontent-length: (\d+)/i.exec(head)?.[1] ?? 0)
        if (this.received.length >= end + 4 + length) {
          const body = this.received.subarray(end + 4, end + 4 + length).toString('utf8')
          this.received = this.received.subarray(end + 4 + length)
          const [statusLine, ...lines] = head.split('\r\n')
          const headers = lines.map((line): [string, string] => {
            const at = line.indexOf(': ')
            return at < 0 ? [line.slice(0, -1), ''] : [line.slice(0, at), line.slice(at + 2)]
          })
          return { head, status: Number(statusLine!.split(' ')[1]), headers, body }
        }
      }
      if (Date.now() > deadline) throw new Error(`no whole response within ${timeoutMs} ms; have ${JSON.stringify(this.received.toString('latin1'))}`)
      if (this.closed && this.received.length === 0) throw new Error('the connection closed')
      await sleep(5)
    }
  }

  close(): void {
    this.socket.destroy()
  }
}

/** Headers whose values differ between two answers of the same request by design (time, randomness). */
const VARYING = new Set(['Date', 'electric-cursor', 'etag'])

function comparable(headers: Array<[string, string]>): Array<[string, string]> {
  return headers.map(([name, value]) => [name, VARYING.has(name) ? '*' : value])
}

async function until(check: () => boolean | Promise<boolean>, what: string): Promise<void> {
  const deadline = Date.now() + 20_000
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`)
    await sleep(5)
  }
}

/** A live request at the head of the table's shape (followed there first), and the shape's handle. */
async function livePath(table = 'answers'): Promise<{ path: string; handle: string }> {
  let res = await call(parkingPort, shapeUrl({ table, offset: '-1' }), CLOSE)
  const handle = res.header('electric-handle')!
  while (res.header('electric-up-to-date') === undefined) {
    res = await call(parkingPort, shapeUrl({ table, offset: res.header('electric-offset')!, handle }), CLOSE)
  }
  return { path: shapeUrl({ table, offset: res.header('electric-offset')!, handle, live: 'true' }), handle }
}

let nextId = 100
/** Requests made aside close their connections, so that the servers' connection counts are the tests' own. */
const CLOSE = { headers: { connection: 'close' } }

describe('parked long-polls', () => {
  it('answer a write with the bytes node:http writes, leave Node holding no connection while parked, and carry the next request', async () => {
    const { path } = await livePath()
    const parked = new Client(parkingPort)
    const plain = new Client(plainPort)
    parked.get(path)
    plain.get(path)
    // Parked: node:http holds no connection for it (the one it accepted is gone); the other app holds its own.
    await until(async () => (await isParked(parkingApp, parkingWaiters, 1)) && plainWaiters.size === 1, 'both requests to wait')
    await cluster.query(`INSERT INTO answers VALUES (${nextId++}, 'b')`)
    const [fromParked, fromPlain] = await Promise.all([parked.response(), plain.response()])
    expect(fromParked.status).toBe(200)
    expect(comparable(fromParked.headers)).toEqual(comparable(fromPlain.headers))
    expect(fromParked.body).toBe(fromPlain.body)
    expect(JSON.parse(fromParked.body)).toHaveLength(2)
    // The same connection carries the next live request, which parks again, and its answer.
    const next = fromParked.headers.find(([name]) => name === 'electric-offset')![1]
    const { handle } = await livePath()
    parked.get(shapeUrl({ table: 'answers', offset: next, handle, live: 'true' }))
    await until(() => isParked(parkingApp, parkingWaiters, 1), 'the second request to park')
    await cluster.query(`INSERT INTO answers VALUES (${nextId++}, 'c')`)
    const second = await parked.response()
    expect(second.status).toBe(200)
    expect(JSON.parse(second.body)[0].value.v).toBe('c')
    parked.close()
    plain.close()
  })

  it('answer a timeout up-to-date as node:http does', async () => {
    const { path } = await livePath()
    const parked = new Client(parkingPort)
    const plain = new Client(plainPort)
    parked.get(path)
    plain.get(path)
    const [fromParked, fromPlain] = await Promise.all([parked.response(), plain.response()])
    expect(fromParked.status).toBe(200)
    expect(comparable(fromParked.headers)).toEqual(comparable(fromPlain.headers))
    expect(fromParked.headers.find(([name]) => name === 'electric-up-to-date')).toBeDefined()
    expect(JSON.parse(fromParked.body)).toEqual(JSON.parse(fromPlain.body))
    parked.close()
    plain.close()
  })

  it('answer a shape invalidated under them 409 with its replacement, as node:http does', async () => {
    await cluster.query('CREATE TABLE rotating (id int4 PRIMARY KEY); INSERT INTO rotating VALUES (1)')
    const { path, handle } = await livePath('rotating')
    const parked = new Client(parkingPort)
    const plain = new Client(plainPort)
    parked.get(path)
    plain.get(path)
    await until(async () => (await isParked(parkingApp, parkingWaiters, 1)) && plainWaiters.size === 1, 'both requests to wait')
    await cluster.query('TRUNCATE rotating')
    const [fromParked, fromPlain] = await Promise.all([parked.response(), plain.response()])
    expect(fromParked.status).toBe(409)
    expect(comparable(fromParked.headers)).toEqual(comparable(fromPlain.headers))
    expect(fromParked.body).toBe(fromPlain.body)
    const replacement = fromParked.headers.find(([name]) => name === 'electric-handle')?.[1]
    expect(replacement).toBeDefined()
    expect(replacement).not.toBe(handle)
    parked.close()
    plain.close()
  })

  it('requests parked from more origins than the header strings kept in common each get their own origin back', async () => {
    const { path } = await livePath()
    // Past the 256 distinct header sets shared, the shared set starts again: answers must not mix them up either way.
    const ORIGINS = 300
    const clients = Array.from({ length: ORIGINS }, () => new Client(parkingPort))
    clients.forEach((client, i) => client.socket.write(`GET ${path} HTTP/1.1\r\nhost: 127.0.0.1\r\norigin: http://app${i % 150 === 0 ? 0 : i}.example\r\n\r\n`))
    await until(() => isParked(parkingApp, parkingWaiters, ORIGINS), 'every request to park')
    await cluster.query(`INSERT INTO answers VALUES (${nextId++}, 'origins')`)
    const answers = await Promise.all(clients.map((client) => client.response()))
    answers.forEach((answer, i) => {
      expect(answer.status).toBe(200)
      expect(answer.headers.find(([name]) => name === 'access-control-allow-origin')?.[1]).toBe(`http://app${i % 150 === 0 ? 0 : i}.example`)
    })
    for (const client of clients) client.close()
  })

  it('a client that leaves while parked frees its connection and its admission slot', async () => {
    const { path } = await livePath()
    const { app, waiters } = appWith({ longPollTimeoutMs: 60_000, maxConcurrentExisting: 3 })
    const port = await listen(app)
    try {
      for (let round = 0; round < 5; round++) {
        const clients = [new Client(port), new Client(port), new Client(port)]
        for (const c of clients) c.get(path)
        await until(() => isParked(app, waiters, 3), 'three to park')
        for (const c of clients) c.close()
        await until(() => waiters.size === 0, 'their waits to end')
      }
      // Every slot is back: three more park, and a write answers all three.
      const clients = [new Client(port), new Client(port), new Client(port)]
      for (const c of clients) c.get(path)
      await until(() => isParked(app, waiters, 3), 'three more to park')
      await cluster.query(`INSERT INTO answers VALUES (${nextId++}, 'd')`)
      const answers = await Promise.all(clients.map((c) => c.response()))
      expect(answers.map((a) => a.status)).toEqual([200, 200, 200])
      for (const c of clients) c.close()
    } finally {
      waiters.close()
      await app.close()
    }
  })

  it('a request pipelined behind a live one is answered too (the live one is not parked)', async () => {
    const { path } = await livePath()
    const client = new Client(parkingPort)
    client.socket.write(
      `GET ${path} HTTP/1.1\r\nhost: x\r\n\r\nGET ${shapeUrl({ table: 'answers', offset: '-1' })} HTTP/1.1\r\nhost: x\r\n\r\n`,
    )
    await until(() => parkingWaiters.size === 1, 'the live request to wait')
    expect(await connectionsOf(parkingApp)).toBe(1)
    await cluster.query(`INSERT INTO answers VALUES (${nextId++}, 'e')`)
    const live = await client.response()
    const initial = await client.response()
    expect(live.status).toBe(200)
    expect(initial.status).toBe(200)
    client.close()
  })

  it('garbage a client sends while parked is read after the answer, as on any connection: a 400, and nothing else breaks', async () => {
    const { path } = await livePath()
    const client = new Client(parkingPort)
    client.get(path)
    await until(() => isParked(parkingApp, parkingWaiters, 1), 'the request to park')
    client.socket.write('NOT HTTP AT ALL\r\n\r\n')
    await cluster.query(`INSERT INTO answers VALUES (${nextId++}, 'f')`)
    expect((await client.response()).status).toBe(200)
    expect((await client.response()).status).toBe(400)
    client.close()
  })

  it('an answer its client does not read is cut after the send timeout, and its slot comes back', async () => {
    await cluster.query('CREATE TABLE wide (id int4 PRIMARY KEY, v text)')
    const { path, handle } = await livePath('wide')
    const { app, waiters } = appWith({ longPollTimeoutMs: 60_000, maxConcurrentExisting: 1, sendTimeoutMs: 500 })
    const port = await listen(app)
    try {
      const stalled = new Client(port)
      // Never read from the start, so the kernel does not grow its receive buffer for it.
      stalled.socket.pause()
      stalled.get(path)
      await until(() => isParked(app, waiters, 1), 'the request to park')
      // Far more than loopback's socket buffers hold.
      await cluster.query(`INSERT INTO wide SELECT g, repeat(md5(g::text), 400) FROM generate_series(1, 3000) g`)
      // The slot is back once the answer is cut: a request of the same kind is served, not refused.
      const head = await livePath('wide')
      const existing = head.path.replace('&live=true', '')
      await until(async () => (await call(port, existing, CLOSE)).status === 200, 'the stalled answer to be cut and its slot to come back')
      // What the client gets when it reads at last: the part the kernel held, then the end, short of the body.
      stalled.socket.resume()
      await until(() => stalled.closed, 'the connection to end')
      await expect(stalled.response(100)).rejects.toThrow()
    } finally {
      waiters.close()
      await app.close()
    }
  })

  it('an answer its client reads slowly but steadily is written whole, however long it takes past the send timeout', async () => {
    await cluster.query('CREATE TABLE trickle (id int4 PRIMARY KEY, v text)')
    const { path } = await livePath('trickle')
    const SEND_TIMEOUT_MS = 1_000
    const { app, waiters } = appWith({ longPollTimeoutMs: 60_000, sendTimeoutMs: SEND_TIMEOUT_MS })
    const port = await listen(app)
    // A reader of its own: no 'data' listener, at most 32 KiB taken every 10 ms (about 3 MB/s).
    const socket = connect(port, '127.0.0.1')
    socket.on('error', () => {})
    let ended = false
    socket.on('end', () => (ended = true))
    const taken: Buffer[] = []
    let trickle: NodeJS.Timeout | undefined
    try {
      await new Promise((resolve) => socket.once('connect', resolve))
      socket.write(`GET ${path} HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n`)
      await until(() => isParked(app, waiters, 1), 'the request to park')
      trickle = setInterval(() => {
        for (let i = 0; i < 2; i++) {
          const piece = (socket.read(16_384) ?? socket.read()) as Buffer | null
          if (piece !== null) taken.push(piece)
        }
      }, 10)
      // About 7.7 MB: far more than loopback's buffers of a socket read this slowly.
      await cluster.query(`INSERT INTO trickle SELECT g, repeat(md5(g::text), 400) FROM generate_series(1, 600) g`)
      const started = Date.now()
      const whole = (): { head: string; body: Buffer } | undefined => {
        const bytes = Buffer.concat(taken)
        const end = bytes.indexOf('\r\n\r\n')
        if (end < 0) return undefined
        const head = bytes.subarray(0, end).toString('latin1')
        const length = Number(/content-length: (\d+)/i.exec(head)?.[1])
        return bytes.length >= end + 4 + length ? { head, body: bytes.subarray(end + 4, end + 4 + length) } : undefined
      }
      await until(() => whole() !== undefined || ended, 'the whole answer')
      const took = Date.now() - started
      const answer = whole()
      expect(answer).toBeDefined()
      expect(answer!.head.startsWith('HTTP/1.1 200 ')).toBe(true)
      const rows = (JSON.parse(answer!.body.toString('utf8')) as Array<{ key?: string }>).filter((m) => m.key !== undefined)
      expect(rows).toHaveLength(600)
      // The point of the test: the answer took longer than the send timeout, and was not cut for it.
      expect(took).toBeGreaterThan(2 * SEND_TIMEOUT_MS)
      expect(ended).toBe(false)
    } finally {
      clearInterval(trickle)
      socket.destroy()
      waiters.close()
      await app.close()
    }
  })

  it('a connection handed back and then left idle is closed at the keep-alive timeout, with nothing more written', async () => {
    const { path } = await livePath()
    const { app, waiters } = appWith({ longPollTimeoutMs: 60_000 })
    const KEEP_ALIVE_MS = 1_000
    app.server.keepAliveTimeout = KEEP_ALIVE_MS
    const port = await listen(app)
    const idle = new Client(port)
    try {
      idle.get(path)
      await until(() => isParked(app, waiters, 1), 'the request to park')
      await cluster.query(`INSERT INTO answers VALUES (${nextId++}, 'idle')`)
      const answer = await idle.response()
      expect(answer.status).toBe(200)
      expect(answer.headers).toContainEqual(['Keep-Alive', `timeout=${KEEP_ALIVE_MS / 1000}`])
      const answeredAt = Date.now()
      // Handed back to node:http (which does not count it among its connections), idle until its keep-alive timeout.
      await until(() => idle.closed, 'the idle connection to be closed')
      const idleFor = Date.now() - answeredAt
      expect(idleFor).toBeGreaterThanOrEqual(KEEP_ALIVE_MS - 50)
      expect(idleFor).toBeLessThan(KEEP_ALIVE_MS + 5_000)
      // Closed as a keep-alive timeout closes a connection: no 408 or anything else after the answer.
      await expect(idle.response(100)).rejects.toThrow()
      expect(await connectionsOf(app)).toBe(0)
    } finally {
      idle.close()
      waiters.close()
      await app.close()
    }
  })

  it('close answers parked long-polls up-to-date on connections that then close, and completes', async () => {
    const { path } = await livePath()
    const { app, waiters } = appWith({ longPollTimeoutMs: 60_000 })
    // As the server's own close does (preClose): the waiters close once the close has begun.
    app.addHook('preClose', async () => waiters.close())
    const port = await listen(app)
    const clients = Array.from({ length: 20 }, () => new Client(port))
    for (const c of clients) c.get(path)
    await until(() => isParked(app, waiters, 20), 'every request to park')
    await app.close()
    const answers = await Promise.all(clients.map((c) => c.response()))
    for (const answer of answers) {
      expect(answer.status).toBe(200)
      expect(answer.headers).toContainEqual(['Connection', 'close'])
      expect(answer.headers.find(([name]) => name === 'electric-up-to-date')).toBeDefined()
    }
    await until(() => clients.every((c) => c.closed), 'the connections to close')
  })
})

/** Whether `n` requests wait in `app` and node:http holds none of their connections: they are parked. */
/** An app of its own on the shared pipeline (parking long-polls), with its waiters; the test closes both. */
function appWith(http: Partial<HttpOptions>): { app: FastifyInstance; waiters: LiveWaiters } {
  const waiters = new LiveWaiters({ store: pipeline.shapeService })
  return { app: buildApp({ shapes: pipeline.shapeService, waiters, http, addon }), waiters }
}

async function isParked(app: FastifyInstance, waiters: LiveWaiters, n: number): Promise<boolean> {
  return waiters.size === n && (await connectionsOf(app)) === 0
}

function connectionsOf(app: FastifyInstance): Promise<number> {
  return new Promise((resolve, reject) => app.server.getConnections((error, n) => (error ? reject(error) : resolve(n))))
}
