/**
 * bench:chunks: large sealed chunks of a shape log served to many clients, by
 * Sluice's sendfile(2) path, by the pread path of the same build
 * (`--no-sendfile`), and by nginx serving the same bytes as a static file (the
 * ceiling: nginx sends files with sendfile too). Each server and the load
 * generator (wrk) run in processes of their own.
 *
 * Measures requests/s, MB/s, latency and server CPU per GB sent for chunks of
 * 1 MiB and 10 MiB and 1, 10 and 100 concurrent keep-alive clients.
 * Does not measure: a cold page cache (every server reads the file from
 * memory), TLS, compression, other machines, small responses (see bench:http).
 *
 * Usage: `npm run bench:chunks` (or `pnpm --filter @sluice/bench run bench:chunks`).
 * QUICK=1: a smoke run of about a minute (results/chunks.quick.*).
 * BENCH_CHUNKS_SIZES (bytes, comma-separated), BENCH_CHUNKS_CLIENTS, BENCH_REPS,
 * BENCH_CHUNKS_SECONDS: smaller runs (results/chunks.partial.*); BENCH_RESULTS_DIR:
 * where the results go; BENCH_DIR: where the data goes; BENCH_QUIET_WAIT_MS.
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { loadavg, tmpdir } from 'node:os'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { type NginxServer, startNginx, startPostgres } from '@sluice/test-utils'
import { type SluiceProcess, startSluice } from '../http/sluice-process.js'
import { ensureWrk, runWrk } from '../http/wrk.js'
import { BENCH_PG_SETTINGS } from '../pipeline/pg.js'
import { treeCpuMs } from '../pipeline/proc.js'
import type { LoadNote } from '../pipeline/report.js'
import { SystemMeter, waitForQuiet } from '../storage/measure.js'
import { machineInfo } from '../storage/report.js'
import { type ChunkResult, type Report, type Row, type Run, SERVERS, type ServerName, closingNote, medianOf, sizeLabel, writeReport } from './report.js'
import { loadNote, log, runSeconds } from '../pipeline/run-log.js'

const QUICK = process.env.QUICK === '1'
const list = (value: string | undefined): number[] | undefined => value?.split(',').map(Number)
const SIZES = list(process.env.BENCH_CHUNKS_SIZES)
const CLIENTS = list(process.env.BENCH_CHUNKS_CLIENTS)
const PARTIAL = SIZES !== undefined || CLIENTS !== undefined || process.env.BENCH_REPS !== undefined || process.env.BENCH_CHUNKS_SECONDS !== undefined
const QUIET_WAIT_MS = Number(process.env.BENCH_QUIET_WAIT_MS ?? (QUICK ? 0 : 10_000))

const SETTINGS = {
  chunkBytes: SIZES ?? [2 ** 20, 10 * 2 ** 20],
  clients: CLIENTS ?? (QUICK ? [1, 10] : [1, 10, 100]),
  reps: Number(process.env.BENCH_REPS ?? (QUICK ? 1 : 3)),
  seconds: Number(process.env.BENCH_CHUNKS_SECONDS ?? (QUICK ? 2 : 10)),
  warmupSeconds: QUICK ? 1 : 3,
  /** One wrk thread: each server is one process (nginx one worker); the other core is left to it. */
  wrkThreads: 1,
  wrkTimeoutSeconds: 60,
  /** Bytes of one row's payload: a change line is a little over 1 KB. */
  payloadBytes: 960,
  /** The snapshot spans this many chunks of the largest size, so a middle one exists. */
  chunksPerShape: 3.5,
  quietWaitSeconds: QUIET_WAIT_MS / 1000,
}

const TABLE = 'chunk_rows'
/** Sluice's admission limits raised so every request is served, not refused; no per-request logging. */
const SLUICE_FLAGS = ['--log-level', 'warn', '--max-concurrent-initial', '100000', '--max-concurrent-existing', '100000']

