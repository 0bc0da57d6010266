/**
 * bench:client: our client (`Shape` of @sluice/client) against the official
 * one (`Shape` of @electric-sql/client 1.5.28), in the same run against the
 * same Sluice server, each measurement in a fresh Node process of its own.
 *
 * Measures: time and peak memory to sync and materialise a
 * 100k-row and a 1M-row shape (already on the server and warm); lag, client CPU
 * and peak memory while a 100k-row Shape takes 10k row updates/s.
 * Does not measure: the server's snapshot of a new shape, browsers, SSE, an
 * HTTP cache in front, other machines (client, server and Postgres share 2 cores).
 *
 * Usage: `pnpm --filter @sluice/bench run bench:client` (from the root:
 * `npm run bench:client`). QUICK=1: a smoke run with small counts
 * (results/client.quick.*). ONLY=sync or ONLY=live: one half; BENCH_REPS,
 * BENCH_CLIENT_ROWS (comma-separated sync sizes), BENCH_LIVE_ROWS,
 * BENCH_LIVE_RATE (rows/s), BENCH_LIVE_SECONDS: smaller runs
 * (results/client.partial.*). BENCH_RESULTS_DIR, BENCH_DIR and
 * BENCH_QUIET_WAIT_MS as in the other benchmarks; BENCH_CPU_PROF=<dir> makes
 * every client process write a V8 CPU profile there (for attribution, not figures).
 */
import { createHash } from 'node:crypto'
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs'
import { loadavg, tmpdir } from 'node:os'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { type PostgresCluster, startPostgres } from '@sluice/test-utils'
import { CommandChild } from '../http/json-lines.js'
import { type SluiceProcess, startSluice } from '../http/sluice-process.js'
import { BENCH_PG_SETTINGS } from '../pipeline/pg.js'
import type { LoadNote } from '../pipeline/report.js'
import { SystemMeter, waitForQuiet } from '../storage/measure.js'
import { machineInfo } from '../storage/report.js'
import {
  CLIENTS,
  type ClientName,
  type LiveRow,
  type LiveRun,
  type Report,
  type SyncRow,
  type SyncRun,
  type WriterResult,
  liveMedian,
  syncMedian,
  verdictLines,
  writeReport,
} from './report.js'
import { LIVE_TABLE, syncTable, tableSql } from './schema.js'
import { loadNote, log, runSeconds } from '../pipeline/run-log.js'

const QUICK = process.env.QUICK === '1'
const ONLY = new Set((process.env.ONLY ?? 'sync,live').split(',').map((s) => s.trim()))
const ROWS = process.env.BENCH_CLIENT_ROWS?.split(',').map(Number)
const PARTIAL =
  process.env.ONLY !== undefined ||
  process.env.BENCH_REPS !== undefined ||
  ROWS !== undefined ||
  process.env.BENCH_LIVE_ROWS !== undefined ||
  process.env.BENCH_LIVE_RATE !== undefined ||
  process.env.BENCH_LIVE_SECONDS !== undefined
const QUIET_WAIT_MS = Number(process.env.BENCH_QUIET_WAIT_MS ?? (QUICK ? 0 : 10_000))
const CPU_PROF = process.env.BENCH_CPU_PROF

const SETTINGS = {
  reps: Number(process.env.BENCH_REPS ?? (QUICK ? 1 : 3)),
  syncRows: ROWS ?? (QUICK ? [2_000, 10_000] : [100_000, 1_000_000]),
  liveRows: Number(process.env.BENCH_LIVE_ROWS ?? (QUICK ? 5_000 : 100_000)),
  /** Row updates per second: 100 transactions/s of 100 rows (QUICK: 40 of 50). */
  liveRate: Number(process.env.BENCH_LIVE_RATE ?? (QUICK ? 2_000 : 10_000)),
  liveRowsPerTx: QUICK ? 50 : 100,
  liveSeconds: Number(process.env.BENCH_LIVE_SECONDS ?? (QUICK ? 3 : 15)),
  /** Enough that a transaction rarely waits for a connection; commits may land out of order, which the client's check allows for. */
  writerConnections: 4,
  /** Longest wait, after the last write, for the last transaction to show in the Shape. */
  drainSeconds: 30,
  quietWaitSeconds: QUIET_WAIT_MS / 1000,
}

