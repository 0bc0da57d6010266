/**
 * bench:http: the Sluice server's initial sync as HTTP clients see it, next to
 * a bare fastify server doing the least possible for the same requests (the
 * ceiling), each in its own process, with the load generator (wrk) in its own:
 * requests/s and latency p50/p95/p99 of `offset=-1` on a 500-row shape by 1,
 * 100 and 2,000 concurrent keep-alive clients. Write-to-client latency is
 * `bench:live` (`../live/`).
 * Does not measure: an HTTP cache in front, TLS, compression, other machines.
 *
 * Usage: `pnpm --filter @sluice/bench run bench:http` (from the root:
 * `npm run bench:http`). QUICK=1: a smoke run (results/http.quick.*).
 * BENCH_REPS, BENCH_DIR, BENCH_QUIET_WAIT_MS as in the other benchmarks;
 * BENCH_HTTP_CLIENTS (comma-separated counts) and BENCH_RESULTS_DIR (where the
 * report goes) for smaller runs (results/http.partial.*).
 */
import { spawnSync } from 'node:child_process'
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs'
import http from 'node:http'
import { loadavg, tmpdir } from 'node:os'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { startPostgres } from '@sluice/test-utils'
import { BENCH_PG_SETTINGS } from '../pipeline/pg.js'
import { processCpuMs } from '../pipeline/proc.js'
import type { LoadNote } from '../pipeline/report.js'
import { SystemMeter, waitForQuiet } from '../storage/measure.js'
import { machineInfo } from '../storage/report.js'
import { CommandChild } from './json-lines.js'
import {
  type InitialRow,
  type InitialRun,
  type Report,
  closingNote,
  initialMedian,
  writeReport,
} from './report.js'
import { INITIAL_QUERY, INITIAL_ROWS, schemaSql } from './schema.js'
import { type SluiceProcess, startSluice } from './sluice-process.js'
import { ensureWrk, runWrk } from './wrk.js'
import { loadNote, log, runSeconds } from '../pipeline/run-log.js'

const QUICK = process.env.QUICK === '1'
/** BENCH_HTTP_CLIENTS=1,20 replaces the client counts (partial results; the smoke test uses it). */
const CLIENTS = process.env.BENCH_HTTP_CLIENTS?.split(',').map(Number)
const PARTIAL = process.env.BENCH_REPS !== undefined || CLIENTS !== undefined
const QUIET_WAIT_MS = Number(process.env.BENCH_QUIET_WAIT_MS ?? (QUICK ? 0 : 10_000))

const SETTINGS = {
  reps: Number(process.env.BENCH_REPS ?? (QUICK ? 1 : 3)),
  initialClients: CLIENTS ?? [1, 100, 2_000],
  initialSeconds: QUICK ? 2 : 10,
  initialWarmupSeconds: QUICK ? 1 : 3,
  /** One wrk thread: the server under test is one Node process; the other core is left to it and to Postgres. */
  wrkThreads: 1,
  wrkTimeoutSeconds: 30,
  quietWaitSeconds: QUIET_WAIT_MS / 1000,
}

/** Sluice's admission limits (300 initial, 10k others by default) raised, so every request is served, not refused. */
const SLUICE_FLAGS = ['--log-level', 'warn', '--max-concurrent-initial', '1000000', '--max-concurrent-existing', '1000000']
/** Headers that belong to one connection or one response, not to the content the ceiling repeats. */
const PER_RESPONSE_HEADERS = new Set(['date', 'connection', 'keep-alive', 'content-length', 'transfer-encoding'])

const here = dirname(fileURLToPath(import.meta.url))
const resultsDir = join(here, '..', 'results')
function fdLimit(): string {
  return spawnSync('sh', ['-c', 'ulimit -n'], { encoding: 'utf8' }).stdout.trim()
}

interface Fetched {
  readonly status: number
  readonly headers: http.IncomingHttpHeaders
  readonly body: Buffer
}

function fetchOnce(url: string): Promise<Fetched> {
  return new Promise((resolve, reject) => {
    http
      .get(url, (res) => {
        const chunks: Buffer[] = []
        res.on('data', (c: Buffer) => chunks.push(c))
        res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks) }))
        res.on('error', reject)
      })
      .on('error', reject)
  })
}

