/**
 * The load generator of the fan-out measurement, in a process of its own: one
 * live long-poll loop per shape `fanoutWhere(j)` for j in [from, from + count),
 * each on its own keep-alive socket of one agent. The orchestrator runs this
 * either as several processes (independent clients, a slice of the shapes
 * each) or as one process following every shape (one client in all of them);
 * on HTTP/1.1 a client following N shapes holds N long-polls either way.
 *
 * Each loop follows the protocol as a real client does (offset=-1, catch-up
 * until up-to-date, then live=true with handle, offset and cursor; 409 starts
 * over; a 503 waits its retry-after). Every change line carries a stamp
 * `<write>:<CLOCK_MONOTONIC ns>`; the first time a shape sees a write, its
 * latency (receipt of the whole body minus the stamp) is kept under that write.
 *
 * Commands: `start {baseUrl, from, count, concurrency}` -> handshake time and
 * counters; `received {write}` -> how many shapes have it; `latencies {write}`
 * -> their latencies in ms; `stop {}` -> counters.
 */
import http from 'node:http'
import { setTimeout as sleep } from 'node:timers/promises'
import { serveCommands } from '../http/json-lines.js'
import { getWhole, header, type Reply, retryAfterMs } from './http-get.js'
import { FANOUT_TABLE, fanoutWhere, shapePath } from './schema.js'

/** Pause after a network error before the loop tries again. */
const ERROR_PAUSE_MS = 100

let agent: http.Agent | undefined
let base: URL | undefined
let stopping = false
let loops: Promise<void>[] = []
/** Write id -> latency (ms) of each shape that has it. */
const byWrite = new Map<number, number[]>()
const counts = { requests: 0, live: 0, errors: 0, conflicts: 0, retries503: 0, otherStatus: 0 }
const statuses: Record<string, number> = {}

function record(r: Reply, seen: { last: number }): void {
  const messages = JSON.parse(r.body.toString('utf8')) as Array<{ value?: { stamp?: string } }>
  for (const m of messages) {
    const stamp = m.value?.stamp
    if (stamp === undefined) continue
    const at = stamp.indexOf(':')
    const write = Number(stamp.slice(0, at))
    // Writes are numbered upwards; a shape counts each once (a resync's snapshot shows the last one again).
    if (write <= seen.last) continue
    seen.last = write
    let list = byWrite.get(write)
    if (list === undefined) byWrite.set(write, (list = []))
    list.push(Number(r.at - BigInt(stamp.slice(at + 1))) / 1e6)
  }
}

async function follow(j: number, ready: () => void): Promise<void> {
  const shape = shapePath(FANOUT_TABLE, fanoutWhere(j))
  const seen = { last: 0 }
  let handle: string | undefined
  let offset = '-1'
  let cursor = ''
  let live = false
  let announced = false
  while (!stopping) {
    let path = `${shape}&offset=${offset}`
    if (handle !== undefined) path += `&handle=${encodeURIComponent(handle)}`
    if (live) path += `&cursor=${cursor}&live=true`
    let r: Reply
    try {
      r = await getWhole(base!, path, agent!)
    } catch {
      if (stopping) break
      counts.errors++
      await sleep(ERROR_PAUSE_MS)
      continue
    }
    counts.requests++
    if (live) counts.live++
    statuses[r.status] = (statuses[r.status] ?? 0) + 1
    if (r.status === 409) {
      counts.conflicts++
      handle = header(r, 'electric-handle')
      offset = '-1'
      live = false
      continue
    }
    if (r.status === 503) {
      counts.retries503++
      await sleep(retryAfterMs(r, 1000))
      continue
    }
    if (r.status !== 200) {
      counts.otherStatus++
      await sleep(ERROR_PAUSE_MS)
      continue
    }
    handle = header(r, 'electric-handle') ?? handle
    offset = header(r, 'electric-offset') ?? offset
    cursor = header(r, 'electric-cursor') ?? cursor
    record(r, seen)
    if (!live && header(r, 'electric-up-to-date') !== undefined) {
      live = true
      if (!announced) {
        announced = true
        ready()
      }
    }
  }
  if (!announced) ready()
}

async function start(args: Record<string, unknown>): Promise<Record<string, unknown>> {
  if (loops.length > 0) throw new Error('already started')
  base = new URL(String(args.baseUrl))
  const from = Number(args.from)
  const count = Number(args.count)
  const concurrency = Number(args.concurrency)
  stopping = false
  agent = new http.Agent({ keepAlive: true, maxSockets: Number.POSITIVE_INFINITY, maxFreeSockets: count + 16 })
  const t0 = performance.now()
  let next = 0
  const starters = Array.from({ length: Math.min(concurrency, count) }, async () => {
    while (next < count) {
      const j = from + next++
      await new Promise<void>((ready) => {
        loops.push(follow(j, ready))
      })
    }
  })
  await Promise.all(starters)
  return { handshakeMs: performance.now() - t0, shapes: loops.length, ...counts, statuses: { ...statuses } }
}

function received(args: Record<string, unknown>): { received: number } {
  return { received: byWrite.get(Number(args.write))?.length ?? 0 }
}

function latencies(args: Record<string, unknown>): { latencies: number[] } {
  return { latencies: byWrite.get(Number(args.write)) ?? [] }
}

async function stop(): Promise<Record<string, unknown>> {
  stopping = true
  agent?.destroy()
  await Promise.all(loops)
  loops = []
  return { ...counts, statuses: { ...statuses } }
}

serveCommands({ start, received, latencies, stop })
