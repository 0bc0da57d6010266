/**
 * bench:live: write-to-client latency with many independent shapes (Electric's
 * benchmark 3). K shapes `k = i`, one live long-poll client each; a writer
 * commits one-row updates into random shapes at a low rate; each client
 * records the time from the update being sent to the whole response being
 * read. Sluice next to a bare fastify server woken by LISTEN/NOTIFY (the
 * in-memory ceiling), and next to the floor of durable-before-sent: the
 * ceiling plus one fdatasync of this disk, measured in the same run. Then the
 * group commit under a busy pipeline: flushes per transaction from /metrics.
 * Does not measure: many clients of one shape, SSE, a cache in front, TLS.
 *
 * Usage: `npm run bench:live` (or `pnpm --filter @sluice/bench run
 * bench:live`). QUICK=1: a smoke run (results/live.quick.*). BENCH_REPS,
 * BENCH_DIR, BENCH_QUIET_WAIT_MS as in the other benchmarks; BENCH_LIVE_SHAPES
 * (comma-separated counts), BENCH_LIVE_FOLLOW_CAP (most shapes with a client)
 * and BENCH_RESULTS_DIR (where the report goes) for smaller runs, and
 * BENCH_SLUICE_FLAGS (more `sluice start` flags) for experiments
 * (results/live.partial.*).
 */
