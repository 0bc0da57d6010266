/**
 * bench:overlap: many shapes at once (Electric's benchmarks 5 and 6), with the
 * `sluice start` server, Postgres and the load generators in their own processes.
 *
 * Measures:
 * - fan-out to overlapping shapes: N distinct shapes that all hold the row one
 *   update changes, followed live (long-poll) by N independent clients (spread
 *   over two client processes), then by one client following all N (one
 *   process); per write, commit to the first and to the last client having it,
 *   over at least 10 writes; server CPU and peak RSS. The 1-shape row is the
 *   reference (the same write to one shape and one client);
 * - concurrent shape creation: C new shapes requested at once (offset=-1, each
 *   its own where clause) against the default admission control (300 initial
 *   requests at once; 503 + retry-after beyond it), time until each has its
 *   snapshot, retries and errors, peak RSS and Postgres connections; beside it
 *   the same count of plain SELECTs of the same rows straight to Postgres.
 * Does not measure: an HTTP cache in front, SSE, big transactions, other machines.
 *
 * Usage: `npm run bench:overlap`. QUICK=1: a smoke run (results/overlap.quick.*).
 * ONLY=fanout or ONLY=create, BENCH_OVERLAP_SHAPES and BENCH_OVERLAP_CREATE
 * (comma-separated counts), BENCH_OVERLAP_WRITES, BENCH_REPS: partial runs
 * (results/overlap.partial.*). BENCH_DIR, BENCH_QUIET_WAIT_MS, BENCH_RESULTS_DIR
 * as in the other benchmarks.
 */
import { spawnSync } from 'node:child_process'
import { mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { loadavg, tmpdir } from 'node:os'
import { dirname, join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { fileURLToPath } from 'node:url'
import { type PostgresCluster, startPostgres } from '@sluice/test-utils'
import { CommandChild } from '../http/json-lines.js'
import { startSluice } from '../http/sluice-process.js'
import { BENCH_PG_SETTINGS } from '../pipeline/pg.js'
import { processCpuMs } from '../pipeline/proc.js'
import type { LoadNote } from '../pipeline/report.js'
import { quantile } from '../pipeline/stats.js'
import { SystemMeter, waitForQuiet } from '../storage/measure.js'
import { machineInfo } from '../storage/report.js'
import { type CreateRun, type FanoutMode, type FanoutRun, type Report, type WriteFigures, closingLines, writeReport } from './report.js'
import { FANOUT_TABLE, schemaSql } from './schema.js'
import { loadNote, log, runSeconds } from '../pipeline/run-log.js'

const QUICK = process.env.QUICK === '1'
const ONLY = new Set((process.env.ONLY ?? 'fanout,create').split(',').map((s) => s.trim()))
const counts = (name: string) => process.env[name]?.split(',').map(Number)
const SHAPES = counts('BENCH_OVERLAP_SHAPES')
const CREATE = counts('BENCH_OVERLAP_CREATE')
const PARTIAL =
  process.env.ONLY !== undefined || process.env.BENCH_REPS !== undefined || SHAPES !== undefined || CREATE !== undefined || process.env.BENCH_OVERLAP_WRITES !== undefined
const QUIET_WAIT_MS = Number(process.env.BENCH_QUIET_WAIT_MS ?? (QUICK ? 0 : 10_000))

const SETTINGS = {
  fanoutShapes: SHAPES ?? (QUICK ? [1, 100, 300] : [1, 1_000, 3_000, 10_000]),
  /** Writes measured per shape count and mode; each waits until every client has the one before. */
  writes: Number(process.env.BENCH_OVERLAP_WRITES ?? (QUICK ? 10 : 20)),
  /** Independent clients are spread over this many processes; the one client is one process. */
  clientProcesses: 2,
  /** Pause after every client has a write, before the next: the re-polls are back in place. */
  gapMs: 300,
  /** Longest wait for every client to have one write. */
  writeTimeoutMs: 60_000,
  handshakeConcurrency: 64,
  createCounts: CREATE ?? (QUICK ? [100, 400] : [1_000, 5_000]),
  createReps: Number(process.env.BENCH_REPS ?? 1),
  /** The creation ceiling's pool: Sluice's default snapshot connections. */
  selectConnections: 4,
  sampleMs: 100,
  quietWaitSeconds: QUIET_WAIT_MS / 1000,
}

/** Default limits everywhere: admission control's refusals are part of what is measured. */
const SLUICE_FLAGS = ['--log-level', 'warn']

const here = dirname(fileURLToPath(import.meta.url))
const resultsDir = join(here, '..', 'results')
function rssMiB(pid: number): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))
  return m === null ? Number.NaN : Number(m[1]) / 1024
}

