/**
 * bench:fanout: one shape, many live clients (Electric's benchmark 4). The
 * Sluice server (`sluice start`) and a ceiling (a bare node:http server
 * writing the same bytes to the same number of sockets from memory), each in
 * its own process, with the clients in processes of their own.
 *
 * Measures: for 1k, 10k and 19k long-poll clients of one shape, then 10k SSE
 * clients, the time from a commit (CLOCK_MONOTONIC just before COMMIT is sent)
 * until the last client holds the whole transaction, p50/p99/max over the
 * writes, for transactions of 1, 100 and 1,000 rows; the median client's time
 * too; the server's CPU during the writes and its resident set (VmRSS) before
 * the clients connect, with all of them parked, and after the writes (so the
 * memory one parked request costs); the first two again, with the V8 heap in
 * use, each right after a full collection (gc-on-signal.cjs), which leaves
 * out garbage not collected yet.
 * Does not measure: clients on other machines, an HTTP cache in front, TLS,
 * many shapes (bench:http), initial sync.
 *
 * 20k clients cannot run here: the open-file limit is 20,000 (hard, and not
 * raisable in this container), and the server needs one descriptor per client
 * plus its own; the top count is therefore 19,000 unless BENCH_FANOUT_CLIENTS says otherwise.
 *
 * Usage: `pnpm --filter @sluice/bench run bench:fanout` (from the root: `npm run
 * bench:fanout`). QUICK=1: 100 and 1,000 long-polls, 500 SSE streams, 3 writes
 * of 1 and 100 rows (results/fanout.quick.*). BENCH_FANOUT_CLIENTS (long-poll
 * counts), BENCH_FANOUT_SSE (SSE count, 0 for none), BENCH_FANOUT_ROWS,
 * BENCH_FANOUT_WRITES, ONLY=sluice (no ceiling) give partial runs
 * (results/fanout.partial.*); BENCH_RESULTS_DIR moves the results.
 * BENCH_FANOUT_HEAP_SNAPSHOTS=1 keeps a heap snapshot of each server at each
 * of those collections, in the run's data directory.
 */
import { spawnSync } from 'node:child_process'
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs'
import http from 'node:http'
import { loadavg, tmpdir } from 'node:os'
import { dirname, join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { fileURLToPath } from 'node:url'
import { startPostgres } from '@sluice/test-utils'
import { BENCH_PG_SETTINGS } from '../pipeline/pg.js'
import { processCpuMs } from '../pipeline/proc.js'
import type { LoadNote } from '../pipeline/report.js'
import { SystemMeter, waitForQuiet } from '../storage/measure.js'
import { type Machine, machineInfo } from '../storage/report.js'
import { CommandChild } from '../http/json-lines.js'
import { type SluiceProcess, startSluice } from '../http/sluice-process.js'
import { type Cell, type Collected, type Report, type WriteTiming, closingNote, summarize, writeReport } from './report.js'
import { FANOUT_ROWS, SHAPE_QUERY, schemaSql } from './schema.js'
import { loadNote, log, runSeconds } from '../pipeline/run-log.js'

const QUICK = process.env.QUICK === '1'
const list = (name: string): number[] | undefined => process.env[name]?.split(',').filter((s) => s !== '').map(Number)
const CLIENTS = list('BENCH_FANOUT_CLIENTS')
const SSE = list('BENCH_FANOUT_SSE')
const ROWS = list('BENCH_FANOUT_ROWS')
const WRITES = process.env.BENCH_FANOUT_WRITES === undefined ? undefined : Number(process.env.BENCH_FANOUT_WRITES)
const ONLY_SLUICE = process.env.ONLY === 'sluice'
const PARTIAL = [CLIENTS, SSE, ROWS, WRITES].some((x) => x !== undefined) || ONLY_SLUICE
/** How long the parked clients are left before memory is read; by 30 s what the arrivals freed is given back (the steady state, bench/README.md). */
const SETTLE_MS = Number(process.env.BENCH_FANOUT_SETTLE_MS ?? 500)
const QUIET_WAIT_MS = Number(process.env.BENCH_QUIET_WAIT_MS ?? (QUICK ? 0 : 5_000))

const SETTINGS = {
  longPollClients: CLIENTS ?? (QUICK ? [100, 1_000] : [1_000, 10_000, 19_000]),
  sseClients: SSE?.[0] ?? (QUICK ? 500 : 10_000),
  txRows: ROWS ?? (QUICK ? [1, 100] : [1, 100, 1_000]),
  writes: WRITES ?? (QUICK ? 3 : 10),
  /** Clients per load-generator process: each socket is one descriptor there (limit 20,000). */
  clientsPerProcess: 10_000,
  /** Longest wait for every client to get one write. */
  deliverTimeoutMs: 60_000,
  /** Longest wait for every client to be parked again after a write. */
  reparkTimeoutMs: 60_000,
  longPollTimeoutMs: 600_000,
  quietWaitSeconds: QUIET_WAIT_MS / 1000,
}

/** Admission limits raised so every client is served; live requests held for the whole run; SSE streams too. */
const SLUICE_FLAGS = [
  '--log-level',
  'warn',
  '--max-concurrent-initial',
  '1000000',
  '--max-concurrent-existing',
  '1000000',
  '--long-poll-timeout',
  `${SETTINGS.longPollTimeoutMs}ms`,
  '--sse-timeout',
  `${SETTINGS.longPollTimeoutMs}ms`,
]
/** Headers of one connection or one response, not of the content the ceiling repeats. */
const PER_RESPONSE_HEADERS = new Set(['date', 'connection', 'keep-alive', 'content-length', 'transfer-encoding'])

const here = dirname(fileURLToPath(import.meta.url))
let nextWrite = 1

function rssBytes(pid: number): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))
  return m === null ? Number.NaN : Number(m[1]) * 1024
}

