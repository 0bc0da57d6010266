/**
 * The large-chunks benchmark's results: `results/chunks.json` (every run) and
 * `results/chunks.md` (method, tables of medians, the issue's targets met or
 * missed). Pure formatting; `run.ts` measures.
 */
import { writeFileSync } from 'node:fs'
import type { LoadNote } from '../pipeline/report.js'
import { median } from '../pipeline/stats.js'
import type { Machine } from '../storage/report.js'
import { num as n } from '../report/format.js'

/** Who serves the chunk: Sluice by sendfile(2), Sluice with `--no-sendfile` (pread), nginx from a static file. */
export const SERVERS = ['sendfile', 'pread', 'nginx'] as const
export type ServerName = (typeof SERVERS)[number]

export const SERVER_LABEL: Readonly<Record<ServerName, string>> = {
  sendfile: 'Sluice, sendfile',
  pread: 'Sluice, pread (--no-sendfile)',
  nginx: 'nginx, static file',
}

/** The issue's targets (item 6), for every chunk size and client count. */
export const TARGETS = {
  /** sendfile req/s over the pread path's, at least. */
  sendfileOverPreadRps: 1.5,
  /** sendfile CPU per GB over the pread path's, at most. */
  sendfileOverPreadCpu: 1 / 3,
  /** sendfile req/s over nginx's, at least. */
  sendfileOverNginxRps: 0.7,
} as const

export interface Run {
  readonly requests: number
  readonly seconds: number
  readonly requestsPerSec: number
  /** Bytes wrk read (status lines, headers and bodies) per second. */
  readonly bytesPerSec: number
  readonly p50Ms: number
  readonly p99Ms: number
  /** wrk's connect, read, write and status errors and timeouts together. */
  readonly errors: number
  /** Bytes wrk read per response: the body plus a few hundred of headers when every response was whole. */
  readonly bytesPerResponse: number
  /** CPU time (user + system) of the server's processes over the run. */
  readonly serverCpuMs: number | null
  /** serverCpuMs per GB (10^9 bytes) wrk read: CPU-seconds per GB. */
  readonly cpuSecondsPerGB: number | null
  /** Server CPU time per second of the run, in percent of one core. */
  readonly serverCpuPercent: number | null
  readonly cpuPressurePercent: number | null
  readonly loadavg1: number
}

export interface Median {
  readonly requestsPerSec: number
  readonly bytesPerSec: number
  readonly p50Ms: number
  readonly p99Ms: number
  readonly cpuSecondsPerGB: number
  readonly serverCpuPercent: number
}

export interface Side {
  readonly runs: readonly Run[]
  readonly median: Median
}

export interface Row {
  readonly clients: number
  readonly sides: Readonly<Record<ServerName, Side>>
}

export interface ChunkResult {
  /** `--chunk-bytes` of both Sluice servers. */
  readonly chunkBytes: number
  /** Body bytes of the chunk served (the same from all three servers, checked). */
  readonly bodyBytes: number
  /** The path and query of the chunk on Sluice (`offset` names the chunk before it). */
  readonly query: string
  /** Snapshot chunks of the shape: the one served is neither the first nor the last. */
  readonly chunks: number
  readonly rows: readonly Row[]
  /** Body bytes each Sluice server counted per path over the whole run (/metrics), to show which path served. */
  readonly bodyBytesByPath: Readonly<Record<'sendfile' | 'pread', Readonly<Record<string, number>>>>
}

export interface Report {
  readonly quick: boolean
  readonly partial: boolean
  readonly machine: Machine
  readonly wrkVersion: string
  readonly nginxVersion: string
  readonly postgresVersion: string
  readonly settings: Record<string, unknown>
  readonly sluiceFlags: readonly string[]
  readonly tableRows: number
  readonly runSeconds: number
  readonly loads: readonly LoadNote[]
  readonly results: readonly ChunkResult[]
}

export function medianOf(runs: readonly Run[]): Median {
  const known = (f: (r: Run) => number | null): number => median(runs.map(f).filter((x): x is number => x !== null))
  return {
    requestsPerSec: median(runs.map((r) => r.requestsPerSec)),
    bytesPerSec: median(runs.map((r) => r.bytesPerSec)),
    p50Ms: median(runs.map((r) => r.p50Ms)),
    p99Ms: median(runs.map((r) => r.p99Ms)),
    cpuSecondsPerGB: known((r) => r.cpuSecondsPerGB),
    serverCpuPercent: known((r) => r.serverCpuPercent),
  }
}

export interface TargetCheck {
  readonly chunkBytes: number
  readonly clients: number
  readonly name: 'sendfile/pread req/s' | 'sendfile/pread CPU per GB' | 'sendfile/nginx req/s'
  readonly ratio: number
  readonly bound: number
  readonly met: boolean
}

export function targetChecks(report: Report): TargetCheck[] {
  const out: TargetCheck[] = []
  for (const result of report.results) {
    for (const row of result.rows) {
      const s = row.sides.sendfile.median
      const p = row.sides.pread.median
      const n = row.sides.nginx.median
      const at = { chunkBytes: result.chunkBytes, clients: row.clients }
      const rps = s.requestsPerSec / p.requestsPerSec
      const cpu = s.cpuSecondsPerGB / p.cpuSecondsPerGB
      const ceiling = s.requestsPerSec / n.requestsPerSec
      out.push({ ...at, name: 'sendfile/pread req/s', ratio: rps, bound: TARGETS.sendfileOverPreadRps, met: rps >= TARGETS.sendfileOverPreadRps })
      out.push({ ...at, name: 'sendfile/pread CPU per GB', ratio: cpu, bound: TARGETS.sendfileOverPreadCpu, met: cpu <= TARGETS.sendfileOverPreadCpu })
      out.push({ ...at, name: 'sendfile/nginx req/s', ratio: ceiling, bound: TARGETS.sendfileOverNginxRps, met: ceiling >= TARGETS.sendfileOverNginxRps })
    }
  }
  return out
}