const here = dirname(fileURLToPath(import.meta.url))
async function get(url: string): Promise<{ status: number; headers: Headers; body: Buffer }> {
  const res = await fetch(url)
  return { status: res.status, headers: res.headers, body: Buffer.from(await res.arrayBuffer()) }
}

/** `sluice_http_body_bytes_total` by path, from /metrics. */
async function bodyBytesByPath(sluiceUrl: string): Promise<Record<string, number>> {
  const text = (await get(`${sluiceUrl}/metrics`)).body.toString('utf8')
  const out: Record<string, number> = {}
  for (const m of text.matchAll(/^sluice_http_body_bytes_total\{path="(\w+)"\} (\S+)$/gm)) out[m[1]!] = Number(m[2])
  return out
}

interface Chunk {
  readonly query: string
  readonly body: Buffer
  readonly chunks: number
}

/**
 * Reads the whole shape from offset -1 until up to date (which also waits for
 * the snapshot to be stored) and returns its second chunk: sealed, since more
 * chunks follow it, and not the `offset=-1` response.
 */
async function middleChunk(sluiceUrl: string): Promise<Chunk> {
  let query = `table=${TABLE}&offset=-1`
  let handle: string | undefined
  const bodies: { query: string; body: Buffer }[] = []
  for (;;) {
    const r = await get(`${sluiceUrl}/v1/shape?${query}`)
    if (r.status !== 200) throw new Error(`GET ${query}: ${r.status} ${r.body.toString('utf8').slice(0, 300)}`)
    bodies.push({ query, body: r.body })
    handle ??= r.headers.get('electric-handle') ?? undefined
    if (r.headers.get('electric-up-to-date') !== null) break
    query = `table=${TABLE}&handle=${handle}&offset=${r.headers.get('electric-offset')}`
  }
  if (bodies.length < 3) throw new Error(`the shape has ${bodies.length} chunks; a middle one needs at least 3`)
  return { ...bodies[1]!, chunks: bodies.length }
}

interface Target {
  readonly url: string
  readonly pid: number
}

async function measure(target: Target, clients: number, seconds: number): Promise<Run> {
  await waitForQuiet(QUIET_WAIT_MS)
  const meter = new SystemMeter()
  const c0 = treeCpuMs(target.pid)
  const t0 = performance.now()
  const w = await runWrk({ url: target.url, connections: clients, threads: SETTINGS.wrkThreads, seconds, timeoutSeconds: SETTINGS.wrkTimeoutSeconds })
  const wallMs = performance.now() - t0
  const c1 = treeCpuMs(target.pid)
  const cpuMs = c0 === undefined || c1 === undefined ? null : c1 - c0
  const secs = w.durationUs / 1e6
  return {
    requests: w.requests,
    seconds: secs,
    requestsPerSec: w.requests / secs,
    bytesPerSec: w.bytes / secs,
    p50Ms: w.p50Us / 1000,
    p99Ms: w.p99Us / 1000,
    errors: w.connectErrors + w.readErrors + w.writeErrors + w.statusErrors + w.timeouts,
    bytesPerResponse: w.requests === 0 ? 0 : w.bytes / w.requests,
    serverCpuMs: cpuMs,
    cpuSecondsPerGB: cpuMs === null || w.bytes === 0 ? null : cpuMs / 1000 / (w.bytes / 1e9),
    serverCpuPercent: cpuMs === null ? null : (cpuMs / wallMs) * 100,
    cpuPressurePercent: meter.cpuPressurePercent() ?? null,
    loadavg1: loadavg()[0]!,
  }
}