/** Node flags of both servers: a full collection on SIGUSR2 (gc-on-signal.cjs), written to GC_DIR. */
const GC_NODE_ARGS = ['--expose-gc', '--require', fileURLToPath(new URL('./gc-on-signal.cjs', import.meta.url))]
/** Longest wait for a server's full collection (10k parked requests: well under a second on a quiet host). */
const GC_TIMEOUT_MS = 60_000

/** A server's resident set and V8 heap in use right after a full collection (see gc-on-signal.cjs). */
async function collected(pid: number): Promise<Collected> {
  const dir = process.env.BENCH_FANOUT_GC_DIR
  if (dir === undefined) throw new Error('BENCH_FANOUT_GC_DIR is not set')
  const file = join(dir, `gc-${pid}.json`)
  rmSync(file, { force: true })
  process.kill(pid, 'SIGUSR2')
  const deadline = performance.now() + GC_TIMEOUT_MS
  while (!existsSync(file)) {
    if (performance.now() > deadline) throw new Error(`process ${pid} did not report a collection within ${GC_TIMEOUT_MS} ms`)
    await sleep(20)
  }
  const usage = JSON.parse(readFileSync(file, 'utf8')) as { rss: number; heapUsed: number; resident?: Collected['resident']; v8Spaces?: Collected['v8Spaces'] }
  return { rssBytes: usage.rss, heapUsedBytes: usage.heapUsed, resident: usage.resident, v8Spaces: usage.v8Spaces }
}

function get(url: string): Promise<{ status: number; headers: http.IncomingHttpHeaders; body: string }> {
  return new Promise((resolve, reject) => {
    http
      .get(url, { agent: false }, (res) => {
        const chunks: Buffer[] = []
        res.on('data', (c: Buffer) => chunks.push(c))
        res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks).toString('utf8') }))
        res.on('error', reject)
      })
      .on('error', reject)
  })
}

/** Where a client following the shape stands: follows it from there to the head (non-live requests). */
interface Position {
  handle: string | undefined
  offset: string
  cursor: string
}

