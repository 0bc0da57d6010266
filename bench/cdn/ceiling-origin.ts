/**
 * The ceiling of the CDN benchmark's live figures, in a process of its own: a
 * bare node:http origin that parks every live request and answers all of them
 * from one Buffer the moment it is told of a write (`write {stamp}`), with the
 * headers Sluice's live answer has (handle, a new offset and cursor,
 * up-to-date, `cache-control: public, max-age=5, stale-while-revalidate=5`).
 * No Postgres, no log, no fsync: with the same cache and the same clients in
 * front, what is left of the time to the last client is the cache's and the
 * clients' fan-out on this machine. Non-live requests (the initial sync) are
 * passed to Sluice as they are, so the clients reach the live phase the
 * same way. Parked requests not answered within the long-poll timeout get an
 * up-to-date answer with no change and a new cursor, as Sluice's do.
 *
 * Commands: `start {sluiceUrl, longPollTimeoutMs}` -> {url, pid}; `write {stamp}`
 * -> live requests answered; `counts`, `responses`, `reset` and `stop` as origin.ts.
 */
import { type IncomingMessage, type ServerResponse, createServer, request } from 'node:http'
import type { AddressInfo } from 'node:net'
import { serveCommands } from '../http/json-lines.js'
import { RequestCounts } from './request-counts.js'

let server: ReturnType<typeof createServer> | undefined
let sluice: URL | undefined
let timeoutMs = 20_000
const seen = new RequestCounts()
let parked: Array<{ res: ServerResponse; handle: string; offset: string; timer: NodeJS.Timeout }> = []
let seq = 0

/** One cursor per answer to a write, and one per long-poll interval for timeouts: clients in the same state share a URL. */
function liveHeaders(handle: string, offset: string, length: number, cursor: string): Record<string, string> {
  return {
    'electric-handle': handle,
    'electric-offset': offset,
    'electric-cursor': cursor,
    'electric-up-to-date': '',
    'electric-has-data': length > 0 ? 'true' : 'false',
    etag: `"${handle}:${offset}:${seq}"`,
    'content-type': 'application/json; charset=utf-8',
    'cache-control': 'public, max-age=5, stale-while-revalidate=5',
  }
}

function answer(res: ServerResponse, headers: Record<string, string>, body: Buffer): void {
  if (res.destroyed) return
  res.writeHead(200, { ...headers, 'content-length': String(body.length) })
  res.end(body)
}

function passToSluice(req: IncomingMessage, res: ServerResponse): void {
  const upstream = request(new URL(req.url ?? '/', sluice), { method: req.method, headers: req.headers }, (up) => {
    res.writeHead(up.statusCode ?? 502, up.headers)
    up.pipe(res)
  })
  upstream.on('error', (error) => {
    res.writeHead(502, { 'content-type': 'application/json; charset=utf-8' })
    res.end(JSON.stringify({ message: error.message }))
  })
  upstream.end()
}

function onRequest(req: IncomingMessage, res: ServerResponse): void {
  seen.count(req, res)
  const url = req.url ?? ''
  const query = new URL(url, 'http://origin').searchParams
  if (query.get('live') !== 'true') {
    passToSluice(req, res)
    return
  }
  const handle = query.get('handle') ?? ''
  const offset = query.get('offset') ?? ''
  const entry = {
    res,
    handle,
    offset,
    timer: setTimeout(() => {
      parked = parked.filter((p) => p !== entry)
      answer(res, liveHeaders(handle, offset, 0, `t${Math.floor(Date.now() / timeoutMs)}`), Buffer.from('[{"headers":{"control":"up-to-date"}}]'))
    }, timeoutMs),
  }
  parked.push(entry)
}

async function start(args: Record<string, unknown>): Promise<Record<string, unknown>> {
  sluice = new URL(String(args.sluiceUrl))
  timeoutMs = Number(args.longPollTimeoutMs ?? timeoutMs)
  const s = createServer({ keepAliveTimeout: 75_000 }, onRequest)
  server = s
  await new Promise<void>((resolve) => s.listen(0, '127.0.0.1', resolve))
  return { url: `http://127.0.0.1:${(s.address() as AddressInfo).port}`, pid: process.pid }
}

/** Every parked live request gets the change stamped `stamp` (the same row the real writer updates). */
function write(args: Record<string, unknown>): number {
  seq++
  const body = Buffer.from(
    JSON.stringify([
      { key: '"public"."cdn_items"/"1"', value: { id: '1', stamp: String(args.stamp) }, headers: { operation: 'update', relation: ['public', 'cdn_items'] } },
      { headers: { control: 'up-to-date' } },
    ]),
  )
  const offset = `9${seq}_0`
  const cursor = `w${seq}`
  const woken = parked
  parked = []
  for (const p of woken) {
    clearTimeout(p.timer)
    answer(p.res, liveHeaders(p.handle, offset, body.length, cursor), body)
  }
  return woken.length
}

async function stop(): Promise<void> {
  for (const p of parked) {
    clearTimeout(p.timer)
    p.res.destroy()
  }
  parked = []
  const s = server
  server = undefined
  if (s !== undefined) await new Promise<void>((resolve) => s.close(() => resolve()))
}

serveCommands({ start, write, counts: () => seen.counts(), responses: () => seen.responses(), reset: () => seen.reset(), stop })
