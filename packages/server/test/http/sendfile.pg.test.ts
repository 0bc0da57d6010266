import { readFileSync, readdirSync, readlinkSync } from 'node:fs'
import { globalAgent } from 'node:http'
import { type Socket, connect } from 'node:net'
import type { Sendfile } from '@sluice/sendfile'
import { useTempDir, usePostgres } from '@sluice/test-utils'
import fc from 'fast-check'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { buildApp, resolveBodyPath } from '../../src/http/index.js'
import type { Pipeline } from '../../src/pipeline.js'
import { caughtUp, startPipeline } from '../pipeline/harness.js'
import { type Res, type TestServer, call, shapeUrl } from './http-harness.js'
import { parseResponses } from './raw-http.js'

/**
 * The sendfile body path against the pread one, on real servers: two apps on
 * one pipeline (so one store, the same bytes on disk), one sending every
 * file-backed body by sendfile (threshold 0), the other reading every body
 * with pread. Whatever the chunk size, offsets and range ends, they must give
 * the same status, headers and body, byte for byte.
 */

const cluster = usePostgres()
const dirs = useTempDir('sendfile-http')
let sendfile: Sendfile

beforeAll(async () => {
  const path = await resolveBodyPath(true)
  if (path.name !== 'sendfile') throw new Error(`the sendfile addon is not available: ${path.reason}`)
  sendfile = path.sendfile
})

async function startPair(pipeline: Pipeline, http: { sendTimeoutMs?: number } = {}): Promise<{ viaSendfile: TestServer; viaPread: TestServer }> {
  const start = async (bodyPath: Awaited<ReturnType<typeof resolveBodyPath>>): Promise<TestServer> => {
    const app = buildApp({ shapes: pipeline.shapeService, http: { sendfileMinBytes: 0, ...http }, bodyPath })
    await app.listen({ port: 0, host: '127.0.0.1' })
    const port = (app.server.address() as { port: number }).port
    return { app, port, close: () => app.close() }
  }
  return { viaSendfile: await start(await resolveBodyPath(true)), viaPread: await start(await resolveBodyPath(false)) }
}

/** Headers that must match between the two paths: all but the clock's. */
function comparableHeaders(res: Res): Record<string, string | string[] | undefined> {
  const { date: _date, ...rest } = res.headers
  return rest
}

function expectSame(a: Res, b: Res, what: string): void {
  expect(a.status, what).toBe(b.status)
  expect(comparableHeaders(a), what).toEqual(comparableHeaders(b))
  expect(a.body.equals(b.body), `${what}: bodies differ (${a.body.length} vs ${b.body.length} bytes)`).toBe(true)
}

/**
 * Descriptors this process holds on connections to or from `ports` (the
 * servers under test), found without asking the code under test: sockets in
 * /proc/self/fd matched by inode against /proc/net/tcp, counting those of
 * connections to the ports that are not fully closed, and those the kernel
 * lists nowhere (a reset connection leaves the tables while a descriptor still
 * holds its socket: what a leaked duplicate of a disconnected client is).
 */
function connectionFds(ports: readonly number[]): number {
  return connectionSockets(ports).size
}

/** The sockets `connectionFds` counts, by inode. */
function connectionSockets(ports: readonly number[]): Set<string> {
  const ours = new Set<string>()
  const listed = new Set<string>()
  for (const table of ['tcp', 'tcp6', 'udp', 'udp6', 'unix', 'netlink', 'raw', 'raw6']) {
    let lines: string[]
    try {
      lines = readFileSync(`/proc/net/${table}`, 'utf8').split('\n').slice(1)
    } catch {
      continue
    }
    for (const line of lines) {
      const fields = line.trim().split(/\s+/)
      if (table === 'unix') {
        if (fields[6] !== undefined) listed.add(fields[6])
        continue
      }
      if (table === 'netlink') {
        if (fields[8] !== undefined) listed.add(fields[8])
        continue
      }
      if (fields.length < 10) continue
      const inode = fields[9]!
      listed.add(inode)
      if (table !== 'tcp') continue
      const localPort = Number.parseInt(fields[1]!.split(':')[1]!, 16)
      const remotePort = Number.parseInt(fields[2]!.split(':')[1]!, 16)
      // LISTEN (0A) is the server itself; TIME_WAIT (06) holds no descriptor.
      if (fields[3] === '0A' || fields[3] === '06') continue
      if (ports.includes(localPort) || ports.includes(remotePort)) ours.add(inode)
    }
  }
  const held = new Set<string>()
  for (const fd of readdirSync('/proc/self/fd')) {
    let target: string
    try {
      target = readlinkSync(`/proc/self/fd/${fd}`)
    } catch {
      continue // the directory's own descriptor, gone by now
    }
    if (!target.startsWith('socket:[')) continue
    const inode = target.slice(8, -1)
    if (ours.has(inode) || !listed.has(inode)) held.add(inode)
  }
  return held
}