/** The highest VmRSS seen between `start` and `stop`, sampled every `sampleMs`. */
class RssPeak {
  private peak = 0
  private readonly timer: NodeJS.Timeout
  constructor(private readonly pid: number) {
    this.sample()
    this.timer = setInterval(() => this.sample(), SETTINGS.sampleMs)
  }
  private sample(): void {
    try {
      this.peak = Math.max(this.peak, rssMiB(this.pid))
    } catch {
      // The process is gone: the peak so far stands.
    }
  }
  stop(): number {
    clearInterval(this.timer)
    this.sample()
    return this.peak
  }
}

/** The most client connections Postgres had (ours excluded), sampled every `sampleMs`. */
async function watchConnections(cluster: PostgresCluster): Promise<{ stop(): Promise<{ clients: number; walsenders: number }> }> {
  const c = await cluster.connect()
  let clients = 0
  let walsenders = 0
  let running = true
  const loop = (async () => {
    while (running) {
      const { rows } = await c.query<{ clients: string; walsenders: string }>(
        "SELECT count(*) FILTER (WHERE backend_type = 'client backend') AS clients, count(*) FILTER (WHERE backend_type = 'walsender') AS walsenders FROM pg_stat_activity WHERE pid <> pg_backend_pid()",
      )
      clients = Math.max(clients, Number(rows[0]!.clients))
      walsenders = Math.max(walsenders, Number(rows[0]!.walsenders))
      await sleep(SETTINGS.sampleMs)
    }
  })()
  return {
    stop: async () => {
      running = false
      await loop
      await c.end()
      return { clients, walsenders }
    },
  }
}

function summary(values: readonly number[]): { p50: number; p99: number; max: number } {
  const sorted = [...values].sort((a, b) => a - b)
  return { p50: quantile(sorted, 0.5), p99: quantile(sorted, 0.99), max: sorted.length === 0 ? Number.NaN : sorted[sorted.length - 1]! }
}

function fdLimit(): string {
  return spawnSync('sh', ['-c', 'ulimit -n'], { encoding: 'utf8' }).stdout.trim()
}

// ---- fan-out to overlapping shapes ----

let nextWrite = 1

