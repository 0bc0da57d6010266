/**
 * The load generator of the live benchmark, in a process of its own (the
 * orchestrator starts several when the clients need more sockets than one
 * process may open): independent clients for the shapes `k = from .. to-1`,
 * each on its own keep-alive socket, bound to `localAddress` (a loopback
 * address per process, so the clients of several processes do not run out of
 * ephemeral ports towards the one server port). Each follows the protocol as a real client does: the
 * initial `offset=-1` request, non-live requests until `electric-up-to-date`,
 * then `live=true` long-polls, carrying `handle`, `offset` (from
 * `electric-offset`) and `cursor` (from `electric-cursor`), re-polling as soon
 * as a response is complete. For every change line whose stamp belongs to the
 * current run it records receipt time (the full body read) minus the stamp.
 *
 * Commands: `start {baseUrl, from, to, concurrency, localAddress}`
 * (handshakes, then the loops run until `stop`); `create {baseUrl, from, to,
 * concurrency, localAddress}` (only the handshakes, no live requests: shapes
 * that exist but nobody follows); `measure {run}` (count only stamps of this
 * run from now on); `stats {}`; `stop {}` (the stats and every latency measured).
 */
import http from 'node:http'
import { setTimeout as sleep } from 'node:timers/promises'
import { quantile } from '../pipeline/stats.js'
import { serveCommands } from '../http/json-lines.js'
import { liveShapeQuery } from './schema.js'

/** Pause after a failed request before the client tries again. */
const RETRY_MS = 100

interface Reply {
  readonly status: number
  readonly headers: http.IncomingHttpHeaders
  readonly body: Buffer
  /** CLOCK_MONOTONIC when the last byte of the body arrived. */
  readonly at: bigint
}

let agent: http.Agent | undefined
let base: URL | undefined
let localAddress: string | undefined
let stopping = false
let loops: Promise<void>[] = []
let currentRun = -1
let latencies: number[] = []
const counts = { requests: 0, withData: 0, empty: 0, errors: 0, conflicts: 0, otherStatus: 0, foreignStamps: 0 }
const statuses: Record<string, number> = {}

function get(path: string, via: http.Agent | undefined = agent): Promise<Reply> {
  return new Promise((resolve, reject) => {
    const req = http.get({ host: base!.hostname, port: base!.port, path, agent: via, localAddress }, (res) => {
      const chunks: Buffer[] = []
      res.on('data', (c: Buffer) => chunks.push(c))
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks), at: process.hrtime.bigint() }))
      res.on('error', reject)
    })
    req.on('error', reject)
  })
}

function header(r: Reply, name: string): string | undefined {
  const v = r.headers[name]
  return Array.isArray(v) ? v[0] : v
}

function record(r: Reply): void {
  const messages = JSON.parse(r.body.toString('utf8')) as Array<{ value?: { stamp?: string } }>
  let data = false
  for (const m of messages) {
    const stamp = m.value?.stamp
    if (stamp === undefined) continue
    data = true
    const at = stamp.indexOf(':')
    if (Number(stamp.slice(0, at)) !== currentRun) {
      counts.foreignStamps++
      continue
    }
    latencies.push(Number(r.at - BigInt(stamp.slice(at + 1))) / 1e6)
  }
  if (data) counts.withData++
  else counts.empty++
}

/** One client: handshake, then long-polls until stopped. */
async function client(k: number, ready: () => void): Promise<void> {
  const shape = liveShapeQuery(k)
  let handle: string | undefined
  let offset = '-1'
  let cursor = ''
  let live = false
  let announced = false
  while (!stopping) {
    let path = `/v1/shape?${shape}&offset=${offset}`
    if (handle !== undefined) path += `&handle=${encodeURIComponent(handle)}`
    if (live) path += `&cursor=${cursor}&live=true`
    let r: Reply
    try {
      r = await get(path)
    } catch {
      if (stopping) break
      counts.errors++
      await sleep(RETRY_MS)
      continue
    }
    counts.requests++
    statuses[r.status] = (statuses[r.status] ?? 0) + 1
    if (r.status === 409) {
      // The shape was replaced: start over with the new handle, as a client must.
      counts.conflicts++
      handle = header(r, 'electric-handle')
      offset = '-1'
      live = false
      continue
    }
    if (r.status !== 200) {
      counts.otherStatus++
      await sleep(RETRY_MS)
      continue
    }
    handle = header(r, 'electric-handle') ?? handle
    offset = header(r, 'electric-offset') ?? offset
    cursor = header(r, 'electric-cursor') ?? cursor
    if (live) record(r)
    else if (header(r, 'electric-up-to-date') !== undefined) {
      live = true
      if (!announced) {
        announced = true
        ready()
      }
    }
  }
  if (!announced) ready()
}