/** Connections the server holds open. */
function connections(server: TestServer): Promise<number> {
  return new Promise((resolve, reject) => server.app.server.getConnections((error, n) => (error ? reject(error) : resolve(n))))
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms))
}

/**
 * Waits until no HTTP connection to `servers` is left (the client agent's
 * keep-alive sockets closed, each server's side closed after them), then
 * counts descriptors still held on their connections: a leaked duplicate shows
 * as a count above 0. A duplicate closes within a turn of its connection, or
 * once the sendfile call running on the pool returns; the 5 s bound is not a
 * speed claim, it keeps a leak that the garbage collector would mop up (the
 * addon's finalizer closes a forgotten duplicate) from passing after a pause.
 */
async function settledConnectionFds(servers: readonly TestServer[]): Promise<number> {
  globalAgent.destroy()
  for (;;) {
    let open = 0
    for (const server of servers) open += await connections(server)
    if (open === 0) break
    await sleep(10)
  }
  const deadline = Date.now() + 5000
  while (sendfile.stats().openDescriptors > 0 && Date.now() < deadline) await sleep(5)
  // Two readings apart: a socket this process opens between reading the kernel's tables and its own
  // descriptors (its Postgres pool, say) is listed nowhere in one reading, but is listed in the next.
  const ports = servers.map((server) => server.port)
  const first = connectionSockets(ports)
  await sleep(50)
  let held = 0
  for (const inode of connectionSockets(ports)) if (first.has(inode)) held++
  return held
}

describe('sendfile vs pread bodies', () => {
  it('are byte-identical, headers included, for random chunk sizes, rows, transactions and request offsets', async () => {
    let run = 0
    const before = sendfile.stats()
    await fc.assert(
      fc.asyncProperty(
        fc.record({
          chunkBytes: fc.integer({ min: 64, max: 256 * 1024 }),
          rows: fc.array(fc.integer({ min: 0, max: 3000 }), { minLength: 0, maxLength: 120 }),
          transactions: fc.array(fc.array(fc.integer({ min: 0, max: 5000 }), { minLength: 1, maxLength: 15 }), { minLength: 0, maxLength: 6 }),
        }),
        async ({ chunkBytes, rows, transactions }) => {
          const table = `sf_items_${run++}`
          await cluster.query(`CREATE TABLE ${table} (id int4 PRIMARY KEY, body text)`)
          let nextId = 1
          for (const size of rows) await cluster.query(`INSERT INTO ${table} VALUES ($1, repeat('r', $2))`, [nextId++, size])
          const pipeline = await startPipeline(cluster, await dirs.make('store'), { chunkBytes })
          const { viaSendfile, viaPread } = await startPair(pipeline)
          try {
            const get = async (params: Record<string, string>, what: string): Promise<Res> => {
              const a = await call(viaSendfile.port, shapeUrl(params))
              const b = await call(viaPread.port, shapeUrl(params))
              expectSame(a, b, `chunkBytes ${chunkBytes}, ${what}`)
              return a
            }
            // Follow the log through both servers, a transaction at a time, keeping every offset answered:
            // later, each is asked again and then starts a range in the middle of a chunk or at its end.
            const offsets: string[] = []
            let res = await get({ table, offset: '-1' }, 'offset -1')
            const handle = res.header('electric-handle')!
            const follow = async (): Promise<void> => {
              for (let guard = 0; res.header('electric-up-to-date') === undefined || guard === 0; guard++) {
                if (guard > 10_000) throw new Error('never up-to-date')
                const offset = res.header('electric-offset')!
                offsets.push(offset)
                res = await get({ table, handle, offset }, `offset ${offset}`)
              }
            }
            await follow()
            for (const sizes of transactions) {
              const statements = sizes.map((size) => {
                if (nextId > 1 && size % 3 === 0) return `UPDATE ${table} SET body = repeat('u', ${size}) WHERE id = ${1 + (size % (nextId - 1))}`
                return `INSERT INTO ${table} VALUES (${nextId++}, repeat('t', ${size}))`
              })
              await cluster.query(`BEGIN; ${statements.join('; ')}; COMMIT`)
              await caughtUp(pipeline, cluster)
              res = await get({ table, handle, offset: res.header('electric-offset')! }, 'after a transaction')
              await follow()
            }
            for (const offset of offsets) await get({ table, handle, offset }, `offset ${offset} again`)
          } finally {
            await viaSendfile.close()
            await viaPread.close()
            await pipeline.stop()
            await cluster.query(`DROP TABLE ${table}`)
          }
        },
      ),
      { numRuns: process.env['SOAK'] === '1' ? 40 : 4 },
    )
    // The comparison was between two paths: the sendfile server did send.
    expect(sendfile.stats().bytes).toBeGreaterThan(before.bytes)
  })
})