/** Admission limits raised so no request is refused; chunk size and long-poll as the CLI defaults. */
const SLUICE_FLAGS = ['--log-level', 'warn', '--max-concurrent-initial', '100000', '--max-concurrent-existing', '100000']

/** Longest wait before a live run for Sluice to work off the previous run's backlog. */
const CATCH_UP_MAX_MS = 180_000

const here = dirname(fileURLToPath(import.meta.url))
const resultsDir = join(here, '..', 'results')
const workerScript = fileURLToPath(new URL('./client-worker.ts', import.meta.url))
const writerScript = fileURLToPath(new URL('./writer.ts', import.meta.url))
function mib(bytes: number | null | undefined): string {
  return bytes === null || bytes === undefined ? '-' : (bytes / 2 ** 20).toFixed(0)
}

let workerCount = 0

async function spawnWorker(client: ClientName): Promise<CommandChild> {
  const label = `${client}-${++workerCount}`
  const nodeArgs = ['--expose-gc', ...(CPU_PROF === undefined ? [] : ['--cpu-prof', `--cpu-prof-dir=${CPU_PROF}`, `--cpu-prof-name=${label}.cpuprofile`])]
  const worker = await CommandChild.spawn(label, workerScript, nodeArgs)
  await worker.call('load', { client })
  return worker
}

/**
 * Follows a shape with plain fetch until up to date (the priming sync, which
 * also makes the server create it): rows, body bytes and requests.
 */
async function prime(base: string, table: string): Promise<{ rows: number; bodyBytes: number; requests: number }> {
  let url = `${base}/v1/shape?table=${table}&offset=-1`
  let rows = 0
  let bodyBytes = 0
  let requests = 0
  for (;;) {
    const res = await fetch(url)
    const text = await res.text()
    if (res.status !== 200) throw new Error(`priming ${table}: ${res.status} ${text.slice(0, 300)}`)
    requests++
    bodyBytes += Buffer.byteLength(text)
    for (const m of JSON.parse(text) as Array<{ key?: string }>) if (m.key !== undefined) rows++
    if (res.headers.get('electric-up-to-date') !== null) break
    url = `${base}/v1/shape?table=${table}&handle=${encodeURIComponent(res.headers.get('electric-handle')!)}&offset=${encodeURIComponent(res.headers.get('electric-offset')!)}`
  }
  return { rows, bodyBytes, requests }
}

// ---- sync and materialise ----

async function syncRun(shapeUrl: string, table: string, rows: number, client: ClientName, rep: number, position: number): Promise<SyncRun> {
  const worker = await spawnWorker(client)
  try {
    await waitForQuiet(QUIET_WAIT_MS)
    const meter = new SystemMeter()
    const r = await worker.call<Omit<SyncRun, 'rep' | 'position' | 'rowsSha256' | 'cpuPressurePercent' | 'loadavg1'>>('sync', { url: shapeUrl, table, rows })
    const cpuPressurePercent = meter.cpuPressurePercent() ?? null
    const loadavg1 = loadavg()[0]!
    const d = await worker.call<{ rowsSha256: string }>('digest')
    await worker.call('stop')
    return { ...r, rep, position, rowsSha256: d.rowsSha256, cpuPressurePercent, loadavg1 }
  } finally {
    await worker.close()
  }
}