function contentHeaders(headers: http.IncomingHttpHeaders): Record<string, string> {
  const out: Record<string, string> = {}
  for (const [name, value] of Object.entries(headers)) {
    if (value === undefined || PER_RESPONSE_HEADERS.has(name)) continue
    out[name] = Array.isArray(value) ? value.join(', ') : value
  }
  return out
}

/** CPU ms a process spends while `f` runs. */
async function withCpu<T>(pid: number, f: () => Promise<T>): Promise<{ value: T; cpuMs: number | null; wallMs: number }> {
  const c0 = processCpuMs(pid)
  const t0 = performance.now()
  const value = await f()
  const c1 = processCpuMs(pid)
  return { value, cpuMs: c0 === undefined || c1 === undefined ? null : c1 - c0, wallMs: performance.now() - t0 }
}

interface Servers {
  readonly sluice: SluiceProcess
  readonly ceiling: CommandChild
  readonly ceilingUrl: string
}

// ---- initial sync ----

async function initialRun(url: string, pid: number, clients: number, seconds: number): Promise<InitialRun> {
  await waitForQuiet(QUIET_WAIT_MS)
  const meter = new SystemMeter()
  const { value: w, cpuMs, wallMs } = await withCpu(pid, () =>
    runWrk({ url, connections: clients, threads: SETTINGS.wrkThreads, seconds, timeoutSeconds: SETTINGS.wrkTimeoutSeconds }),
  )
  const secs = w.durationUs / 1e6
  return {
    requests: w.requests,
    seconds: secs,
    requestsPerSec: w.requests / secs,
    p50Ms: w.p50Us / 1000,
    p95Ms: w.p95Us / 1000,
    p99Ms: w.p99Us / 1000,
    maxMs: w.maxUs / 1000,
    errors: w.connectErrors + w.readErrors + w.writeErrors + w.statusErrors + w.timeouts,
    bytesPerResponse: w.requests === 0 ? 0 : w.bytes / w.requests,
    serverCpuPercent: cpuMs === null ? null : (cpuMs / wallMs) * 100,
    cpuPressurePercent: meter.cpuPressurePercent() ?? null,
    loadavg1: loadavg()[0]!,
    wrk: { ...w },
  }
}

async function initialSync(servers: Servers): Promise<InitialRow[]> {
  const targets = {
    sluice: { url: `${servers.sluice.url}/v1/shape?${INITIAL_QUERY}`, pid: servers.sluice.pid },
    ceiling: { url: `${servers.ceilingUrl}/v1/shape?${INITIAL_QUERY}`, pid: servers.ceiling.pid },
  }
  for (const who of ['sluice', 'ceiling'] as const) {
    log(`initial sync: warm-up of ${who} (${SETTINGS.initialWarmupSeconds} s, 100 clients)`)
    await runWrk({ url: targets[who].url, connections: 100, threads: SETTINGS.wrkThreads, seconds: SETTINGS.initialWarmupSeconds, timeoutSeconds: SETTINGS.wrkTimeoutSeconds })
  }
  const rows: InitialRow[] = []
  for (const clients of SETTINGS.initialClients) {
    const runs = { sluice: [] as InitialRun[], ceiling: [] as InitialRun[] }
    for (let rep = 0; rep < SETTINGS.reps; rep++) {
      const order = rep % 2 === 0 ? (['sluice', 'ceiling'] as const) : (['ceiling', 'sluice'] as const)
      for (const who of order) {
        const r = await initialRun(targets[who].url, targets[who].pid, clients, SETTINGS.initialSeconds)
        runs[who].push(r)
        log(
          `  ${clients} clients, rep ${rep + 1}, ${who}: ${r.requestsPerSec.toFixed(0)} req/s, p50 ${r.p50Ms.toFixed(2)} ms, p95 ${r.p95Ms.toFixed(2)} ms, p99 ${r.p99Ms.toFixed(2)} ms, ${r.errors} errors, ${r.bytesPerResponse.toFixed(0)} B/response, server CPU ${r.serverCpuPercent?.toFixed(0) ?? '-'}% (load ${r.loadavg1.toFixed(1)})`,
        )
      }
    }
    rows.push({
      clients,
      sluice: { runs: runs.sluice, median: initialMedian(runs.sluice) },
      ceiling: { runs: runs.ceiling, median: initialMedian(runs.ceiling) },
    })
  }
  return rows
}

// ---- main ----