export function sizeLabel(bytes: number): string {
  if (bytes >= 2 ** 20 && bytes % 2 ** 20 === 0) return `${bytes / 2 ** 20} MiB`
  if (bytes >= 1024 && bytes % 1024 === 0) return `${bytes / 1024} KiB`
  return `${bytes} B`
}

function ratio(x: number): string {
  return Number.isFinite(x) ? `${x.toFixed(2)}x` : '-'
}

function markdown(report: Report): string {
  const lines: string[] = []
  const m = report.machine
  lines.push(`# Large chunks: sendfile, pread and nginx${report.quick ? ' (QUICK)' : report.partial ? ' (partial run)' : ''}`, '')
  lines.push(
    `Run ${m.date}; ${m.nproc} CPUs (${m.cpu}), ${m.memoryGiB} GiB, ${m.os}, Node ${m.node}; wrk ${report.wrkVersion}, nginx ${report.nginxVersion}, Postgres ${report.postgresVersion}; ${n(report.runSeconds / 60, 1)} min.`,
    `Load average (1 min): ${report.loads.map((l) => `${l.loadavg[0]?.toFixed(1)} (${l.label})`).join(', ')}.`,
    '',
    'Method: one sealed snapshot chunk of a shape (neither its first nor its last) fetched by wrk (1 thread, N keep-alive',
    'connections in closed loops) from Sluice with sendfile, Sluice with `--no-sendfile` (both running at once, each with',
    'its own storage, slot and publication) and nginx (1 worker, `sendfile on`, no access log) serving the same body bytes',
    'as a static file. Server order rotates between repetitions. CPU is user + system time of the server process (nginx:',
    'master and worker) from /proc over each run, per GB (10^9 bytes) wrk read.',
    '',
  )
  for (const result of report.results) {
    lines.push(`## ${sizeLabel(result.chunkBytes)} chunks (body ${n(result.bodyBytes)} bytes, chunk 2 of ${result.chunks})`, '')
    lines.push('| clients | server | req/s (median) | req/s runs | MB/s | p50 | p99 | CPU s/GB | CPU s/GB runs | server CPU | errors |')
    lines.push('|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|')
    for (const row of result.rows) {
      for (const name of SERVERS) {
        const side = row.sides[name]
        lines.push(
          `| ${row.clients} | ${SERVER_LABEL[name]} | ${n(side.median.requestsPerSec, 1)} | ${side.runs.map((r) => n(r.requestsPerSec, 1)).join(', ')} | ${n(side.median.bytesPerSec / 1e6)} | ${n(side.median.p50Ms, 1)} ms | ${n(side.median.p99Ms, 1)} ms | ${n(side.median.cpuSecondsPerGB, 2)} | ${side.runs.map((r) => n(r.cpuSecondsPerGB ?? Number.NaN, 2)).join(', ')} | ${n(side.median.serverCpuPercent)}% | ${side.runs.reduce((a, r) => a + r.errors, 0)} |`,
        )
      }
    }
    lines.push('')
  }
  lines.push('## Targets (issue 31, item 6)', '')
  lines.push('| chunk | clients | ratio | measured | target | |', '|---|---:|---|---:|---:|---|')
  for (const t of targetChecks(report)) {
    lines.push(`| ${sizeLabel(t.chunkBytes)} | ${t.clients} | ${t.name} | ${ratio(t.ratio)} | ${t.name.includes('CPU') ? '≤' : '≥'} ${ratio(t.bound)} | ${t.met ? 'met' : 'missed'} |`)
  }
  lines.push('')
  return `${lines.join('\n')}\n`
}

/** Sentences with the medians and ratios, for the console at the end of a run. */
export function closingNote(report: Report): string[] {
  const out: string[] = []
  for (const result of report.results) {
    for (const row of result.rows) {
      const s = row.sides.sendfile.median
      const p = row.sides.pread.median
      const g = row.sides.nginx.median
      out.push(
        `${sizeLabel(result.chunkBytes)}, ${row.clients} clients: sendfile ${n(s.requestsPerSec, 1)} req/s (${n(s.cpuSecondsPerGB, 2)} CPU s/GB), pread ${n(p.requestsPerSec, 1)} (${n(p.cpuSecondsPerGB, 2)}), nginx ${n(g.requestsPerSec, 1)} (${n(g.cpuSecondsPerGB, 2)}): sendfile/pread ${ratio(s.requestsPerSec / p.requestsPerSec)} req/s and ${ratio(s.cpuSecondsPerGB / p.cpuSecondsPerGB)} CPU/GB; sendfile/nginx ${ratio(s.requestsPerSec / g.requestsPerSec)} req/s`,
      )
    }
  }
  return out
}

export function writeReport(report: Report, basePath: string): void {
  writeFileSync(`${basePath}.json`, `${JSON.stringify(report, null, 2)}\n`)
  writeFileSync(`${basePath}.md`, markdown(report))
}