async function benchChunkSize(chunkBytes: number, databaseUrl: string, root: string, nginx: NginxServer, staticDir: string): Promise<ChunkResult> {
  const tag = `c${chunkBytes}`
  const sluice: Partial<Record<'sendfile' | 'pread', SluiceProcess>> = {}
  try {
    for (const mode of ['sendfile', 'pread'] as const) {
      const name = `sluice_${tag}_${mode}`
      sluice[mode] = await startSluice({
        databaseUrl,
        storageDir: join(root, name),
        flags: [...SLUICE_FLAGS, '--chunk-bytes', String(chunkBytes), '--slot', name, '--publication', name, ...(mode === 'pread' ? ['--no-sendfile'] : [])],
      })
      log(`${sizeLabel(chunkBytes)}: Sluice (${mode}) at ${sluice[mode]!.url}, pid ${sluice[mode]!.pid}`)
    }
    const own = await middleChunk(sluice.sendfile!.url)
    const other = await middleChunk(sluice.pread!.url)
    // The same log contents make the same chunks on both servers; only the handle in the URL differs.
    if (!own.body.equals(other.body)) throw new Error(`the sendfile and pread servers' chunks differ (${own.body.length} and ${other.body.length} bytes)`)
    const file = `chunk-${chunkBytes}.json`
    writeFileSync(join(staticDir, file), own.body)
    const targets: Record<ServerName, Target> = {
      sendfile: { url: `${sluice.sendfile!.url}/v1/shape?${own.query}`, pid: sluice.sendfile!.pid },
      pread: { url: `${sluice.pread!.url}/v1/shape?${other.query}`, pid: sluice.pread!.pid },
      nginx: { url: `${nginx.url}/${file}`, pid: nginx.pid },
    }
    for (const name of SERVERS) {
      const again = await get(targets[name].url)
      if (again.status !== 200 || !again.body.equals(own.body)) throw new Error(`${name} does not answer the chunk's ${own.body.length} bytes (${again.status}, ${again.body.length} bytes)`)
    }
    log(`${sizeLabel(chunkBytes)}: chunk 2 of ${own.chunks}, ${own.body.length} body bytes, the same from all three servers (${own.query})`)
    const before = { sendfile: await bodyBytesByPath(sluice.sendfile!.url), pread: await bodyBytesByPath(sluice.pread!.url) }
    for (const name of SERVERS) {
      log(`  warm-up of ${name} (${SETTINGS.warmupSeconds} s, 10 clients)`)
      await runWrk({ url: targets[name].url, connections: 10, threads: SETTINGS.wrkThreads, seconds: SETTINGS.warmupSeconds, timeoutSeconds: SETTINGS.wrkTimeoutSeconds })
    }
    const rows: Row[] = []
    for (const clients of SETTINGS.clients) {
      const runs: Record<ServerName, Run[]> = { sendfile: [], pread: [], nginx: [] }
      for (let rep = 0; rep < SETTINGS.reps; rep++) {
        // Each server goes first, second and third in turn.
        const order = SERVERS.map((_, i) => SERVERS[(i + rep) % SERVERS.length]!)
        for (const name of order) {
          const r = await measure(targets[name], clients, SETTINGS.seconds)
          runs[name].push(r)
          log(
            `  ${sizeLabel(chunkBytes)}, ${clients} clients, rep ${rep + 1}, ${name}: ${r.requestsPerSec.toFixed(1)} req/s, ${(r.bytesPerSec / 1e6).toFixed(0)} MB/s, p50 ${r.p50Ms.toFixed(1)} ms, p99 ${r.p99Ms.toFixed(1)} ms, CPU ${r.cpuSecondsPerGB?.toFixed(2) ?? '-'} s/GB (${r.serverCpuPercent?.toFixed(0) ?? '-'}% of a core), ${r.errors} errors (load ${r.loadavg1.toFixed(1)})`,
          )
        }
      }
      rows.push({
        clients,
        sides: {
          sendfile: { runs: runs.sendfile, median: medianOf(runs.sendfile) },
          pread: { runs: runs.pread, median: medianOf(runs.pread) },
          nginx: { runs: runs.nginx, median: medianOf(runs.nginx) },
        },
      })
    }
    const after = { sendfile: await bodyBytesByPath(sluice.sendfile!.url), pread: await bodyBytesByPath(sluice.pread!.url) }
    const delta = (mode: 'sendfile' | 'pread'): Record<string, number> =>
      Object.fromEntries(Object.entries(after[mode]).map(([path, bytes]) => [path, bytes - (before[mode][path] ?? 0)]))
    return { chunkBytes, bodyBytes: own.body.length, query: own.query, chunks: own.chunks, rows, bodyBytesByPath: { sendfile: delta('sendfile'), pread: delta('pread') } }
  } finally {
    for (const s of Object.values(sluice)) await s.stop()
  }
}

