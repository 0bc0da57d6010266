/**
 * A group of the CDN benchmark's clients, in a process of its own: N clients
 * following one shape through the cache, each on its own keep-alive socket
 * (raw HTTP/1.1, `raw-http.ts`); every group binds another 127.0.0.x, so each
 * has the whole ephemeral port range. Each client follows docs/protocol.md
 * as a real client does: `offset=-1`, then the offsets it is given until
 * `electric-up-to-date`, then `live=true` long-polls carrying `handle`,
 * `offset` and `cursor`. The query parameters are always in the same order,
 * so clients in the same state ask for the same URL, as the official client's
 * do. For every change whose stamp belongs to the current run a client records
 * when its whole response body arrived (CLOCK_MONOTONIC, shared by every
 * process) minus the stamp.
 *
 * With `native` (the path of the compiled epoll-clients.c) the clients are
 * the C ones instead, the same protocol at a fraction of the CPU per
 * response, and this process only relays the commands to them.
 *
 * Commands: `start {baseUrl, table, clients, localAddress, syncConcurrency, native?}`
 * -> when every client is up to date: the initial sync's figures;
 * `measure {run}`; `count {stamp}` -> clients that have it; `receipts {}` -> per stamp, each client's latency in ms;
 * `status {}`; `stop {}`.
 */
import { setTimeout as sleep } from 'node:timers/promises'
import { serveCommands } from '../http/json-lines.js'
import { NativeClients } from './epoll-clients.js'
import { RawConnection, type RawReply } from './raw-http.js'

const RETRY_MS = 100
const STAMP = /"stamp":"(\d+):(\d+)"/g

let base: URL | undefined
let localAddress: string | undefined
let stopping = false
let loops: Promise<void>[] = []
let connections: RawConnection[] = []
let currentRun = -1
let receipts = new Map<string, number[]>()
let live = 0
const counts = { requests: 0, liveRequests: 0, liveWithData: 0, errors: 0, conflicts: 0, otherStatus: 0, syncBytes: 0 }
const statuses: Record<string, number> = {}
const errorKinds: Record<string, number> = {}

function record(r: RawReply): void {
  let data = false
  // latin1: the stamps are ASCII, and it decodes without validating UTF-8.
  for (const m of r.body.toString('latin1').matchAll(STAMP)) {
    data = true
    if (Number(m[1]) !== currentRun) continue
    const stamp = m[2]!
    let list = receipts.get(stamp)
    if (list === undefined) receipts.set(stamp, (list = []))
    list.push(Number(r.at - BigInt(stamp)) / 1e6)
  }
  if (data) counts.liveWithData++
}

/** A counting semaphore: at most `limit` clients in their initial sync at once (a ramp, not a synchronised storm). */
function semaphore(limit: number): { acquire(): Promise<void>; release(): void } {
  let free = limit
  const waiting: Array<() => void> = []
  return {
    async acquire() {
      if (free > 0) {
        free--
        return
      }
      await new Promise<void>((resolve) => waiting.push(resolve))
    },
    release() {
      const next = waiting.shift()
      if (next !== undefined) next()
      else free++
    },
  }
}

async function client(table: string, gate: ReturnType<typeof semaphore>, synced: (ms: number) => void): Promise<void> {
  await gate.acquire()
  const t0 = performance.now()
  const connection = new RawConnection(base!.hostname, Number(base!.port), localAddress)
  connections.push(connection)
  let handle: string | undefined
  let offset = '-1'
  let cursor = ''
  let isLive = false
  let released = false
  const release = (): void => {
    if (!released) {
      released = true
      gate.release()
    }
  }
  try {
    while (!stopping) {
      let path = `/v1/shape?table=${table}&offset=${offset}`
      if (handle !== undefined) path += `&handle=${encodeURIComponent(handle)}`
      if (isLive) path += `&cursor=${cursor}&live=true`
      let r: RawReply
      try {
        r = await connection.get(path)
      } catch (error) {
        if (stopping) break
        counts.errors++
        const code = (error as NodeJS.ErrnoException).code ?? 'other'
        errorKinds[code] = (errorKinds[code] ?? 0) + 1
        await sleep(RETRY_MS)
        continue
      }
      counts.requests++
      if (isLive) counts.liveRequests++
      statuses[r.status] = (statuses[r.status] ?? 0) + 1
      if (r.status === 409) {
        counts.conflicts++
        handle = r.handle
        offset = '-1'
        if (isLive) live--
        isLive = false
        continue
      }
      if (r.status !== 200) {
        counts.otherStatus++
        await sleep(RETRY_MS)
        continue
      }
      handle = r.handle ?? handle
      offset = r.offset ?? offset
      cursor = r.cursor ?? cursor
      if (isLive) record(r)
      else {
        counts.syncBytes += r.body.length
        if (r.upToDate) {
          isLive = true
          live++
          if (!released) synced(performance.now() - t0)
          release()
        }
      }
    }
  } finally {
    release()
  }
}

/** Set when the clients are the C ones (`native` names the binary): every command goes to them. */
let native: NativeClients | undefined

async function start(args: Record<string, unknown>): Promise<Record<string, unknown>> {
  if (loops.length > 0 || native !== undefined) throw new Error('already started')
  base = new URL(String(args.baseUrl))
  localAddress = args.localAddress === undefined ? undefined : String(args.localAddress)
  const n = Number(args.clients)
  const table = String(args.table)
  if (typeof args.native === 'string') {
    native = new NativeClients({
      binary: args.native,
      host: base.hostname,
      port: Number(base.port),
      localAddress,
      clients: n,
      syncConcurrency: Number(args.syncConcurrency),
      table,
    })
    const synced = await native.synced
    ;(synced.syncMs as number[]).sort((a, b) => a - b)
    return synced
  }
  stopping = false
  const gate = semaphore(Number(args.syncConcurrency))
  const syncMs: number[] = []
  const t0 = performance.now()
  let all!: () => void
  const allSynced = new Promise<void>((resolve) => (all = resolve))
  for (let i = 0; i < n; i++) {
    loops.push(
      client(table, gate, (ms) => {
        syncMs.push(ms)
        if (syncMs.length === n) all()
      }),
    )
  }
  await allSynced
  const wallMs = performance.now() - t0
  syncMs.sort((a, b) => a - b)
  return { clients: n, wallMs, syncMs, ...counts, statuses: { ...statuses }, errorKinds: { ...errorKinds } }
}

async function measure(args: Record<string, unknown>): Promise<void> {
  if (native !== undefined) await native.command(`measure ${Number(args.run)}`)
  currentRun = Number(args.run)
  receipts = new Map()
}

async function collect(): Promise<Record<string, number[]>> {
  if (native !== undefined) return (await native.command('receipts')) as Record<string, number[]>
  return Object.fromEntries(receipts)
}

async function count(args: Record<string, unknown>): Promise<number> {
  if (native !== undefined) return (await native.command(`count ${String(args.stamp)}`)).count as number
  return receipts.get(String(args.stamp))?.length ?? 0
}

async function status(): Promise<Record<string, unknown>> {
  if (native !== undefined) return native.command('status')
  return { live, ...counts, statuses: { ...statuses }, errorKinds: { ...errorKinds } }
}

async function stop(): Promise<Record<string, unknown>> {
  if (native !== undefined) {
    const final = await native.command('stop')
    native.kill()
    native = undefined
    return final
  }
  stopping = true
  for (const c of connections) c.close()
  connections = []
  await Promise.all(loops)
  loops = []
  return status()
}

serveCommands({ start, measure, count, receipts: collect, status, stop })
