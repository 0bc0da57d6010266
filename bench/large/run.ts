/**
 * bench:large: one large shape, one client (issue 31, item 12). Our client
 * (`Shape` of @sluice/client), the official one (@electric-sql/client 1.5.28)
 * and a raw HTTP download of the same log, each run in a fresh Node process,
 * against the same Sluice server in the same run.
 *
 * Measures: time, client CPU and client memory (peak RSS, peak and retained
 * heap) to download 100k and 1M rows, from a warm shape (created and
 * downloaded once before the clock) and from a cold one (the first request
 * creates it, so the server's snapshot is in the time).
 * Does not measure: many clients at once, live updates (bench:client), an
 * HTTP cache in front, browsers, other machines (client, Sluice and Postgres
 * share the same cores).
 *
 * Usage: `pnpm --filter @sluice/bench run bench:large` (from the root:
 * `npm run bench:large`). QUICK=1: a smoke run with small counts
 * (results/large.quick.*). BENCH_LARGE_ROWS (comma-separated sizes),
 * BENCH_REPS (warm repetitions), BENCH_COLD_REPS (0: no cold runs),
 * ONLY=warm or ONLY=cold: smaller runs (results/large.partial.*).
 * BENCH_RESULTS_DIR, BENCH_DIR and BENCH_QUIET_WAIT_MS as in the other
 * benchmarks; BENCH_CPU_PROF=<dir> makes each client process write V8 CPU
 * profiles there (for attribution, not figures).
 */
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs'
import { loadavg, tmpdir } from 'node:os'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { startPostgres } from '@sluice/test-utils'
import { tableSql } from '../client/schema.js'
import { CommandChild } from '../http/json-lines.js'
import { type SluiceProcess, startSluice } from '../http/sluice-process.js'
import { BENCH_PG_SETTINGS } from '../pipeline/pg.js'
import type { LoadNote } from '../pipeline/report.js'
import { SystemMeter, waitForQuiet } from '../storage/measure.js'
import { machineInfo } from '../storage/report.js'
import { LARGE_CLIENTS, type LargeClient, type LargeRow, type LargeRun, type Report, type Temperature, largeMedian, verdictLines, writeReport } from './report.js'
import { loadNote, log, runSeconds } from '../pipeline/run-log.js'

const QUICK = process.env.QUICK === '1'
const ROWS = process.env.BENCH_LARGE_ROWS?.split(',').map(Number)
const ONLY = new Set((process.env.ONLY ?? 'warm,cold').split(',').map((s) => s.trim()))
const PARTIAL = process.env.ONLY !== undefined || process.env.BENCH_REPS !== undefined || process.env.BENCH_COLD_REPS !== undefined || ROWS !== undefined
const QUIET_WAIT_MS = Number(process.env.BENCH_QUIET_WAIT_MS ?? (QUICK ? 0 : 10_000))
const CPU_PROF = process.env.BENCH_CPU_PROF

const SETTINGS = {
  rows: ROWS ?? (QUICK ? [2_000, 10_000] : [100_000, 1_000_000]),
  /** Warm runs per client and size; the order of the clients rotates from one repetition to the next. */
  reps: ONLY.has('warm') ? Number(process.env.BENCH_REPS ?? (QUICK ? 1 : 3)) : 0,
  /** Cold runs per client and size: each one snapshots a new shape, so they are few. */
  coldReps: ONLY.has('cold') ? Number(process.env.BENCH_COLD_REPS ?? 1) : 0,
  quietWaitSeconds: QUIET_WAIT_MS / 1000,
}

/** Admission limits raised so no request is refused; chunk size as the CLI default. */
const SLUICE_FLAGS = ['--log-level', 'warn', '--max-concurrent-initial', '100000', '--max-concurrent-existing', '100000']

const here = dirname(fileURLToPath(import.meta.url))
const resultsDir = join(here, '..', 'results')
const workerScript = fileURLToPath(new URL('./large-worker.ts', import.meta.url))
function mib(bytes: number | null | undefined): string {
  return bytes === null || bytes === undefined ? '-' : (bytes / 2 ** 20).toFixed(0)
}

function largeTable(rows: number): string {
  return `large_rows_${rows}`
}

let workerCount = 0

async function spawnWorker(client: LargeClient): Promise<CommandChild> {
  const label = `${client}-${++workerCount}`
  // No --cpu-prof-name: the loader's worker thread writes a profile too, and a fixed name would let it overwrite the main thread's.
  const nodeArgs = ['--expose-gc', ...(CPU_PROF === undefined ? [] : ['--cpu-prof', `--cpu-prof-dir=${join(CPU_PROF, label)}`])]
  const worker = await CommandChild.spawn(label, workerScript, nodeArgs)
  await worker.call('load', { client })
  return worker
}

type RunResult = Omit<LargeRun, 'client' | 'temperature' | 'rep' | 'position' | 'where' | 'rowsSha256' | 'cpuPressurePercent' | 'loadavg1'>