async function fanoutRun(baseUrl: string, pid: number, shapes: number, mode: FanoutMode, writer: CommandChild): Promise<FanoutRun> {
  const processes = mode === 'one' ? 1 : Math.min(SETTINGS.clientProcesses, shapes)
  const rss = new RssPeak(pid)
  let writesPeak: RssPeak | undefined
  const clients = await Promise.all(
    Array.from({ length: processes }, (_, i) => CommandChild.spawn(`clients-${i}`, fileURLToPath(new URL('./fanout-clients.ts', import.meta.url)))),
  )
  try {
    const per = Math.ceil(shapes / processes)
    const hs = await Promise.all(
      clients.map((c, i) =>
        c.call<{ handshakeMs: number }>('start', { baseUrl, from: i * per, count: Math.min(per, shapes - i * per), concurrency: Math.ceil(SETTINGS.handshakeConcurrency / processes) }),
      ),
    )
    const handshakeMs = Math.max(...hs.map((h) => h.handshakeMs))
    const handshakePeakMiB = rss.stop()
    await waitForQuiet(QUIET_WAIT_MS)
    await sleep(1000)
    const parkedMiB = rssMiB(pid)
    writesPeak = new RssPeak(pid)
    const meter = new SystemMeter()
    const cpu0 = processCpuMs(pid)
    const clientCpu0 = clients.map((c) => processCpuMs(c.pid) ?? 0)
    const t0 = performance.now()
    const writes: WriteFigures[] = []
    for (let w = 0; w < SETTINGS.writes; w++) {
      const write = nextWrite++
      const at = performance.now()
      const done = await writer.call<{ meanUpdateMs: number }>('run', { run: write, ms: 1000, rate: 1, keys: 1, table: FANOUT_TABLE })
      let received = 0
      while (performance.now() - at < SETTINGS.writeTimeoutMs) {
        const got = await Promise.all(clients.map((c) => c.call<{ received: number }>('received', { write })))
        received = got.reduce((a, g) => a + g.received, 0)
        if (received >= shapes) break
        await sleep(10)
      }
      const lists = await Promise.all(clients.map((c) => c.call<{ latencies: number[] }>('latencies', { write })))
      const all = lists.flatMap((l) => l.latencies)
      const s = summary(all)
      writes.push({ received: all.length, firstMs: Math.min(...all), p50Ms: s.p50, lastMs: s.max, updateMs: done.meanUpdateMs })
      await sleep(SETTINGS.gapMs)
    }
    const wallMs = performance.now() - t0
    const cpu1 = processCpuMs(pid)
    const clientCpuMs = clients.map((c, i) => (processCpuMs(c.pid) ?? 0) - clientCpu0[i]!)
    const final = await Promise.all(clients.map((c) => c.call<Record<string, unknown>>('stop')))
    const first = summary(writes.map((w) => w.firstMs))
    const last = summary(writes.map((w) => w.lastMs))
    return {
      shapes,
      mode,
      processes,
      handshakeMs,
      handshakePeakRssMiB: handshakePeakMiB,
      parkedRssMiB: parkedMiB,
      writesPeakRssMiB: writesPeak.stop(),
      writes,
      lost: writes.reduce((a, w) => a + (shapes - w.received), 0),
      firstP50Ms: first.p50,
      firstP99Ms: first.p99,
      lastP50Ms: last.p50,
      lastP99Ms: last.p99,
      lastMaxMs: last.max,
      serverCpuPercent: cpu0 === undefined || cpu1 === undefined ? null : ((cpu1 - cpu0) / wallMs) * 100,
      serverCpuMsPerWrite: cpu0 === undefined || cpu1 === undefined ? null : (cpu1 - cpu0) / writes.length,
      clientCpuPercent: (clientCpuMs.reduce((a, b) => a + b, 0) / wallMs) * 100,
      cpuPressurePercent: meter.cpuPressurePercent() ?? null,
      loadavg1: loadavg()[0]!,
      clients: final,
    }
  } finally {
    rss.stop()
    writesPeak?.stop()
    await Promise.all(clients.map((c) => c.close()))
  }
}