describe('sendfile bodies on a real server', () => {
  /** 24 MiB of rows in one chunk: more than loopback's socket buffers hold, so a reader that stops stalls the send. */
  const BIG_ROWS = 12_000
  let pipeline: Pipeline
  let servers: { viaSendfile: TestServer; viaPread: TestServer }
  const url = shapeUrl({ table: 'sf_big', offset: '-1' })

  beforeAll(async () => {
    // With 32 MiB chunks, offset=-1 answers them all in one body.
    await cluster.query(`CREATE TABLE sf_big (id int4 PRIMARY KEY, body text); INSERT INTO sf_big SELECT i, repeat(md5(i::text), 64) FROM generate_series(1, ${BIG_ROWS}) i`)
    pipeline = await startPipeline(cluster, await dirs.make('store'), { chunkBytes: 32 * 1024 * 1024 })
    servers = await startPair(pipeline)
    // First reads open the log's files (the store keeps them): descriptor counts start after that.
    await call(servers.viaSendfile.port, url)
    await call(servers.viaPread.port, url)
  })
  afterAll(async () => {
    await servers?.viaSendfile.close()
    await servers?.viaPread.close()
    await pipeline?.stop()
  })

  it('sends a multi-megabyte chunk with sendfile(2) calls, the same bytes the pread path sends', async () => {
    const before = sendfile.stats()
    const a = await call(servers.viaSendfile.port, url)
    const middle = sendfile.stats()
    const b = await call(servers.viaPread.port, url)
    const after = sendfile.stats()
    expect(a.status).toBe(200)
    expect(a.body.length).toBeGreaterThan(20 * 1024 * 1024)
    expectSame(a, b, 'offset -1')
    // All but `[`, `]` (written through Node) left by sendfile; the pread server made no sendfile call.
    expect(middle.bytes - before.bytes).toBe(a.body.length - 2)
    expect(middle.calls).toBeGreaterThan(before.calls)
    expect(after.calls).toBe(middle.calls)
    expect(after.openDescriptors).toBe(0)
  })

  it('answers pipelined requests on one connection in order, each body whole', async () => {
    const expected = await call(servers.viaPread.port, url)
    const request = `GET ${url} HTTP/1.1\r\nhost: x\r\n\r\n`
    const socket = connect({ host: '127.0.0.1', port: servers.viaSendfile.port })
    const chunks: Buffer[] = []
    const responses = await new Promise<ReturnType<typeof parseResponses>['responses']>((resolve, reject) => {
      socket.on('connect', () => socket.write(request + request + request))
      let received = 0
      socket.on('data', (chunk: Buffer) => {
        chunks.push(chunk)
        received += chunk.length
        // Parsed only once enough has come for three bodies (parsing 24 MiB on every packet is slow).
        if (received < 3 * expected.body.length) return
        const { responses } = parseResponses(Buffer.concat(chunks), [], false)
        if (responses.length === 3 && responses.every((r) => r.complete)) resolve(responses)
      })
      socket.on('error', reject)
      socket.on('close', () => reject(new Error('closed early')))
    })
    socket.destroy()
    for (const r of responses) {
      expect(r.status).toBe(200)
      expect(r.body.equals(expected.body)).toBe(true)
    }
  })

  it('a client that disconnects mid-body leaves no descriptor behind and the server keeps serving', async () => {
    const all = [servers.viaSendfile, servers.viaPread]
    expect(await settledConnectionFds(all)).toBe(0)
    const sockets: Socket[] = []
    for (let i = 0; i < 5; i++) {
      const socket = connect({ host: '127.0.0.1', port: servers.viaSendfile.port })
      sockets.push(socket)
      socket.on('error', () => {})
      socket.write(`GET ${url} HTTP/1.1\r\nhost: x\r\n\r\n`)
      // Hang up after the first 64 KiB: most of the body is still to go.
      await new Promise<void>((resolve) => {
        let got = 0
        socket.on('data', (chunk: Buffer) => {
          got += chunk.length
          if (got >= 64 * 1024) {
            // Each end holds a descriptor on the connection (ours and the server's) until we hang up.
            if (i === 0) expect(connectionFds([servers.viaSendfile.port])).toBeGreaterThanOrEqual(2)
            socket.destroy()
            resolve()
          }
        })
      })
    }
    // The server notices each disconnect in its own time: wait for its connections to close, not for a clock.
    expect(await settledConnectionFds(all)).toBe(0)
    const again = await call(servers.viaSendfile.port, url)
    expect(again.body.equals((await call(servers.viaPread.port, url)).body)).toBe(true)
  })

  it('a slow reader gets the whole body while other clients are served in full, and leaves nothing open', async () => {
    const expected = await call(servers.viaPread.port, url)
    const all = [servers.viaSendfile, servers.viaPread]
    expect(await settledConnectionFds(all)).toBe(0)
    const slow: Socket = connect({ host: '127.0.0.1', port: servers.viaSendfile.port })
    const chunks: Buffer[] = []
    let slowDone = false
    const slowBody = new Promise<Buffer>((resolve, reject) => {
      slow.on('data', (chunk: Buffer) => {
        chunks.push(chunk)
        const { responses } = parseResponses(Buffer.concat(chunks), [], false)
        if (responses[0]?.complete) {
          slowDone = true
          resolve(responses[0].body)
        }
      })
      slow.on('error', reject)
    })
    slow.write(`GET ${url} HTTP/1.1\r\nhost: x\r\n\r\n`)
    // Wait for the first bytes, then stop reading: the server's send waits on a full socket buffer.
    await new Promise((resolve) => slow.once('data', resolve))
    slow.pause()
    // Meanwhile three other clients get the whole body.
    for (let i = 0; i < 3; i++) {
      const other = await call(servers.viaSendfile.port, url)
      expect(other.body.equals(expected.body)).toBe(true)
    }
    expect(slowDone).toBe(false)
    // The slow connection's two ends and the server's duplicate for sendfile while its send waits (and the
    // agent's idle keep-alive connections).
    expect(connectionFds([servers.viaSendfile.port])).toBeGreaterThanOrEqual(3)
    expect(sendfile.stats().openDescriptors).toBe(1)
    slow.resume()
    expect((await slowBody).equals(expected.body)).toBe(true)
    slow.destroy()
    expect(await settledConnectionFds(all)).toBe(0)
  })

  it('a body still being sent when the server starts closing arrives whole, on both paths, and the close then ends', async () => {
    const expected = await call(servers.viaPread.port, url)
    const closing = await startPair(pipeline)
    for (const server of [closing.viaSendfile, closing.viaPread]) {
      const socket = connect({ host: '127.0.0.1', port: server.port })
      const chunks: Buffer[] = []
      let got = 0
      let slow = false
      const ended = new Promise<void>((resolve) => socket.on('close', () => resolve()))
      socket.on('error', () => {})
      socket.on('data', (chunk: Buffer) => {
        chunks.push(chunk)
        got += chunk.length
        // A slow reader: a piece, then a pause, so the body's end is written while much of it is still queued.
        if (!slow) return
        socket.pause()
        setTimeout(() => socket.resume(), 5)
      })
      const first = new Promise((resolve) => socket.once('data', resolve))
      socket.write(`GET ${url} HTTP/1.1\r\nhost: x\r\n\r\n`)
      await first
      socket.pause()
      const closed = server.close()
      await sleep(300)
      slow = true
      socket.resume()
      await ended
      await closed
      const { responses } = parseResponses(Buffer.concat(chunks), [false], true)
      expect(responses.length, `${got} bytes`).toBe(1)
      expect(responses[0]!.complete).toBe(true)
      expect(responses[0]!.body.equals(expected.body)).toBe(true)
    }
  })

  it('a client that stops reading is cut once it has taken nothing for the send timeout, on both paths, and leaves nothing open', async () => {
    const stalling = await startPair(pipeline, { sendTimeoutMs: 300 })
    const all = [stalling.viaSendfile, stalling.viaPread]
    try {
      await call(stalling.viaSendfile.port, url)
      expect(await settledConnectionFds(all)).toBe(0)
      for (const server of all) {
        const socket = connect({ host: '127.0.0.1', port: server.port })
        socket.on('error', () => {})
        socket.write(`GET ${url} HTTP/1.1\r\nhost: x\r\n\r\n`)
        // The first bytes, then nothing read: the server's send waits on a full socket buffer for ever.
        await new Promise((resolve) => socket.once('data', resolve))
        socket.pause()
        // The server closes its side while this end still holds the connection open, reading nothing.
        for (const until = Date.now() + 10_000; (await connections(server)) > 0 && Date.now() < until; ) await sleep(50)
        expect(await connections(server)).toBe(0)
        socket.destroy()
      }
      expect(await settledConnectionFds(all)).toBe(0)
      expect(sendfile.stats().openDescriptors).toBe(0)
    } finally {
      await stalling.viaSendfile.close()
      await stalling.viaPread.close()
    }
  })
})

