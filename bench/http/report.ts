/**
 * The HTTP benchmark's outputs: `results/http.json` (everything measured, every
 * run) and `results/http.md` (machine, load, method, tables with medians and
 * the Sluice/ceiling ratios). Pure formatting.
 */
import { writeFileSync } from 'node:fs'
import type { PostgresSettings } from '@sluice/test-utils'
import type { LoadNote } from '../pipeline/report.js'
import { median } from '../pipeline/stats.js'
import type { Machine } from '../storage/report.js'
import { num as n } from '../report/format.js'

export type Server = 'sluice' | 'ceiling'

export interface InitialRun {
  readonly requests: number
  readonly seconds: number
  readonly requestsPerSec: number
  readonly p50Ms: number
  readonly p95Ms: number
  readonly p99Ms: number
  readonly maxMs: number
  /** Connect, read and write errors, timeouts and statuses >= 400 together (each kind in `wrk`). */
  readonly errors: number
  /** Bytes wrk read per response (headers and body): equal for both servers when both send the same response. */
  readonly bytesPerResponse: number
  /** CPU time of the server process per second of the run, in percent of one core. */
  readonly serverCpuPercent: number | null
  readonly cpuPressurePercent: number | null
  readonly loadavg1: number
  readonly wrk: Record<string, number>
}

export interface Median {
  readonly requestsPerSec: number
  readonly p50Ms: number
  readonly p95Ms: number
  readonly p99Ms: number
}

export interface InitialRow {
  readonly clients: number
  readonly sluice: { readonly runs: readonly InitialRun[]; readonly median: Median }
  readonly ceiling: { readonly runs: readonly InitialRun[]; readonly median: Median }
}

export interface Report {
  readonly quick: boolean
  readonly partial: boolean
  readonly machine: Machine & { readonly fdLimit: string }
  readonly postgres: { readonly version: string; readonly settings: PostgresSettings }
  readonly wrkVersion: string
  readonly settings: Record<string, unknown>
  readonly sluiceFlags: readonly string[]
  /** The initial-sync response: body bytes, header bytes (as Sluice sent them), rows. */
  readonly initialResponse: { readonly bodyBytes: number; readonly rows: number; readonly headers: Record<string, string> }
  readonly runSeconds: number
  readonly loads: readonly LoadNote[]
  readonly initial: readonly InitialRow[]
  /** Observations written after a run, by whoever read it (`http/render.ts` re-renders the markdown). */
  readonly notes?: readonly string[]
}

export function initialMedian(runs: readonly InitialRun[]): Median {
  return {
    requestsPerSec: median(runs.map((r) => r.requestsPerSec)),
    p50Ms: median(runs.map((r) => r.p50Ms)),
    p95Ms: median(runs.map((r) => r.p95Ms)),
    p99Ms: median(runs.map((r) => r.p99Ms)),
  }
}

function ms(x: number): string {
  if (!Number.isFinite(x)) return '-'
  return x < 10 ? `${x.toFixed(2)} ms` : x < 100 ? `${x.toFixed(1)} ms` : `${n(x)} ms`
}

function ratio(x: number): string {
  return Number.isFinite(x) ? `${x.toFixed(2)}x` : '-'
}

function pctRaw(x: number | null | undefined): string {
  return x === null || x === undefined || !Number.isFinite(x) ? '-' : `${x.toFixed(0)}%`
}

function list<T>(runs: readonly T[], f: (r: T) => string): string {
  return runs.map(f).join(', ')
}

/** Sentences quoting the ratios, for the closing note. */
export function closingNote(report: Report): string[] {
  const out: string[] = []
  for (const row of report.initial) {
    const s = row.sluice.median
    const c = row.ceiling.median
    out.push(
      `Initial sync, ${n(row.clients)} client${row.clients > 1 ? 's' : ''}: Sluice ${n(s.requestsPerSec)} req/s vs ceiling ${n(c.requestsPerSec)} req/s (${ratio(s.requestsPerSec / c.requestsPerSec)} of the ceiling's throughput); p99 ${ms(s.p99Ms)} vs ${ms(c.p99Ms)} (${ratio(s.p99Ms / c.p99Ms)}).`,
    )
  }
  return out
}