async function oneRun(base: string, table: string, where: string | undefined, rows: number, client: LargeClient, temperature: Temperature, rep: number, position: number): Promise<LargeRun> {
  const worker = await spawnWorker(client)
  try {
    await waitForQuiet(QUIET_WAIT_MS)
    const meter = new SystemMeter()
    const r = await worker.call<RunResult>('sync', { base, table, rows, ...(where === undefined ? {} : { where }) })
    const cpuPressurePercent = meter.cpuPressurePercent() ?? null
    const loadavg1 = loadavg()[0]!
    const d = await worker.call<{ rowsSha256: string | null }>('digest')
    await worker.call('stop')
    const run: LargeRun = { ...r, client, temperature, rep, position, ...(where === undefined ? {} : { where }), rowsSha256: d.rowsSha256, cpuPressurePercent, loadavg1 }
    log(
      `  ${temperature} ${rows} rows, rep ${rep + 1}, ${client}: ${r.ms.toFixed(0)} ms, CPU ${(r.userMs + r.systemMs).toFixed(0)} ms, peak RSS ${mib(r.peakRss)} MiB (before ${mib(r.before.rss)}), ` +
        `peak heap ${mib(r.peakHeapUsed)} MiB, retained heap ${mib(r.retained.heapUsed)} MiB${r.bodyBytes === null ? '' : `, ${(r.bodyBytes / 1e6).toFixed(1)} MB in ${r.requests} requests`} ` +
        `(PSI ${cpuPressurePercent?.toFixed(0) ?? '-'}%, load ${loadavg1.toFixed(1)})`,
    )
    return run
  } finally {
    await worker.close()
  }
}

/** The order of the clients in repetition `rep`: each client takes each position in turn. */
function order(rep: number): LargeClient[] {
  return LARGE_CLIENTS.map((_, i) => LARGE_CLIENTS[(i + rep) % LARGE_CLIENTS.length]!)
}

function summarise(rows: number, temperature: Temperature, runs: Record<LargeClient, LargeRun[]>, download: { bodyBytes: number; requests: number }): LargeRow {
  const digests = new Set([...runs.ours, ...runs.official].map((r) => r.rowsSha256))
  return {
    rows,
    table: largeTable(rows),
    temperature,
    bodyBytes: download.bodyBytes,
    requests: download.requests,
    runs,
    median: { ours: largeMedian(runs.ours), official: largeMedian(runs.official), parse: largeMedian(runs.parse), raw: largeMedian(runs.raw) },
    rowsEqual: digests.size === 1,
  }
}

async function main(): Promise<void> {
  const baseDir = process.env.BENCH_DIR ?? tmpdir()
  mkdirSync(baseDir, { recursive: true })
  const root = mkdtempSync(join(baseDir, 'sluice-large-bench-'))
  // Taken now: its date is when the run started.
  const machine = machineInfo(root)
  const loads: LoadNote[] = [loadNote('start')]
  log(`large-shape benchmark${QUICK ? ' (QUICK)' : ''}; data in ${root}; load average ${loads[0]!.loadavg.join(', ')}`)
  const cluster = await startPostgres({ settings: BENCH_PG_SETTINGS })
  let sluice: SluiceProcess | undefined
  const results: LargeRow[] = []
  try {
    log(`Postgres ${cluster.version} on port ${cluster.port}`)
    for (const rows of SETTINGS.rows) {
      const t0 = performance.now()
      for (const sql of tableSql(largeTable(rows), rows)) await cluster.query(sql)
      log(`table ${largeTable(rows)}: ${rows} rows in ${((performance.now() - t0) / 1000).toFixed(1)} s`)
    }
    sluice = await startSluice({ databaseUrl: cluster.url, storageDir: join(root, 'sluice'), flags: SLUICE_FLAGS })
    log(`Sluice at ${sluice.url} (pid ${sluice.pid})`)
    const url = sluice.url
    if (SETTINGS.reps > 0) {
      for (const rows of SETTINGS.rows) {
        const table = largeTable(rows)
        // The priming download creates the shape and brings its log into the page cache: what a warm run reads.
        const primed = await oneRun(url, table, undefined, rows, 'raw', 'cold', 0, 0)
        log(`primed ${table}: ${(primed.bodyBytes! / 1e6).toFixed(1)} MB in ${primed.requests} requests (${(primed.bodyBytes! / rows).toFixed(0)} B/row), ${(primed.ms / 1000).toFixed(1)} s`)
        const runs: Record<LargeClient, LargeRun[]> = { ours: [], official: [], parse: [], raw: [] }
        for (let rep = 0; rep < SETTINGS.reps; rep++) {
          for (const [position, client] of order(rep).entries()) runs[client].push(await oneRun(url, table, undefined, rows, client, 'warm', rep, position))
        }
        results.push(summarise(rows, 'warm', runs, { bodyBytes: primed.bodyBytes!, requests: primed.requests! }))
      }
      loads.push(loadNote('after warm'))
    }
    if (SETTINGS.coldReps > 0) {
      let shapeNo = 0
      for (const rows of SETTINGS.rows) {
        const table = largeTable(rows)
        const runs: Record<LargeClient, LargeRun[]> = { ours: [], official: [], parse: [], raw: [] }
        for (let rep = 0; rep < SETTINGS.coldReps; rep++) {
          for (const [position, client] of order(rep).entries()) {
            // All rows, but a where clause no earlier request used: a new shape, snapshotted for this run.
            runs[client].push(await oneRun(url, table, `id > -${++shapeNo}`, rows, client, 'cold', rep, position))
          }
        }
        const raw = runs.raw[0]!
        results.push(summarise(rows, 'cold', runs, { bodyBytes: raw.bodyBytes!, requests: raw.requests! }))
      }
      loads.push(loadNote('after cold'))
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
    settings: { ...SETTINGS, clients: LARGE_CLIENTS },
    sluiceFlags: SLUICE_FLAGS,
    runSeconds: runSeconds(),
    loads,
    results,
  }
  const name = QUICK ? 'large.quick' : PARTIAL ? 'large.partial' : 'large'
  const outDir = process.env.BENCH_RESULTS_DIR ?? resultsDir
  mkdirSync(outDir, { recursive: true })
  writeReport(report, join(outDir, name))
  for (const line of verdictLines(report)) log(line)
  log(`wrote ${join(outDir, name)}.md and .json (${report.runSeconds.toFixed(0)} s)`)
  rmSync(root, { recursive: true, force: true })
}

await main()
// Child pipes must not hold the process open.
process.exit(0)