async function fanout(root: string): Promise<FanoutRun[]> {
  const cluster = await startPostgres({ settings: BENCH_PG_SETTINGS })
  const runs: FanoutRun[] = []
  let sluice: Awaited<ReturnType<typeof startSluice>> | undefined
  let writer: CommandChild | undefined
  try {
    for (const sql of schemaSql(1)) await cluster.query(sql)
    sluice = await startSluice({ databaseUrl: cluster.url, storageDir: join(root, 'fanout'), flags: SLUICE_FLAGS })
    log(`fan-out: Postgres ${cluster.version}, Sluice at ${sluice.url} (pid ${sluice.pid}, RSS ${rssMiB(sluice.pid).toFixed(0)} MiB)`)
    writer = await CommandChild.spawn('writer', fileURLToPath(new URL('../live/writer.ts', import.meta.url)))
    await writer.call('connect', { connectionString: cluster.url })
    for (const shapes of SETTINGS.fanoutShapes) {
      for (const mode of ['independent', 'one'] as const) {
        const r = await fanoutRun(sluice.url, sluice.pid, shapes, mode, writer)
        runs.push(r)
        log(
          `  ${shapes} shapes, ${mode === 'one' ? 'one client in all' : `one client each (${r.processes} processes)`}: first p50 ${r.firstP50Ms.toFixed(1)} ms, last p50 ${r.lastP50Ms.toFixed(1)} ms, last p99 ${r.lastP99Ms.toFixed(1)} ms; ${r.lost} lost; handshake ${(r.handshakeMs / 1000).toFixed(1)} s; RSS parked ${r.parkedRssMiB.toFixed(0)} MiB, peak ${r.writesPeakRssMiB.toFixed(0)} MiB; server CPU ${r.serverCpuPercent?.toFixed(0) ?? '-'}% (${r.serverCpuMsPerWrite?.toFixed(0) ?? '-'} ms/write); clients ${r.clientCpuPercent.toFixed(0)}% (load ${r.loadavg1.toFixed(1)})`,
        )
      }
    }
  } finally {
    await writer?.close()
    await sluice?.stop()
    await cluster.stop()
  }
  return runs
}

// ---- concurrent shape creation ----

async function createRun(root: string, count: number, rep: number, creator: CommandChild): Promise<CreateRun> {
  const cluster = await startPostgres({ settings: BENCH_PG_SETTINGS })
  let sluice: Awaited<ReturnType<typeof startSluice>> | undefined
  try {
    for (const sql of schemaSql(count)) await cluster.query(sql)
    sluice = await startSluice({ databaseUrl: cluster.url, storageDir: join(root, `create-${count}-${rep}`), flags: SLUICE_FLAGS })
    await waitForQuiet(QUIET_WAIT_MS)
    const startRssMiB = rssMiB(sluice.pid)
    const rss = new RssPeak(sluice.pid)
    const conns = await watchConnections(cluster)
    const meter = new SystemMeter()
    const cpu0 = processCpuMs(sluice.pid)
    const r = await creator.call<{ totalMs: number; times: number[]; requests: number; retries503: number; networkErrors: number; otherStatus: number; failed: number; statuses: Record<string, number> }>(
      'create',
      { baseUrl: sluice.url, from: 1, count },
    )
    const cpu1 = processCpuMs(sluice.pid)
    const pressure = meter.cpuPressurePercent() ?? null
    const peakRssMiB = rss.stop()
    const pgConnections = await conns.stop()
    await sluice.stop()
    sluice = undefined
    const ceiling = await creator.call<{ totalMs: number; times: number[] }>('select', { connectionString: cluster.url, from: 1, count, connections: SETTINGS.selectConnections })
    const s = summary(r.times)
    const c = summary(ceiling.times)
    return {
      count,
      rep,
      completed: r.times.length,
      totalMs: r.totalMs,
      p50Ms: s.p50,
      p99Ms: s.p99,
      maxMs: s.max,
      requests: r.requests,
      retries503: r.retries503,
      networkErrors: r.networkErrors,
      otherStatus: r.otherStatus,
      failed: r.failed,
      statuses: r.statuses,
      startRssMiB,
      peakRssMiB,
      pgClientConnections: pgConnections.clients,
      pgWalsenders: pgConnections.walsenders,
      serverCpuPercent: cpu0 === undefined || cpu1 === undefined ? null : ((cpu1 - cpu0) / r.totalMs) * 100,
      cpuPressurePercent: pressure,
      loadavg1: loadavg()[0]!,
      ceiling: { totalMs: ceiling.totalMs, p50Ms: c.p50, p99Ms: c.p99, maxMs: c.max, connections: SETTINGS.selectConnections },
    }
  } finally {
    await sluice?.stop()
    await cluster.stop()
  }
}