export function renderMarkdown(report: Report): string {
  const s = report.settings
  const out: string[] = []
  out.push(`# HTTP benchmark${report.quick ? ' (QUICK smoke run: short runs, one repetition; not figures to quote)' : report.partial ? ' (partial run)' : ''}`)
  out.push('')
  out.push(
    'Initial sync of a 500-row shape by 1, 100 and 2,000 concurrent clients (requests/s and latency), next to a bare fastify server that answers the same requests from memory, the ceiling for this stack. (Write-to-client latency is the live benchmark, `results/live.md`.)',
  )
  out.push('')
  out.push('**Measures:** the Sluice server process (`sluice start`, HTTP layer, shape lookup, storage reads) as HTTP clients see it, on one machine. **Does not measure:** an HTTP cache or CDN in front (which is how Sluice is meant to fan out initial syncs), TLS, compression, networks between machines, browsers, live requests, shapes larger than one chunk.')
  out.push('')
  out.push('## Machine')
  out.push('')
  const m = report.machine
  out.push(`- ${m.nproc} CPUs (${m.cpu}), ${m.memoryGiB} GiB RAM, ${m.os}, Node ${m.node}; open-file limit ${m.fdLimit}`)
  out.push(`- data on ${m.filesystem} (${m.dataDir}); Postgres ${report.postgres.version}; wrk ${report.wrkVersion}`)
  out.push(`- run on ${m.date}, ${n(report.runSeconds)} s`)
  out.push(
    '- **The machine is shared**: other engineers ran builds and tests on the same 2 cores during the run. Load averages and CPU pressure (Linux PSI: share of wall time some task waited for a CPU) are shown with every run; read the figures with them.',
  )
  out.push('')
  out.push('| moment | load average (1, 5, 15 min) |')
  out.push('|---|---|')
  for (const l of report.loads) out.push(`| ${l.label} (${l.at.slice(11, 19)} UTC) | ${l.loadavg.map((x) => x.toFixed(2)).join(', ')} |`)
  out.push('')
  out.push('## Method')
  out.push('')
  out.push(
    `- **Processes.** \`http/run.ts\` orchestrates: a throwaway Postgres cluster (\`@sluice/test-utils\`, fsync off as in the pipeline benchmark), the Sluice server (\`sluice start\` from \`@sluice/server\`, sources through tsx like every benchmark here, flags \`${report.sluiceFlags.join(' ')}\`), the ceiling server (\`http/ceiling-server.ts\`), and the load generator (wrk): each its own process. Everything shares the same 2 cores, so the load generator takes CPU from the server it loads; it does so equally for Sluice and the ceiling.`,
  )
  out.push(
    `- **Admission control raised.** Sluice by default answers more than 300 concurrent initial requests (and 10,000 others) with 503 + retry-after; here the limits are raised so that every request is served and the comparison is of serving, not of refusing. Errors of any kind are counted per run (they were ${report.initial.every((r) => [...r.sluice.runs, ...r.ceiling.runs].every((x) => x.errors === 0)) ? 'zero in every run' : '**not zero in every run**: see the tables'}).`,
  )
  const ir = report.initialResponse
  out.push(
    `- **Initial sync.** \`GET /v1/shape?table=http_rows&offset=-1\`: a 500-row table, one shape, one chunk; the body is ${n(ir.bodyBytes)} bytes (${ir.rows} rows and \`snapshot-end\`). wrk ${s.wrkThreads} thread(s), N keep-alive connections, each a closed loop (request, whole response, next request), ${s.initialSeconds} s per run after one warm-up run per server; latency from wrk's histogram. **Ceiling:** a bare fastify route in its own process answering the same URL with the bytes and headers Sluice answered (captured once at start), from a Buffer in memory. Sluice per request validates the query (once per distinct query text, then remembered), looks the shape up, reads the chunk's byte range from its log (pread into a pooled buffer of its size class; requests for the same range in flight at once share one read and one buffer; sendfile(2) only from 256 KiB of stored bytes) and frames it; a range asked for twice is then kept in the range cache (\`--range-cache\`, 32 MiB by default; a chunk's bytes never change), so from the third request on the body is written from one Buffer, as the ceiling's is.`,
  )
  out.push(
    `- **Repetitions.** ${s.reps} repetition(s) of every row; the order of the two servers alternates between repetitions so that drifting outside load falls on both alike; each run waits up to ${s.quietWaitSeconds} s for the CPU pressure of the last 10 s to drop below 10% first. Tables show medians of the repetitions and every run; ratios are Sluice / ceiling of the medians (throughput: below 1 means slower; latency: above 1 means slower).`,
  )
  out.push('')
  out.push('## Results')
  out.push('')
  out.push(...closingNote(report).map((l) => `- ${l}`))
  out.push('')
  out.push('### Initial sync (500 rows, offset=-1)')
  out.push('')
  out.push('| clients | server | req/s (median) | p50 | p95 | p99 | req/s ratio | p99 ratio | req/s per run | p99 per run | errors | bytes/response | server CPU | CPU pressure | load (1 min) |')
  out.push('|--:|---|--:|--:|--:|--:|--:|--:|---|---|--:|--:|---|---|---|')
  for (const row of report.initial) {
    for (const who of ['sluice', 'ceiling'] as const) {
      const side = row[who]
      const med = side.median
      out.push(
        `| ${n(row.clients)} | ${who === 'sluice' ? 'Sluice' : 'ceiling'} | ${n(med.requestsPerSec)} | ${ms(med.p50Ms)} | ${ms(med.p95Ms)} | ${ms(med.p99Ms)} | ${who === 'sluice' ? ratio(med.requestsPerSec / row.ceiling.median.requestsPerSec) : '1'} | ${who === 'sluice' ? ratio(med.p99Ms / row.ceiling.median.p99Ms) : '1'} | ${list(side.runs, (r) => n(r.requestsPerSec))} | ${list(side.runs, (r) => ms(r.p99Ms))} | ${n(side.runs.reduce((a, r) => a + r.errors, 0))} | ${n(median(side.runs.map((r) => r.bytesPerResponse)))} | ${list(side.runs, (r) => pctRaw(r.serverCpuPercent))} | ${list(side.runs, (r) => pctRaw(r.cpuPressurePercent))} | ${list(side.runs, (r) => r.loadavg1.toFixed(1))} |`,
      )
    }
  }
  out.push('')
  if (report.notes !== undefined && report.notes.length > 0) {
    out.push('## Notes on this run')
    out.push('')
    out.push(...report.notes.map((l) => `- ${l}`))
    out.push('')
  }
  out.push(`Reproduce: \`${report.quick ? 'QUICK=1 ' : ''}pnpm --filter @sluice/bench run bench:http\` (from the root: \`npm run bench:http\`); every run's figures are in \`results/${report.quick ? 'http.quick' : 'http'}.json\`.`)
  out.push('')
  return out.join('\n')
}

export function writeReport(report: Report, basePath: string): void {
  writeFileSync(`${basePath}.json`, `${JSON.stringify(report, null, 2)}\n`)
  writeFileSync(`${basePath}.md`, renderMarkdown(report))
}