async function followToHead(url: string, at: Position): Promise<void> {
  for (;;) {
    const handle = at.handle === undefined ? '' : `&handle=${encodeURIComponent(at.handle)}`
    const res = await get(`${url}/v1/shape?${SHAPE_QUERY}&offset=${at.offset}${handle}`)
    if (res.status === 409) {
      at.handle = undefined
      at.offset = '-1'
      continue
    }
    if (res.status !== 200) throw new Error(`following the shape: ${res.status} ${res.body}`)
    at.handle = String(res.headers['electric-handle'])
    at.offset = String(res.headers['electric-offset'])
    if (res.headers['electric-up-to-date'] !== undefined) return
  }
}

async function sluiceMetric(url: string, name: string): Promise<number> {
  const text = (await get(`${url}/metrics`)).body
  const line = text.split('\n').find((l) => l.startsWith(`${name} `))
  return line === undefined ? Number.NaN : Number(line.slice(line.lastIndexOf(' ') + 1))
}

const sluiceWaiters = (url: string): Promise<number> => sluiceMetric(url, 'sluice_live_waiters')

interface Templates {
  /** By transaction size: Sluice's long-poll body and content headers for it. */
  readonly bodies: Map<number, { body: string; headers: Record<string, string>; events: string }>
}

/** SSE events for the entries of a long-poll body, one `data:` event each, as Sluice frames them. */
function sseEvents(body: string): string {
  return (JSON.parse(body) as unknown[]).map((m) => `data: ${JSON.stringify(m)}\n\n`).join('')
}

interface Target {
  readonly who: 'sluice' | 'ceiling'
  readonly url: string
  readonly pid: number
  readonly ceiling?: CommandChild | undefined
}

async function parkedCount(target: Target, sse: boolean): Promise<number> {
  if (target.ceiling !== undefined) {
    const c = await target.ceiling.call<{ parked: number; streams: number }>('parked')
    return sse ? c.streams : c.parked
  }
  return sluiceWaiters(target.url)
}