async function creation(root: string): Promise<CreateRun[]> {
  const creator = await CommandChild.spawn('creator', fileURLToPath(new URL('./creator.ts', import.meta.url)))
  const runs: CreateRun[] = []
  try {
    for (const count of SETTINGS.createCounts) {
      for (let rep = 1; rep <= SETTINGS.createReps; rep++) {
        const r = await createRun(root, count, rep, creator)
        runs.push(r)
        log(
          `  ${count} new shapes at once, rep ${rep}: all up to date after ${(r.totalMs / 1000).toFixed(1)} s (p50 ${(r.p50Ms / 1000).toFixed(2)} s, p99 ${(r.p99Ms / 1000).toFixed(2)} s); ${r.completed}/${count} completed, ${r.retries503} 503s retried, ${r.networkErrors} network errors, ${r.otherStatus} other statuses; RSS ${r.startRssMiB.toFixed(0)} -> peak ${r.peakRssMiB.toFixed(0)} MiB; Postgres connections ${r.pgClientConnections} (+${r.pgWalsenders} walsender); ceiling ${r.ceiling.totalMs.toFixed(0)} ms (load ${r.loadavg1.toFixed(1)})`,
        )
      }
    }
  } finally {
    await creator.close()
  }
  return runs
}

// ---- main ----

async function main(): Promise<void> {
  const limit = fdLimit()
  const maxShapes = Math.max(...SETTINGS.fanoutShapes, ...SETTINGS.createCounts)
  // Each client socket is an fd in a client process and another in the server's.
  if (Number(limit) < maxShapes + 1_000) throw new Error(`open-file limit ${limit} is too low for ${maxShapes} clients (ulimit -n)`)
  const base = process.env.BENCH_DIR ?? tmpdir()
  mkdirSync(base, { recursive: true })
  const root = mkdtempSync(join(base, 'sluice-overlap-bench-'))
  // Taken now: its date is when the run started.
  const machine = machineInfo(root)
  const loads: LoadNote[] = [loadNote('start')]
  log(`overlap benchmark${QUICK ? ' (QUICK)' : ''}; data in ${root}; ulimit -n ${limit}; load average ${loads[0]!.loadavg.join(', ')}`)
  let fanoutRuns: FanoutRun[] = []
  let createRuns: CreateRun[] = []
  if (ONLY.has('fanout')) {
    fanoutRuns = await fanout(root)
    loads.push(loadNote('after fan-out'))
  }
  if (ONLY.has('create')) {
    createRuns = await creation(root)
    loads.push(loadNote('after creation'))
  }
  loads.push(loadNote('end'))
  const report: Report = {
    quick: QUICK,
    partial: PARTIAL,
    machine: { ...machine, fdLimit: limit },
    postgresSettings: BENCH_PG_SETTINGS,
    settings: SETTINGS,
    sluiceFlags: SLUICE_FLAGS,
    runSeconds: runSeconds(),
    loads,
    fanout: fanoutRuns,
    create: createRuns,
  }
  const name = QUICK ? 'overlap.quick' : PARTIAL ? 'overlap.partial' : 'overlap'
  const outDir = process.env.BENCH_RESULTS_DIR ?? resultsDir
  mkdirSync(outDir, { recursive: true })
  writeReport(report, join(outDir, name), QUICK ? 'quick' : PARTIAL ? 'partial' : 'full')
  for (const line of closingLines(report)) log(line)
  log(`wrote ${name}.md and .json (${report.runSeconds.toFixed(0)} s)`)
  rmSync(root, { recursive: true, force: true })
}

await main()
// Pools and child pipes must not hold the process open.
process.exit(0)