import { spawnSync } from 'node:child_process'
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs'
import { loadavg, tmpdir } from 'node:os'
import { dirname, join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { fileURLToPath } from 'node:url'
import { startPostgres } from '@sluice/test-utils'
import { CommandChild } from '../http/json-lines.js'
import { type SluiceProcess, startSluice } from '../http/sluice-process.js'
import { BENCH_PG_SETTINGS } from '../pipeline/pg.js'
import { processCpuMs } from '../pipeline/proc.js'
import type { LoadNote } from '../pipeline/report.js'
import { median, quantile } from '../pipeline/stats.js'
import { SystemMeter, waitForQuiet } from '../storage/measure.js'
import { machineInfo } from '../storage/report.js'
import { type BurstResult, type CommitCount, type FsyncSample, type LiveRow, type LiveRun, type Report, burstLine, liveMedian, targetLines, writeReport } from './report.js'
import { schemaSql } from './schema.js'
import { loadNote, log, runSeconds } from '../pipeline/run-log.js'

const QUICK = process.env.QUICK === '1'
const SHAPES = process.env.BENCH_LIVE_SHAPES?.split(',').map(Number)
const FOLLOW_CAP = process.env.BENCH_LIVE_FOLLOW_CAP === undefined ? undefined : Number(process.env.BENCH_LIVE_FOLLOW_CAP)
const PARTIAL = process.env.BENCH_REPS !== undefined || SHAPES !== undefined || FOLLOW_CAP !== undefined || process.env.BENCH_SLUICE_FLAGS !== undefined
const QUIET_WAIT_MS = Number(process.env.BENCH_QUIET_WAIT_MS ?? (QUICK ? 0 : 10_000))
/** Longest wait for Sluice to settle after the handshakes (see `settle`). */
const SETTLE_MAX_MS = 120_000
/** Descriptors a server needs besides its clients' sockets: the store's open files (a quarter of the limit) and the rest. */
const SERVER_RESERVED_FDS = 6_000

function fdLimit(): number {
  return Number(spawnSync('sh', ['-c', 'ulimit -n'], { encoding: 'utf8' }).stdout.trim())
}

const LIMIT = fdLimit()
const shapeCounts = SHAPES ?? (QUICK ? [1, 100] : [1, 1_000, 10_000, 100_000])
/** The largest shape count whose clients fit the open-file limit (a server holds one socket per live client). */
const followCap = FOLLOW_CAP ?? Math.max(1, ...shapeCounts.filter((c) => c + SERVER_RESERVED_FDS <= LIMIT))

const SETTINGS = {
  reps: Number(process.env.BENCH_REPS ?? (QUICK ? 1 : 3)),
  shapes: shapeCounts,
  followCap,
  /** Commits per second: far below what Postgres or Sluice take, so nothing queues. */
  writeRate: 40,
  liveSeconds: QUICK ? 4 : 30,
  liveWarmupSeconds: QUICK ? 1 : 3,
  /** Longest wait, after the last write, for every write to reach its client. */
  drainSeconds: 10,
  handshakeConcurrency: 64,
  createConcurrency: 32,
  clientsPerProcess: 10_000,
  longPollTimeoutMs: 20_000,
  fsyncSamples: QUICK ? 50 : 300,
  fsyncBytes: 300,
  fsyncGapMs: 5,
  burstConnections: 8,
  burstSeconds: QUICK ? 3 : 10,
  quietWaitSeconds: QUIET_WAIT_MS / 1000,
}

/** Sluice's admission limits raised, so every request is served, not refused. */
const SLUICE_FLAGS = [
  ...['--log-level', 'warn', '--max-concurrent-initial', '1000000', '--max-concurrent-existing', '1000000', '--long-poll-timeout', `${SETTINGS.longPollTimeoutMs}ms`],
  ...(process.env.BENCH_SLUICE_FLAGS?.split(' ').filter((f) => f !== '') ?? []),
]

const here = dirname(fileURLToPath(import.meta.url))
const resultsDir = join(here, '..', 'results')
function script(name: string): string {
  return fileURLToPath(new URL(`./${name}`, import.meta.url))
}

/** The loopback address of client process `i`: each its own source address, so each has the whole ephemeral port range. */
function clientAddress(i: number): string {
  return `127.0.0.${2 + i}`
}

// ---- Sluice's counters ----

interface Counters {
  readonly transactions: number
  readonly flushes: number
  readonly flushSeconds: number
  /** Event-loop delay since the previous scrape (prom-client resets its histogram at each). */
  readonly loopP99Ms: number
  readonly loopMaxMs: number
}

async function readCounters(baseUrl: string): Promise<Counters> {
  const text = await (await fetch(`${baseUrl}/metrics`)).text()
  const value = (name: string): number => {
    const m = new RegExp(`^${name}(?:\\{[^}]*\\})? ([0-9.e+-]+)$`, 'm').exec(text)
    if (m === null) throw new Error(`/metrics has no ${name}`)
    return Number(m[1])
  }
  return {
    transactions: value('sluice_transactions_routed_total'),
    flushes: value('sluice_storage_flush_duration_seconds_count'),
    flushSeconds: value('sluice_storage_flush_duration_seconds_sum'),
    loopP99Ms: value('nodejs_eventloop_lag_p99_seconds') * 1000,
    loopMaxMs: value('nodejs_eventloop_lag_max_seconds') * 1000,
  }
}

function commitsBetween(a: Counters, b: Counters): CommitCount {
  const transactions = b.transactions - a.transactions
  const flushes = b.flushes - a.flushes
  return {
    transactions,
    flushes,
    flushesPerTransaction: transactions === 0 ? Number.NaN : flushes / transactions,
    meanFlushMs: flushes === 0 ? Number.NaN : ((b.flushSeconds - a.flushSeconds) / flushes) * 1000,
    loopP99Ms: b.loopP99Ms,
    loopMaxMs: b.loopMaxMs,
  }
}

// ---- one run ----

interface Target {
  readonly who: 'sluice' | 'ceiling'
  readonly url: string
  readonly pid: number
}

let nextRunId = 1

async function withClients<T>(count: number, f: (clients: CommandChild[]) => Promise<T>): Promise<T> {
  const processes = Math.ceil(count / SETTINGS.clientsPerProcess)
  const clients = await Promise.all(Array.from({ length: processes }, (_, i) => CommandChild.spawn(`clients-${i}`, script('live-clients.ts'))))
  try {
    return await f(clients)
  } finally {
    await Promise.all(clients.map((c) => c.close()))
  }
}

async function liveRun(target: Target, followed: number, writer: CommandChild): Promise<LiveRun> {
  return withClients(followed, async (clients) => {
    const per = SETTINGS.clientsPerProcess
    const t0 = performance.now()
    await Promise.all(
      clients.map((c, i) =>
        c.call('start', { baseUrl: target.url, from: i * per, to: Math.min(followed, (i + 1) * per), concurrency: Math.ceil(SETTINGS.handshakeConcurrency / clients.length), localAddress: clientAddress(i) }),
      ),
    )
    const handshakeMs = performance.now() - t0
    if (target.who === 'sluice') await settle(target.url)
    await writer.call('run', { run: nextRunId++, ms: SETTINGS.liveWarmupSeconds * 1000, rate: SETTINGS.writeRate, keys: followed })
    await waitForQuiet(QUIET_WAIT_MS)
    const run = nextRunId++
    await Promise.all(clients.map((c) => c.call('measure', { run })))
    const before = target.who === 'sluice' ? await readCounters(target.url) : undefined
    const meter = new SystemMeter()
    const c0 = processCpuMs(target.pid)
    const w0 = performance.now()
    const written = await writer.call<{ writes: number; meanUpdateMs: number }>('run', { run, ms: SETTINGS.liveSeconds * 1000, rate: SETTINGS.writeRate, keys: followed })
    const c1 = processCpuMs(target.pid)
    const wallMs = performance.now() - w0
    const pressure = meter.cpuPressurePercent() ?? null
    const deadline = performance.now() + SETTINGS.drainSeconds * 1000
    const received = async (): Promise<number> => (await Promise.all(clients.map((c) => c.call<{ received: number }>('stats')))).reduce((a, s) => a + s.received, 0)
    while ((await received()) < written.writes && performance.now() < deadline) await sleep(100)
    const after = before === undefined ? undefined : await readCounters(target.url)
    const finals = await Promise.all(clients.map((c) => c.call<Record<string, unknown> & { latencies: number[] }>('stop')))
    const latencies = finals.flatMap((f) => f.latencies)
    const summed: Record<string, unknown> = {}
    for (const f of finals) {
      for (const [key, value] of Object.entries(f)) {
        if (typeof value === 'number' && !['p50', 'p95', 'p99', 'max', 'mean', 'received'].includes(key)) summed[key] = ((summed[key] as number | undefined) ?? 0) + value
      }
    }
    return {
      writes: written.writes,
      received: latencies.length,
      lost: Math.max(0, written.writes - latencies.length),
      p50Ms: quantile(latencies, 0.5),
      p95Ms: quantile(latencies, 0.95),
      p99Ms: quantile(latencies, 0.99),
      maxMs: latencies.length === 0 ? Number.NaN : Math.max(...latencies),
      meanMs: latencies.length === 0 ? Number.NaN : latencies.reduce((a, b) => a + b, 0) / latencies.length,
      handshakeMs,
      meanUpdateMs: written.meanUpdateMs,
      serverCpuPercent: c0 === undefined || c1 === undefined ? null : ((c1 - c0) / wallMs) * 100,
      cpuPressurePercent: pressure,
      loadavg1: loadavg()[0]!,
      ...(before !== undefined && after !== undefined ? { commits: commitsBetween(before, after) } : {}),
      clients: summed,
    }
  })
}

/**
 * Until Sluice has finished what creating shapes left behind (snapshots still
 * finishing, journal segments waiting for a checkpoint to write their tails
 * out), at most `SETTLE_MAX_MS`: the run measures the steady state, not the
 * aftermath of creating thousands of shapes.
 */
async function settle(url: string): Promise<void> {
  const until = performance.now() + SETTLE_MAX_MS
  for (;;) {
    const text = await (await fetch(`${url}/metrics`)).text()
    const gauge = (name: string): number => Number(new RegExp(`^${name} ([0-9.e+-]+)$`, 'm').exec(text)?.[1] ?? 0)
    if ((gauge('sluice_shapes_creating') === 0 && gauge('sluice_storage_journal_segments') <= 1) || performance.now() > until) return
    await sleep(1000)
  }
}

/** Creates Sluice's shapes `from .. to-1` that no client follows. */
async function createShapes(url: string, from: number, to: number): Promise<number> {
  const t0 = performance.now()
  await withClients(1, async ([c]) => {
    const r = await c!.call<{ failed: number }>('create', { baseUrl: url, from, to, concurrency: SETTINGS.createConcurrency, localAddress: clientAddress(0) })
    if (r.failed > 0) throw new Error(`${r.failed} of ${to - from} shapes could not be created`)
  })
  return (performance.now() - t0) / 1000
}

async function probeFsync(probe: CommandChild, dir: string): Promise<FsyncSample> {
  return probe.call<FsyncSample>('probe', { dir, samples: SETTINGS.fsyncSamples, bytes: SETTINGS.fsyncBytes, gapMs: SETTINGS.fsyncGapMs })
}

// ---- main ----

async function main(): Promise<void> {
  const maxShapes = Math.max(...SETTINGS.shapes)
  if (LIMIT < Math.min(maxShapes, followCap) + 1_000) throw new Error(`open-file limit ${LIMIT} is too low for ${Math.min(maxShapes, followCap)} live clients (ulimit -n)`)
  const base = process.env.BENCH_DIR ?? tmpdir()
  mkdirSync(base, { recursive: true })
  const root = mkdtempSync(join(base, 'sluice-live-bench-'))
  // Taken now: its date is when the run started.
  const machine = machineInfo(root)
  const loads: LoadNote[] = [loadNote('start')]
  log(`live benchmark${QUICK ? ' (QUICK)' : ''}; data in ${root}; ulimit -n ${LIMIT}; clients on at most ${followCap} shapes; load average ${loads[0]!.loadavg.join(', ')}`)
  const cluster = await startPostgres({ settings: BENCH_PG_SETTINGS })
  let sluice: SluiceProcess | undefined
  let ceiling: CommandChild | undefined
  let writer: CommandChild | undefined
  let probe: CommandChild | undefined
  const rows: LiveRow[] = []
  let burst: BurstResult | undefined
  try {
    for (const sql of schemaSql(maxShapes)) await cluster.query(sql)
    log(`Postgres ${cluster.version} on port ${cluster.port}`)
    const dataDir = join(root, 'sluice')
    sluice = await startSluice({ databaseUrl: cluster.url, storageDir: dataDir, flags: SLUICE_FLAGS })
    log(`Sluice at ${sluice.url} (pid ${sluice.pid})`)
    ceiling = await CommandChild.spawn('ceiling', script('ceiling-server.ts'))
    const { port } = await ceiling.call<{ port: number }>('listen', { connectionString: cluster.url, longPollTimeoutMs: SETTINGS.longPollTimeoutMs })
    const targets: Record<'sluice' | 'ceiling', Target> = {
      sluice: { who: 'sluice', url: sluice.url, pid: sluice.pid },
      ceiling: { who: 'ceiling', url: `http://127.0.0.1:${port}`, pid: ceiling.pid },
    }
    writer = await CommandChild.spawn('writer', script('writer.ts'))
    await writer.call('connect', { connectionString: cluster.url })
    probe = await CommandChild.spawn('fsync-probe', script('fsync-probe.ts'))
    let created = 0
    for (const shapes of SETTINGS.shapes) {
      const followed = Math.min(shapes, followCap)
      let createSeconds: number | undefined
      if (shapes > followed && shapes > created) {
        const from = Math.max(followed, created)
        log(`${shapes} shapes: creating ${shapes - from} shapes nobody follows on Sluice (${SETTINGS.createConcurrency} at a time)`)
        createSeconds = await createShapes(sluice.url, from, shapes)
        created = shapes
        log(`  created in ${createSeconds.toFixed(0)} s`)
      }
      const runs = { sluice: [] as LiveRun[], ceiling: [] as LiveRun[] }
      const fsync: FsyncSample[] = []
      for (let rep = 0; rep < SETTINGS.reps; rep++) {
        const f = await probeFsync(probe, dataDir)
        fsync.push(f)
        log(`  ${shapes} shapes, rep ${rep + 1}: fdatasync p50 ${f.p50Ms.toFixed(2)} ms, p99 ${f.p99Ms.toFixed(2)} ms`)
        const order = rep % 2 === 0 ? (['sluice', 'ceiling'] as const) : (['ceiling', 'sluice'] as const)
        for (const who of order) {
          const r = await liveRun(targets[who], followed, writer)
          runs[who].push(r)
          const commits = r.commits === undefined ? '' : `; ${r.commits.flushesPerTransaction.toFixed(2)} flushes/tx; event loop delay p99 ${r.commits.loopP99Ms.toFixed(1)} ms, max ${r.commits.loopMaxMs.toFixed(0)} ms`
          log(
            `  ${shapes} shapes (${followed} followed), rep ${rep + 1}, ${who}: p50 ${r.p50Ms.toFixed(2)} ms, p95 ${r.p95Ms.toFixed(2)} ms, p99 ${r.p99Ms.toFixed(2)} ms, max ${r.maxMs.toFixed(1)} ms; ${r.received}/${r.writes} received; handshake ${(r.handshakeMs / 1000).toFixed(1)} s; server CPU ${r.serverCpuPercent?.toFixed(0) ?? '-'}%${commits} (load ${r.loadavg1.toFixed(1)})`,
          )
        }
      }
      const ceilingMedian = liveMedian(runs.ceiling)
      const fsyncMs = median(fsync.map((f) => f.p50Ms))
      rows.push({
        shapes,
        followed,
        ...(createSeconds === undefined ? {} : { createSeconds }),
        sluice: { runs: runs.sluice, median: liveMedian(runs.sluice) },
        ceiling: { runs: runs.ceiling, median: ceilingMedian },
        fsync,
        fsyncMs,
        floorMs: ceilingMedian.p50Ms + fsyncMs,
      })
      loads.push(loadNote(`after ${shapes} shapes`))
    }

    log(`group commit under load: ${SETTINGS.burstConnections} connections committing back to back for ${SETTINGS.burstSeconds} s`)
    const burster = await CommandChild.spawn('burst-writer', script('writer.ts'))
    try {
      await burster.call('connect', { connectionString: cluster.url, connections: SETTINGS.burstConnections })
      const before = await readCounters(sluice.url)
      const b = await burster.call<{ writes: number; wallMs: number }>('burst', { run: nextRunId++, ms: SETTINGS.burstSeconds * 1000, keys: Math.min(maxShapes, followCap) })
      // Until Sluice has routed and flushed every commit of the burst.
      let after = await readCounters(sluice.url)
      for (let i = 0; i < 100 && after.transactions - before.transactions < b.writes; i++) {
        await sleep(100)
        after = await readCounters(sluice.url)
      }
      await sleep(200)
      after = await readCounters(sluice.url)
      burst = { connections: SETTINGS.burstConnections, seconds: b.wallMs / 1000, writes: b.writes, commits: commitsBetween(before, after) }
    } finally {
      await burster.close()
    }
    loads.push(loadNote('after the burst'))
  } finally {
    await probe?.close()
    await writer?.close()
    await ceiling?.close()
    await sluice?.stop()
    await cluster.stop()
  }
  loads.push(loadNote('end'))
  const report: Report = {
    quick: QUICK,
    partial: PARTIAL,
    machine: { ...machine, fdLimit: String(LIMIT) },
    postgres: { version: cluster.version, settings: BENCH_PG_SETTINGS },
    settings: SETTINGS,
    sluiceFlags: SLUICE_FLAGS,
    runSeconds: runSeconds(),
    loads,
    rows,
    ...(burst === undefined ? {} : { burst }),
  }
  const name = QUICK ? 'live.quick' : PARTIAL ? 'live.partial' : 'live'
  const outDir = process.env.BENCH_RESULTS_DIR ?? resultsDir
  mkdirSync(outDir, { recursive: true })
  writeReport(report, join(outDir, name))
  for (const line of targetLines(report)) log(line)
  const b = burstLine(report)
  if (b !== undefined) log(b)
  log(`wrote results/${name}.md and .json (${report.runSeconds.toFixed(0)} s)`)
  rmSync(root, { recursive: true, force: true })
}

await main()
// Pools and child pipes must not hold the process open.
process.exit(0)