/** One cell: `clients` clients of `kind` on one server, every transaction size, SETTINGS.writes writes each. */
async function runCell(target: Target, kind: 'long-poll' | 'sse', clients: number, at: Position, templates: Templates, writer: CommandChild): Promise<Cell> {
  const sse = kind === 'sse'
  const rssBefore = rssBytes(target.pid)
  const gcBefore = await collected(target.pid)
  const procs: CommandChild[] = []
  const { hostname: host, port } = new URL(target.url)
  try {
    const startedAt = performance.now()
    for (let i = 0; i < clients; i += SETTINGS.clientsPerProcess) {
      const child = await CommandChild.spawn(`clients-${procs.length}`, fileURLToPath(new URL('./clients.ts', import.meta.url)))
      procs.push(child)
    }
    await Promise.all(
      procs.map((p, i) =>
        p.call('start', {
          host,
          port: Number(port),
          query: SHAPE_QUERY,
          handle: at.handle,
          offset: at.offset,
          cursor: '1',
          count: Math.min(SETTINGS.clientsPerProcess, clients - i * SETTINGS.clientsPerProcess),
          sse,
        }),
      ),
    )
    /**
     * Every client's request sent (the clients say) and held by the server. Sluice's gauge follows the waiter
     * count at each request's start and end, so it trails by a request or two: within 2 of the count is enough.
     */
    const parkedEnough = async (): Promise<number> => {
      const deadline = performance.now() + SETTINGS.reparkTimeoutMs
      const slack = target.who === 'sluice' ? 2 : 0
      for (;;) {
        const waiting = sse ? clients : (await Promise.all(procs.map((p) => p.call<{ waiting: number }>('pending')))).reduce((a, p) => a + p.waiting, 0)
        const n = await parkedCount(target, sse)
        if ((waiting >= clients && n >= clients - slack) || performance.now() > deadline) return n
        await sleep(20)
      }
    }
    const parked = await parkedEnough()
    const connectMs = performance.now() - startedAt
    await sleep(SETTLE_MS)
    const rssParked = rssBytes(target.pid)
    const gcParked = await collected(target.pid)
    const kib = (before: number, after: number): string => ((after - before) / clients / 1024).toFixed(2)
    log(
      `  ${target.who} ${kind} ${clients}: ${parked} parked after ${(connectMs / 1000).toFixed(1)} s; RSS ${(rssBefore / 2 ** 20).toFixed(0)} -> ${(rssParked / 2 ** 20).toFixed(0)} MiB; after a full collection ${kib(gcBefore.rssBytes, gcParked.rssBytes)} KiB of RSS and ${kib(gcBefore.heapUsedBytes, gcParked.heapUsedBytes)} KiB of heap per parked request (load ${loadavg()[0]!.toFixed(1)})`,
    )
    const [was, is] = [gcBefore.resident, gcParked.resident]
    if (was !== undefined && is !== undefined) {
      log(`    of which, per parked request: glibc's main arena ${kib(was.mallocHeap, is.mallocHeap)} KiB, anonymous mappings ${kib(was.anonymous, is.anonymous)} KiB, the rest ${kib(was.other, is.other)} KiB`)
    }
    const [spacesWere, spacesAre] = [gcBefore.v8Spaces, gcParked.v8Spaces]
    if (spacesWere !== undefined && spacesAre !== undefined) {
      const grown = Object.keys(spacesAre).map((name) => `${name} ${kib(spacesWere[name] ?? 0, spacesAre[name]!)}`)
      log(`    V8's resident pages per parked request (KiB): ${grown.join(', ')}`)
    }

    const bySize: Array<Cell['bySize'][number]> = []
    let rssPeak = rssParked
    for (const rows of SETTINGS.txRows) {
      await waitForQuiet(QUIET_WAIT_MS)
      const meter = new SystemMeter()
      const reads0 = target.who === 'sluice' ? await sluiceMetric(target.url, 'sluice_http_log_reads_total') : Number.NaN
      const cpu0 = processCpuMs(target.pid)
      const t0 = performance.now()
      const timings: WriteTiming[] = []
      for (let w = 0; w < SETTINGS.writes; w++) {
        const write = nextWrite++
        let startNs: bigint
        if (target.ceiling !== undefined) {
          const t = templates.bodies.get(rows)
          if (t === undefined) throw new Error(`no Sluice body of ${rows} rows to copy`)
          const r = await target.ceiling.call<{ startNs: string }>('publish', { write, body: t.body, headers: t.headers, events: t.events })
          startNs = BigInt(r.startNs)
        } else {
          const r = await writer.call<{ commitNs: string }>('write', { write, rows })
          startNs = BigInt(r.commitNs)
        }
        const deadline = performance.now() + SETTINGS.deliverTimeoutMs
        let got = 0
        let arrivals: number[] = []
        for (;;) {
          const stats = await Promise.all(procs.map((p) => p.call<{ got: number; arrivals: number[] }>('stats', { write })))
          got = stats.reduce((a, s) => a + s.got, 0)
          if (got >= clients || performance.now() > deadline) {
            arrivals = stats.flatMap((s) => s.arrivals)
            break
          }
          await sleep(10)
        }
        const ms = arrivals.map((a) => Number(BigInt(a) - startNs) / 1e6).sort((a, b) => a - b)
        timings.push({
          write,
          received: got,
          lastMs: ms.length === 0 ? Number.NaN : ms[ms.length - 1]!,
          medianClientMs: ms.length === 0 ? Number.NaN : ms[Math.floor(ms.length / 2)]!,
          firstMs: ms.length === 0 ? Number.NaN : ms[0]!,
        })
        if (target.who === 'sluice' && !templates.bodies.has(rows) && !sse) {
          const s = await procs[0]!.call<{ body: string; headers: Record<string, string> } | null>('sample', { write })
          if (s !== null) {
            const headers: Record<string, string> = {}
            for (const [k, v] of Object.entries(s.headers)) if (!PER_RESPONSE_HEADERS.has(k)) headers[k] = v
            templates.bodies.set(rows, { body: s.body, headers, events: sseEvents(s.body) })
          }
        }
        rssPeak = Math.max(rssPeak, rssBytes(target.pid))
        // Every long-poll back and waiting before the next write (SSE streams stay open).
        if (!sse) await parkedEnough()
        await sleep(100)
      }
      const cpu1 = processCpuMs(target.pid)
      const wallMs = performance.now() - t0
      const reads1 = target.who === 'sluice' ? await sluiceMetric(target.url, 'sluice_http_log_reads_total') : Number.NaN
      const row = {
        rows,
        writes: timings,
        serverCpuPercent: cpu0 === undefined || cpu1 === undefined ? null : ((cpu1 - cpu0) / wallMs) * 100,
        serverCpuMsPerWrite: cpu0 === undefined || cpu1 === undefined ? null : (cpu1 - cpu0) / timings.length,
        cpuPressurePercent: meter.cpuPressurePercent() ?? null,
        loadavg1: loadavg()[0]!,
        logReadsPerWrite: Number.isFinite(reads1 - reads0) ? (reads1 - reads0) / timings.length : null,
        ...summarize(timings, clients),
      }
      bySize.push(row)
      log(
        `    ${rows} row(s): last client p50 ${row.lastP50Ms.toFixed(1)} ms, p99 ${row.lastP99Ms.toFixed(1)} ms, max ${row.lastMaxMs.toFixed(1)} ms; median client p50 ${row.medianClientP50Ms.toFixed(1)} ms; ${timings.reduce((a, t) => a + t.received, 0)}/${timings.length * clients} received; server CPU ${row.serverCpuMsPerWrite?.toFixed(0) ?? '-'} ms/write; ${row.logReadsPerWrite?.toFixed(1) ?? '-'} log reads/write (load ${row.loadavg1.toFixed(1)})`,
      )
    }
    const stops = await Promise.all(procs.map((p) => p.call<Record<string, number>>('stop')))
    const counts: Record<string, number> = {}
    for (const s of stops) for (const [k, v] of Object.entries(s)) counts[k] = (counts[k] ?? 0) + v
    return {
      kind,
      clients,
      parked,
      connectMs,
      rssBeforeBytes: rssBefore,
      rssParkedBytes: rssParked,
      rssPeakBytes: rssPeak,
      rssPerParkedBytes: (rssParked - rssBefore) / clients,
      collectedBefore: gcBefore,
      collectedParked: gcParked,
      collectedRssPerParkedBytes: (gcParked.rssBytes - gcBefore.rssBytes) / clients,
      collectedHeapPerParkedBytes: (gcParked.heapUsedBytes - gcBefore.heapUsedBytes) / clients,
      clientCounts: counts,
      bySize,
    }
  } finally {
    for (const p of procs) await p.close()
  }
}