async function syncPart(base: string, primed: Map<number, { bodyBytes: number; requests: number }>): Promise<SyncRow[]> {
  const out: SyncRow[] = []
  for (const rows of SETTINGS.syncRows) {
    const table = syncTable(rows)
    const runs: Record<ClientName, SyncRun[]> = { ours: [], official: [] }
    for (let rep = 0; rep < SETTINGS.reps; rep++) {
      const order: ClientName[] = rep % 2 === 0 ? ['ours', 'official'] : ['official', 'ours']
      for (const [position, client] of order.entries()) {
        const r = await syncRun(`${base}/v1/shape`, table, rows, client, rep, position)
        runs[client].push(r)
        log(
          `  sync ${rows} rows, rep ${rep + 1}, ${client}: ${r.ms.toFixed(0)} ms, CPU ${(r.userMs + r.systemMs).toFixed(0)} ms, peak RSS ${mib(r.peakRss)} MiB (before ${mib(r.before.rss)}), ` +
            `peak heap ${mib(r.peakHeapUsed)} MiB, retained heap ${mib(r.retained.heapUsed)} MiB (PSI ${r.cpuPressurePercent?.toFixed(0) ?? '-'}%, load ${r.loadavg1.toFixed(1)})`,
        )
      }
    }
    const digests = new Set([...runs.ours, ...runs.official].map((r) => r.rowsSha256))
    out.push({
      rows,
      table,
      bodyBytes: primed.get(rows)!.bodyBytes,
      requests: primed.get(rows)!.requests,
      runs,
      median: { ours: syncMedian(runs.ours), official: syncMedian(runs.official) },
      rowsEqual: digests.size === 1,
    })
  }
  return out
}

// ---- live updates ----

async function postgresSeqDigest(cluster: PostgresCluster): Promise<string> {
  const { rows } = await cluster.query<{ id: string; seq: string; stamp_ns: string }>(`SELECT id, seq, stamp_ns FROM ${LIVE_TABLE} ORDER BY id`)
  const h = createHash('sha256')
  for (const r of rows) h.update(`${r.id}:${r.seq}:${r.stamp_ns}\n`)
  return h.digest('hex')
}

let nextSeq = 1
let liveRunNo = 0

/** Sluice's replication slot (the CLI default). */
const SLOT = 'sluice_slot'
/** WAL not yet confirmed by Sluice below which it counts as caught up (keepalives and catalog reads leave a little). */
const CAUGHT_UP_BYTES = 1 << 20

/** Bytes of WAL Sluice has not yet made durable and confirmed: its backlog. */
async function slotLagBytes(cluster: PostgresCluster): Promise<number> {
  const { rows } = await cluster.query<{ lag: string | null }>(
    'SELECT (pg_current_wal_lsn() - confirmed_flush_lsn)::text AS lag FROM pg_replication_slots WHERE slot_name = $1',
    [SLOT],
  )
  return Number(rows[0]?.lag ?? Number.NaN)
}

/** Waits (at most `maxMs`) for Sluice to work off its backlog, so a run does not inherit the previous run's. */
async function waitForCatchUp(cluster: PostgresCluster, maxMs: number): Promise<{ waitedMs: number; lagBytes: number }> {
  const t0 = performance.now()
  for (;;) {
    const lag = await slotLagBytes(cluster)
    if (!(lag > CAUGHT_UP_BYTES) || performance.now() - t0 > maxMs) return { waitedMs: performance.now() - t0, lagBytes: lag }
    await new Promise((r) => setTimeout(r, 200))
  }
}