async function main(): Promise<void> {
  const wrkVersion = ensureWrk()
  const limit = fdLimit()
  const base = process.env.BENCH_DIR ?? tmpdir()
  mkdirSync(base, { recursive: true })
  const root = mkdtempSync(join(base, 'sluice-http-bench-'))
  // Taken now: its date is when the run started.
  const machine = machineInfo(root)
  const loads: LoadNote[] = [loadNote('start')]
  log(`HTTP benchmark${QUICK ? ' (QUICK)' : ''}; data in ${root}; wrk ${wrkVersion}; ulimit -n ${limit}; load average ${loads[0]!.loadavg.join(', ')}`)
  const cluster = await startPostgres({ settings: BENCH_PG_SETTINGS })
  let sluice: SluiceProcess | undefined
  let ceiling: CommandChild | undefined
  let initial: InitialRow[] = []
  let initialResponse: Report['initialResponse']
  try {
    for (const sql of schemaSql()) await cluster.query(sql)
    log(`Postgres ${cluster.version} on port ${cluster.port}`)
    sluice = await startSluice({ databaseUrl: cluster.url, storageDir: join(root, 'sluice'), flags: SLUICE_FLAGS })
    log(`Sluice at ${sluice.url} (pid ${sluice.pid})`)

    const first = await fetchOnce(`${sluice.url}/v1/shape?${INITIAL_QUERY}`)
    if (first.status !== 200) throw new Error(`initial request answered ${first.status}: ${first.body.toString('utf8')}`)
    const messages = JSON.parse(first.body.toString('utf8')) as Array<{ key?: string }>
    const rows = messages.filter((m) => m.key !== undefined).length
    if (rows !== INITIAL_ROWS) throw new Error(`initial response holds ${rows} rows, expected ${INITIAL_ROWS}`)
    const headers = contentHeaders(first.headers)
    initialResponse = { bodyBytes: first.body.length, rows, headers }

    ceiling = await CommandChild.spawn('ceiling', fileURLToPath(new URL('./ceiling-server.ts', import.meta.url)))
    const { port } = await ceiling.call<{ port: number }>('listen', {
      initialHeaders: headers,
      initialBodyBase64: first.body.toString('base64'),
    })
    const ceilingUrl = `http://127.0.0.1:${port}`
    // The ceiling must answer what Sluice answers, or the comparison means nothing.
    const again = await fetchOnce(`${sluice.url}/v1/shape?${INITIAL_QUERY}`)
    const copy = await fetchOnce(`${ceilingUrl}/v1/shape?${INITIAL_QUERY}`)
    if (!again.body.equals(first.body) || !copy.body.equals(first.body)) throw new Error('the initial responses of Sluice and the ceiling differ')
    const ch = contentHeaders(copy.headers)
    for (const [name, value] of Object.entries(headers)) {
      if (ch[name] !== value) throw new Error(`the ceiling's ${name} header differs: ${ch[name]} vs ${value}`)
    }
    log(`initial response: ${first.body.length} bytes, ${rows} rows, ${Object.keys(headers).length} headers; ceiling at ${ceilingUrl} answers the same`)
    const servers: Servers = { sluice, ceiling, ceilingUrl }

    initial = await initialSync(servers)
    loads.push(loadNote('after initial sync'))
  } finally {
    await ceiling?.close()
    await sluice?.stop()
    await cluster.stop()
  }
  loads.push(loadNote('end'))
  const report: Report = {
    quick: QUICK,
    partial: PARTIAL,
    machine: { ...machine, fdLimit: limit },
    postgres: { version: cluster.version, settings: BENCH_PG_SETTINGS },
    wrkVersion,
    settings: SETTINGS,
    sluiceFlags: SLUICE_FLAGS,
    initialResponse,
    runSeconds: runSeconds(),
    loads,
    initial,
  }
  const name = QUICK ? 'http.quick' : PARTIAL ? 'http.partial' : 'http'
  const outDir = process.env.BENCH_RESULTS_DIR ?? resultsDir
  mkdirSync(outDir, { recursive: true })
  writeReport(report, join(outDir, name))
  for (const line of closingNote(report)) log(line)
  log(`wrote results/${name}.md and .json (${report.runSeconds.toFixed(0)} s)`)
  rmSync(root, { recursive: true, force: true })
}

await main()
// Pools and child pipes must not hold the process open.
process.exit(0)