async function main(): Promise<void> {
  const limit = spawnSync('sh', ['-c', 'ulimit -n'], { encoding: 'utf8' }).stdout.trim()
  const most = Math.max(...SETTINGS.longPollClients, SETTINGS.sseClients)
  if (Number(limit) < most + 500) throw new Error(`open-file limit ${limit} is too low for ${most} clients (ulimit -n); BENCH_FANOUT_CLIENTS sets the counts`)
  const base = process.env.BENCH_DIR ?? tmpdir()
  mkdirSync(base, { recursive: true })
  const root = mkdtempSync(join(base, 'sluice-fanout-bench-'))
  // Taken now: its date is when the run started.
  const machine = machineInfo(root)
  const loads: LoadNote[] = [loadNote('start')]
  log(`fan-out benchmark${QUICK ? ' (QUICK)' : ''}; data in ${root}; ulimit -n ${limit}; load average ${loads[0]!.loadavg.join(', ')}`)
  process.env.BENCH_FANOUT_GC_DIR = join(root, 'gc')
  mkdirSync(process.env.BENCH_FANOUT_GC_DIR)
  const cluster = await startPostgres({ settings: BENCH_PG_SETTINGS })
  let sluice: SluiceProcess | undefined
  let ceiling: CommandChild | undefined
  let writer: CommandChild | undefined
  const cells: Array<Report['cells'][number]> = []
  try {
    for (const sql of schemaSql()) await cluster.query(sql)
    sluice = await startSluice({ databaseUrl: cluster.url, storageDir: join(root, 'sluice'), flags: SLUICE_FLAGS, nodeArgs: GC_NODE_ARGS })
    log(`Postgres ${cluster.version} on port ${cluster.port}; Sluice at ${sluice.url} (pid ${sluice.pid})`)
    writer = await CommandChild.spawn('writer', fileURLToPath(new URL('./writer.ts', import.meta.url)))
    await writer.call('connect', { connectionString: cluster.url })
    if (!ONLY_SLUICE) {
      ceiling = await CommandChild.spawn('ceiling', fileURLToPath(new URL('./ceiling.ts', import.meta.url)), GC_NODE_ARGS)
    }
    const ceilingPort = ceiling === undefined ? 0 : (await ceiling.call<{ port: number }>('listen')).port
    const at: Position = { handle: undefined, offset: '-1', cursor: '1' }
    const templates: Templates = { bodies: new Map() }
    const kinds: Array<['long-poll' | 'sse', number]> = [...SETTINGS.longPollClients.map((n) => ['long-poll', n] as ['long-poll', number])]
    if (SETTINGS.sseClients > 0) kinds.push(['sse', SETTINGS.sseClients])
    for (const [kind, clients] of kinds) {
      await followToHead(sluice.url, at)
      const own = await runCell({ who: 'sluice', url: sluice.url, pid: sluice.pid }, kind, clients, at, templates, writer)
      let other: Cell | undefined
      if (ceiling !== undefined) {
        other = await runCell({ who: 'ceiling', url: `http://127.0.0.1:${ceilingPort}`, pid: ceiling.pid, ceiling }, kind, clients, at, templates, writer)
      }
      cells.push({ kind, clients, sluice: own, ceiling: other })
      loads.push(loadNote(`after ${kind} ${clients}`))
      // After every cell: a run cut short (a timeout, a crash) still leaves what it measured.
      save(machine, limit, cluster.version, loads, cells)
    }
  } finally {
    await writer?.close()
    await ceiling?.close()
    await sluice?.stop()
    await cluster.stop()
  }
  loads.push(loadNote('end'))
  const { report, name, outDir } = save(machine, limit, cluster.version, loads, cells)
  for (const line of closingNote(report)) log(line)
  log(`wrote ${name}.md and .json in ${outDir} (${report.runSeconds.toFixed(0)} s)`)
  // Heap snapshots asked for (gc-on-signal.cjs) are kept with the rest of the data, for reading.
  if (process.env.BENCH_FANOUT_HEAP_SNAPSHOTS === '1') log(`heap snapshots kept in ${join(root, 'gc')}`)
  else rmSync(root, { recursive: true, force: true })
}

function save(machine: Machine, limit: string, postgresVersion: string, loads: LoadNote[], cells: Report['cells']): { report: Report; name: string; outDir: string } {
  const report: Report = {
    quick: QUICK,
    partial: PARTIAL,
    machine: { ...machine, fdLimit: limit },
    postgres: { version: postgresVersion, settings: BENCH_PG_SETTINGS },
    settings: { ...SETTINGS, tableRows: FANOUT_ROWS },
    sluiceFlags: SLUICE_FLAGS,
    runSeconds: runSeconds(),
    loads,
    cells,
  }
  const name = QUICK ? 'fanout.quick' : PARTIAL ? 'fanout.partial' : 'fanout'
  const outDir = process.env.BENCH_RESULTS_DIR ?? join(here, '..', 'results')
  mkdirSync(outDir, { recursive: true })
  writeReport(report, join(outDir, name))
  return { report, name, outDir }
}

await main()
// Pools and child pipes must not hold the process open.
process.exit(0)