async function liveRun(
  shapeUrl: string,
  writer: CommandChild,
  cluster: PostgresCluster,
  client: ClientName,
  rep: number,
  position: number,
): Promise<LiveRun> {
  const blocks = SETTINGS.liveRows / SETTINGS.liveRowsPerTx
  const where = `id > -${++liveRunNo}`
  const worker = await spawnWorker(client)
  try {
    const opened = await worker.call<{ syncMs: number }>('liveOpen', { url: shapeUrl, table: LIVE_TABLE, where, rows: SETTINGS.liveRows, blocks, rowsPerTx: SETTINGS.liveRowsPerTx })
    const caughtUp = await waitForCatchUp(cluster, CATCH_UP_MAX_MS)
    await waitForQuiet(QUIET_WAIT_MS)
    const fromSeq = nextSeq
    const measured = await worker.call<{ before: LiveRun['before'] }>('liveMeasure', { fromSeq })
    const meter = new SystemMeter()
    const w = await writer.call<WriterResult>('run', {
      fromSeq,
      seconds: SETTINGS.liveSeconds,
      rate: SETTINGS.liveRate,
      rowsPerTx: SETTINGS.liveRowsPerTx,
      blocks,
    })
    nextSeq = w.endSeq
    // Sluice's backlog when the writer stops: lag the server, not the client, is responsible for.
    const serverBacklogBytes = await slotLagBytes(cluster)
    const r = await worker.call<Omit<LiveRun, 'rep' | 'position' | 'where' | 'syncMs' | 'writer' | 'serverBacklogBytes' | 'catchUpWaitMs' | 'before' | 'equalsPostgres' | 'rowsSha256' | 'cpuPressurePercent' | 'loadavg1'>>(
      'liveFinish',
      { endSeq: w.endSeq, timeoutMs: SETTINGS.drainSeconds * 1000 },
    )
    const cpuPressurePercent = meter.cpuPressurePercent() ?? null
    const loadavg1 = loadavg()[0]!
    const d = await worker.call<{ rowsSha256: string; seqSha256: string; rows: number }>('digest')
    const pgDigest = await postgresSeqDigest(cluster)
    await worker.call('stop')
    return {
      ...r,
      rep,
      position,
      where,
      syncMs: opened.syncMs,
      writer: w,
      serverBacklogBytes,
      catchUpWaitMs: caughtUp.waitedMs,
      before: measured.before,
      equalsPostgres: d.seqSha256 === pgDigest && d.rows === SETTINGS.liveRows,
      rowsSha256: d.rowsSha256,
      cpuPressurePercent,
      loadavg1,
    }
  } finally {
    await worker.close()
  }
}

async function livePart(base: string, cluster: PostgresCluster): Promise<LiveRow[]> {
  const writer = await CommandChild.spawn('writer', writerScript)
  await writer.call('connect', { connectionString: cluster.url, connections: SETTINGS.writerConnections })
  const runs: Record<ClientName, LiveRun[]> = { ours: [], official: [] }
  try {
    for (let rep = 0; rep < SETTINGS.reps; rep++) {
      const order: ClientName[] = rep % 2 === 0 ? ['ours', 'official'] : ['official', 'ours']
      for (const [position, client] of order.entries()) {
        const r = await liveRun(`${base}/v1/shape`, writer, cluster, client, rep, position)
        runs[client].push(r)
        log(
          `  live, rep ${rep + 1}, ${client}: writer ${r.writer.achievedRowsPerSec.toFixed(0)} rows/s (tx max ${r.writer.maxTxMs.toFixed(0)} ms, late max ${r.writer.maxLateMs.toFixed(0)} ms); ` +
            `server backlog at the writer's end ${(r.serverBacklogBytes / 1e6).toFixed(1)} MB; lag p50 ${r.lagP50Ms.toFixed(1)} ms, p99 ${r.lagP99Ms.toFixed(1)} ms, max ${r.lagMaxMs.toFixed(1)} ms; ${r.seen}/${r.transactions} tx seen, ${r.missing} missing; ` +
            `CPU ${(((r.userMs + r.systemMs) / r.wallMs) * 100).toFixed(0)}%, peak RSS ${mib(r.peakRss)} MiB; equals Postgres: ${r.equalsPostgres} (PSI ${r.cpuPressurePercent?.toFixed(0) ?? '-'}%, load ${r.loadavg1.toFixed(1)})`,
        )
      }
    }
  } finally {
    await writer.call('end').catch(() => {})
    await writer.close()
  }
  return [{ rows: SETTINGS.liveRows, runs, median: { ours: liveMedian(runs.ours), official: liveMedian(runs.official) } }]
}