/** Creates the shapes `k = from .. to-1` (each: `offset=-1`, then until up to date) `concurrency` at a time over as many sockets, and leaves them. */
async function create(args: Record<string, unknown>): Promise<Record<string, number>> {
  base = new URL(String(args.baseUrl))
  localAddress = args.localAddress === undefined ? undefined : String(args.localAddress)
  const from = Number(args.from)
  const to = Number(args.to)
  const concurrency = Number(args.concurrency)
  const pool = new http.Agent({ keepAlive: true, maxSockets: concurrency, maxFreeSockets: concurrency })
  const t0 = performance.now()
  let next = from
  let failed = 0
  await Promise.all(
    Array.from({ length: Math.min(concurrency, to - from) }, async () => {
      while (next < to) {
        const shape = liveShapeQuery(next++)
        let offset = '-1'
        let handle: string | undefined
        let done = false
        for (let attempt = 0; attempt < 50 && !done; attempt++) {
          const r = await get(`/v1/shape?${shape}&offset=${offset}${handle === undefined ? '' : `&handle=${encodeURIComponent(handle)}`}`, pool).catch(() => undefined)
          if (r === undefined || r.status !== 200) {
            if (r?.status === 409) {
              handle = header(r, 'electric-handle')
              offset = '-1'
            } else await sleep(RETRY_MS)
            continue
          }
          done = header(r, 'electric-up-to-date') !== undefined
          handle = header(r, 'electric-handle') ?? handle
          offset = header(r, 'electric-offset') ?? offset
        }
        if (!done) failed++
      }
    }),
  )
  pool.destroy()
  return { createMs: performance.now() - t0, shapes: to - from, failed }
}

async function start(args: Record<string, unknown>): Promise<Record<string, number>> {
  if (loops.length > 0) throw new Error('already started')
  base = new URL(String(args.baseUrl))
  localAddress = args.localAddress === undefined ? undefined : String(args.localAddress)
  const from = Number(args.from)
  const keys = Number(args.to) - from
  const concurrency = Number(args.concurrency)
  stopping = false
  // One socket per client: no request ever waits for another's socket; free sockets are all kept.
  agent = new http.Agent({ keepAlive: true, maxSockets: Number.POSITIVE_INFINITY, maxFreeSockets: keys + 16 })
  for (const key of Object.keys(counts) as Array<keyof typeof counts>) counts[key] = 0
  for (const key of Object.keys(statuses)) delete statuses[key]
  const t0 = performance.now()
  // Handshakes `concurrency` at a time (each may create a shape on the server); a client starts long-polling as soon as its own is done.
  let next = 0
  const starters = Array.from({ length: Math.min(concurrency, keys) }, async () => {
    while (next < keys) {
      const k = from + next++
      await new Promise<void>((ready) => {
        loops.push(client(k, ready))
      })
    }
  })
  await Promise.all(starters)
  return { handshakeMs: performance.now() - t0, clients: loops.length, ...counts }
}

function measure(args: Record<string, unknown>): void {
  currentRun = Number(args.run)
  latencies = []
}

function stats(): Record<string, unknown> {
  const sorted = Float64Array.from(latencies).sort()
  const list = Array.from(sorted)
  return {
    received: list.length,
    p50: quantile(list, 0.5),
    p95: quantile(list, 0.95),
    p99: quantile(list, 0.99),
    max: list.length === 0 ? Number.NaN : list[list.length - 1],
    mean: list.length === 0 ? Number.NaN : list.reduce((a, b) => a + b, 0) / list.length,
    ...counts,
    statuses: { ...statuses },
  }
}

async function stop(): Promise<Record<string, unknown>> {
  stopping = true
  agent?.destroy()
  await Promise.all(loops)
  loops = []
  return { ...stats(), latencies }
}

serveCommands({ start, create, measure, stats, stop })