/** nginx as a static file server: one worker (as Sluice is one process), sendfile, keep-alive without a request cap, no access log. */
function nginxConfig(staticDir: string) {
  return ({ port }: { port: number }): string => `server {
  listen 127.0.0.1:${port};
  root ${staticDir};
  sendfile on;
  tcp_nopush on;
  access_log off;
  keepalive_requests 1000000;
  keepalive_timeout 120s;
  default_type application/json;
  location / {}
}`
}

async function main(): Promise<void> {
  const wrkVersion = ensureWrk()
  const base = process.env.BENCH_DIR ?? tmpdir()
  mkdirSync(base, { recursive: true })
  const root = mkdtempSync(join(base, 'sluice-chunks-bench-'))
  const staticDir = join(root, 'static')
  mkdirSync(staticDir)
  const machine = machineInfo(root)
  const loads: LoadNote[] = [loadNote('start')]
  log(`large-chunks benchmark${QUICK ? ' (QUICK)' : ''}; data in ${root}; wrk ${wrkVersion}; load average ${loads[0]!.loadavg.join(', ')}`)
  const rows = Math.ceil((SETTINGS.chunksPerShape * Math.max(...SETTINGS.chunkBytes)) / SETTINGS.payloadBytes)
  const cluster = await startPostgres({ settings: BENCH_PG_SETTINGS })
  let nginx: NginxServer | undefined
  const results: ChunkResult[] = []
  try {
    await cluster.query(`CREATE TABLE ${TABLE} (id int PRIMARY KEY, payload text NOT NULL)`)
    // md5 text repeated: incompressible-looking, like real rows, and the same on every run.
    await cluster.query(
      `INSERT INTO ${TABLE} SELECT i, left(repeat(md5(i::text), ${Math.ceil(SETTINGS.payloadBytes / 32)}), ${SETTINGS.payloadBytes}) FROM generate_series(1, ${rows}) AS i`,
    )
    log(`Postgres ${cluster.version} on port ${cluster.port}; ${rows} rows`)
    nginx = await startNginx({ config: nginxConfig(staticDir) })
    log(`nginx ${nginx.binary.version} (${nginx.binary.path}) at ${nginx.url}`)
    for (const chunkBytes of SETTINGS.chunkBytes) {
      results.push(await benchChunkSize(chunkBytes, cluster.url, root, nginx, staticDir))
      loads.push(loadNote(`after ${sizeLabel(chunkBytes)}`))
    }
    const report: Report = {
      quick: QUICK,
      partial: PARTIAL,
      machine,
      wrkVersion,
      nginxVersion: nginx.binary.version,
      postgresVersion: cluster.version,
      settings: SETTINGS,
      sluiceFlags: SLUICE_FLAGS,
      tableRows: rows,
      runSeconds: runSeconds(),
      loads: [...loads, loadNote('end')],
      results,
    }
    const name = QUICK ? 'chunks.quick' : PARTIAL ? 'chunks.partial' : 'chunks'
    const outDir = process.env.BENCH_RESULTS_DIR ?? join(here, '..', 'results')
    mkdirSync(outDir, { recursive: true })
    writeReport(report, join(outDir, name))
    for (const line of closingNote(report)) log(line)
    log(`wrote ${join(outDir, name)}.md and .json (${report.runSeconds.toFixed(0)} s)`)
  } finally {
    await nginx?.stop()
    await cluster.stop()
    rmSync(root, { recursive: true, force: true })
  }
}

await main()
// Pools and child pipes must not hold the process open.
process.exit(0)