// ---- main ----

async function main(): Promise<void> {
  if (SETTINGS.liveRows % SETTINGS.liveRowsPerTx !== 0) throw new Error('BENCH_LIVE_ROWS must be a multiple of the rows per transaction')
  const baseDir = process.env.BENCH_DIR ?? tmpdir()
  mkdirSync(baseDir, { recursive: true })
  const root = mkdtempSync(join(baseDir, 'sluice-client-bench-'))
  // Taken now: its date is when the run started.
  const machine = machineInfo(root)
  const loads: LoadNote[] = [loadNote('start')]
  log(`client benchmark${QUICK ? ' (QUICK)' : ''}; data in ${root}; load average ${loads[0]!.loadavg.join(', ')}`)
  const cluster = await startPostgres({ settings: BENCH_PG_SETTINGS })
  let sluice: SluiceProcess | undefined
  let sync: SyncRow[] = []
  let live: LiveRow[] = []
  try {
    log(`Postgres ${cluster.version} on port ${cluster.port}`)
    const tables: Array<[string, number]> = []
    if (ONLY.has('sync')) for (const rows of SETTINGS.syncRows) tables.push([syncTable(rows), rows])
    if (ONLY.has('live')) tables.push([LIVE_TABLE, SETTINGS.liveRows])
    for (const [name, rows] of tables) {
      const t0 = performance.now()
      for (const sql of tableSql(name, rows)) await cluster.query(sql)
      log(`table ${name}: ${rows} rows in ${((performance.now() - t0) / 1000).toFixed(1)} s`)
    }
    sluice = await startSluice({ databaseUrl: cluster.url, storageDir: join(root, 'sluice'), flags: SLUICE_FLAGS })
    log(`Sluice at ${sluice.url} (pid ${sluice.pid})`)
    if (ONLY.has('sync')) {
      const primed = new Map<number, { bodyBytes: number; requests: number }>()
      for (const rows of SETTINGS.syncRows) {
        const t0 = performance.now()
        const p = await prime(sluice.url, syncTable(rows))
        if (p.rows !== rows) throw new Error(`priming ${syncTable(rows)} gave ${p.rows} rows, expected ${rows}`)
        primed.set(rows, p)
        log(`primed ${syncTable(rows)}: ${p.requests} requests, ${(p.bodyBytes / 1e6).toFixed(1)} MB (${(p.bodyBytes / rows).toFixed(0)} B/row) in ${((performance.now() - t0) / 1000).toFixed(1)} s`)
      }
      sync = await syncPart(sluice.url, primed)
      loads.push(loadNote('after sync'))
    }
    if (ONLY.has('live')) {
      live = await livePart(sluice.url, cluster)
      loads.push(loadNote('after live'))
    }
  } finally {
    await sluice?.stop()
    await cluster.stop()
  }
  loads.push(loadNote('end'))
  const report: Report = {
    quick: QUICK,
    partial: PARTIAL,
    machine,
    postgres: { version: cluster.version, settings: BENCH_PG_SETTINGS },
    settings: { ...SETTINGS, clients: CLIENTS },
    sluiceFlags: SLUICE_FLAGS,
    runSeconds: runSeconds(),
    loads,
    sync,
    live,
  }
  const name = QUICK ? 'client.quick' : PARTIAL ? 'client.partial' : 'client'
  const outDir = process.env.BENCH_RESULTS_DIR ?? resultsDir
  mkdirSync(outDir, { recursive: true })
  writeReport(report, join(outDir, name))
  for (const line of verdictLines(report)) log(line)
  log(`wrote ${join(outDir, name)}.md and .json (${report.runSeconds.toFixed(0)} s)`)
  rmSync(root, { recursive: true, force: true })
}

await main()
// Pools and child pipes must not hold the process open.
process.exit(0)