describe('which bodies take sendfile with the default threshold', () => {
  let pipeline: Pipeline
  let viaDefault: TestServer
  let viaPread: TestServer

  beforeAll(async () => {
    // About 150 KB and 600 KB of stored rows, each table one chunk.
    await cluster.query(`CREATE TABLE sf_medium (id int4 PRIMARY KEY, body text); INSERT INTO sf_medium SELECT i, repeat(md5(i::text), 8) FROM generate_series(1, 500) i`)
    await cluster.query(`CREATE TABLE sf_large (id int4 PRIMARY KEY, body text); INSERT INTO sf_large SELECT i, repeat(md5(i::text), 36) FROM generate_series(1, 500) i`)
    pipeline = await startPipeline(cluster, await dirs.make('store'), { chunkBytes: 4 * 1024 * 1024 })
    const start = async (bodyPath: Awaited<ReturnType<typeof resolveBodyPath>>): Promise<TestServer> => {
      const app = buildApp({ shapes: pipeline.shapeService, bodyPath })
      await app.listen({ port: 0, host: '127.0.0.1' })
      return { app, port: (app.server.address() as { port: number }).port, close: () => app.close() }
    }
    viaDefault = await start(await resolveBodyPath(true))
    viaPread = await start(await resolveBodyPath(false))
  })
  afterAll(async () => {
    await viaDefault?.close()
    await viaPread?.close()
    await pipeline?.stop()
  })

  it('an initial chunk of about 150 KB goes by pread, one of about 600 KB by sendfile, both as the pread path sends them', async () => {
    for (const [table, sent] of [
      ['sf_medium', false],
      ['sf_large', true],
    ] as const) {
      const url = shapeUrl({ table, offset: '-1' })
      // The first request creates the shape; the second reads its stored chunk.
      await call(viaDefault.port, url)
      const before = sendfile.stats()
      const a = await call(viaDefault.port, url)
      const after = sendfile.stats()
      const b = await call(viaPread.port, url)
      expectSame(a, b, table)
      expect(a.body.length).toBeGreaterThan(sent ? 500_000 : 130_000)
      expect(a.body.length).toBeLessThan(sent ? 800_000 : 200_000)
      expect(after.calls > before.calls, `${table}: ${a.body.length} bytes sent by sendfile`).toBe(sent)
    }
  })
})
