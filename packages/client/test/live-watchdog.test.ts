import { type IncomingMessage, type Server, type ServerResponse, createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import { setTimeout as sleep } from 'node:timers/promises'
import { afterEach, describe, expect, it } from 'vitest'
import { Shape, ShapeStream, type ShapeStreamOptions } from '../src/index.js'

/**
 * The live watchdog (`liveRequestTimeoutMs`) against a real HTTP server that
 * answers the way a slow link, a dead connection or a brief outage looks to
 * the client: a live answer whose body trickles in, an SSE stream that goes
 * silent, SSE requests that fail before their stream begins.
 */

const SCHEMA = JSON.stringify({ id: { type: 'int8', pk_index: 0, not_null: true }, title: { type: 'text' } })
const UP_TO_DATE = '{"headers":{"control":"up-to-date"}}'
const insert = (id: number, title: string): string =>
  JSON.stringify({ key: `"public"."t"/"${id}"`, value: { id: String(id), title }, headers: { operation: 'insert' } })

type Handler = (req: IncomingMessage, res: ServerResponse, url: URL) => void

let server: Server | undefined
const streams: ShapeStream[] = []

afterEach(async () => {
  await Promise.all(streams.splice(0).map((s) => s.stop()))
  server?.closeAllConnections()
  await new Promise((resolve) => (server === undefined ? resolve(undefined) : server.close(resolve)))
  server = undefined
})

async function serve(handler: Handler): Promise<{ url: string; requests: URL[] }> {
  const requests: URL[] = []
  server = createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://x')
    requests.push(url)
    handler(req, res, url)
  })
  await new Promise<void>((resolve) => server!.listen(0, '127.0.0.1', resolve))
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1/shape`, requests }
}

function headers(offset: string, upToDate: boolean, extra: Record<string, string> = {}): Record<string, string> {
  return {
    'content-type': 'application/json',
    'electric-handle': 'h1',
    'electric-offset': offset,
    'electric-schema': SCHEMA,
    'electric-cursor': '1',
    ...(upToDate ? { 'electric-up-to-date': '' } : {}),
    ...extra,
  }
}

/** The initial snapshot of one row, then whatever `live` does with each live request (the nth from 0). */
function shapeServer(live: (res: ServerResponse, n: number, url: URL) => void): Handler {
  let lives = 0
  return (_req, res, url) => {
    if (url.searchParams.get('live') !== 'true') {
      res.writeHead(200, headers('0_0', true))
      res.end(`[${insert(1, 'first')},${UP_TO_DATE}]`)
      return
    }
    live(res, lives++, url)
  }
}

function open(url: string, extra: Partial<ShapeStreamOptions> = {}): Shape {
  const stream = new ShapeStream({
    url,
    params: { table: 't' },
    liveRequestTimeoutMs: 200,
    sseIdleTimeoutMs: 200,
    backoff: { initialDelayMs: 1, maxDelayMs: 5 },
    ...extra,
  })
  streams.push(stream)
  return new Shape(stream)
}

async function until(check: () => boolean, ms = 5000): Promise<void> {
  for (const end = Date.now() + ms; !check(); ) {
    if (Date.now() > end) throw new Error('condition not met in time')
    await sleep(10)
  }
}

describe('a live long-poll answer', () => {
  it('whose body takes longer than the watchdog to arrive is read whole, not abandoned and asked for again', async () => {
    const body = `[${insert(2, 'x'.repeat(4000))},${UP_TO_DATE}]`
    const { url, requests } = await serve(
      shapeServer((res, n) => {
        if (n > 0) return // later live requests: nothing new, held
        // Headers at once, then the body in pieces over about three watchdog periods.
        res.writeHead(200, headers('1_0', true, { 'content-length': String(Buffer.byteLength(body)) }))
        const pieces = 6
        const size = Math.ceil(body.length / pieces)
        for (let i = 0; i < pieces; i++) setTimeout(() => res.write(body.slice(i * size, (i + 1) * size)), i * 100)
        setTimeout(() => res.end(), pieces * 100)
      }),
    )
    const shape = open(url)
    await until(() => shape.value.size === 2)
    expect((shape.value.get('"public"."t"/"2"') as { title: string }).title).toHaveLength(4000)
    // The snapshot, the slow live answer, and the next live request (held): no retry of the slow one.
    const lives = requests.filter((r) => r.searchParams.get('live') === 'true')
    expect(lives.length).toBeLessThanOrEqual(2)
    expect(lives[0]!.searchParams.get('offset')).toBe('0_0')
  })
})

describe('a live long-poll answer whose body stops', () => {
  it('is abandoned once nothing has come for the watchdog, and asked for again', async () => {
    const body = `[${insert(2, 'second')},${UP_TO_DATE}]`
    const { url, requests } = await serve(
      shapeServer((res, n) => {
        res.writeHead(200, headers('1_0', true, { 'content-length': String(Buffer.byteLength(body)) }))
        // The first answer stops half-way (a connection gone half-open); the next one is whole.
        if (n === 0) res.write(body.slice(0, 20))
        else if (n === 1) res.end(body)
      }),
    )
    const shape = open(url)
    await until(() => shape.value.size === 2)
    const lives = requests.filter((r) => r.searchParams.get('live') === 'true')
    expect(lives[0]!.searchParams.get('offset')).toBe('0_0')
    expect(lives[1]!.searchParams.get('offset')).toBe('0_0')
  })
})

describe('an SSE stream', () => {
  function sseHead(res: ServerResponse): void {
    res.writeHead(200, { ...headers('0_0', false), 'content-type': 'text/event-stream', 'cache-control': 'no-cache' })
    res.flushHeaders()
  }
  const sse = (url: URL): boolean => url.searchParams.get('live_sse') === 'true'

  it('that goes silent is abandoned after the watchdog and opened again; three in a row (a proxy that buffers event streams) fall back to long-poll', async () => {
    const { url, requests } = await serve(shapeServer((res) => sseHead(res)))
    // A minimum connection time far below the watchdog: the silent streams count as short for their silence.
    const shape = open(url, { liveSse: true, minSseConnectionMs: 1 })
    await until(() => shape.stream.state.kind === 'live' && (shape.stream.state as { transport: string }).transport === 'long-poll')
    const lives = requests.filter((r) => r.searchParams.get('live') === 'true')
    expect(lives.slice(0, 3).every(sse)).toBe(true)
  })

  it('kept alive by comments stays open past the watchdog', async () => {
    const { url, requests } = await serve(
      shapeServer((res) => {
        sseHead(res)
        const timer = setInterval(() => res.write(': keep-alive\n\n'), 50)
        res.on('close', () => clearInterval(timer))
      }),
    )
    const shape = open(url, { liveSse: true })
    await until(() => requests.filter(sse).length === 1)
    await sleep(800)
    expect(requests.filter(sse)).toHaveLength(1)
    expect(shape.stream.state).toMatchObject({ kind: 'live', transport: 'sse' })
  })

  it('whose requests fail before a stream begins (a brief outage) stays SSE: only streams that end quickly count towards the fallback', async () => {
    const { url, requests } = await serve(
      shapeServer((res, n) => {
        if (n < 4) {
          res.writeHead(503, { 'content-type': 'application/json' })
          res.end('{"message":"unavailable"}')
          return
        }
        sseHead(res)
        res.write(`data: ${insert(2, 'after the outage')}\n\ndata: ${UP_TO_DATE}\n\n`)
      }),
    )
    const shape = open(url, { liveSse: true })
    await until(() => shape.value.size === 2)
    const lives = requests.filter((r) => r.searchParams.get('live') === 'true')
    expect(lives.length).toBeGreaterThanOrEqual(5)
    for (const r of lives) expect(sse(r)).toBe(true)
    expect(shape.stream.state).toMatchObject({ kind: 'live', transport: 'sse' })
  })
})
