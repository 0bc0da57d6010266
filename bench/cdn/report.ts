/**
 * The CDN benchmark's outputs: `results/cdn.json` (every run, every write) and
 * `results/cdn.md` (machine, load, method, one table, the targets met or
 * missed). Pure formatting.
 */
import { writeFileSync } from 'node:fs'
import type { LoadNote } from '../pipeline/report.js'
import type { Machine } from '../storage/report.js'

/** `none`: the clients talk to the origin directly (the baseline every cache is compared with). */
export type CacheKind = 'none' | 'nginx' | 'varnish'

/** Who answers the cache: Sluice itself, or the ceiling (ceiling-origin.ts: live answers from memory the moment of the write). */
export type OriginKind = 'sluice' | 'ceiling'

export interface Distribution {
  readonly p50: number
  readonly p99: number
  readonly max: number
}

export interface SyncFigures {
  /** From the first client's first request to the last client's up-to-date. */
  readonly wallMs: number
  /** Each client's time from its first request to up-to-date. */
  readonly perClientMs: Distribution
  readonly bytesPerClient: number
  /** Distinct non-live URLs (the chunks of the shape, plus catch-up ranges) the origin answered. */
  readonly originUrls: number
  /** Non-live requests that reached the origin, all URLs together. */
  readonly originRequests: number
  /** The most requests the origin answered for one URL (1: every chunk served by the origin once). */
  readonly originMaxPerUrl: number
  /** Origin responses by status; a 304 is a revalidation (after max-age, 60 s), answered without reading the log. */
  readonly originServed: Served
  readonly errors: number
  readonly statuses: Record<string, number>
}

export interface Served {
  readonly byStatus: Record<string, number>
  /** The most 200 responses (bodies read from the log) the origin sent for one URL. */
  readonly max200PerUrl: number
}

export interface WriteFigures {
  readonly received: number
  /** From the writer sending the update to the last client holding the whole response. */
  readonly lastMs: number
  /** The same for the median client. */
  readonly p50ClientMs: number
  /** The same for the first client: the origin's answer through the cache, before any fan-out (absent in older results). */
  readonly firstMs?: number
}

export interface LiveFigures {
  readonly writes: readonly WriteFigures[]
  /** Time until the last client had a write, over the writes. */
  readonly lastClient: Distribution
  /** The median client's latency, over the writes. */
  readonly medianClient: Distribution
  /** The first client's latency, over the writes (absent in older results). */
  readonly firstClient?: Distribution
  /** Writes that some client never received within the drain time. */
  readonly incomplete: number
  /** Live requests that reached the origin during the writes and the idle time after them. */
  readonly originLiveRequests: number
  /** Distinct live URLs among them: one per live window (each write and each long-poll timeout starts one). */
  readonly originLiveUrls: number
  /** originLiveRequests / originLiveUrls: 1 is perfect collapsing, the number of clients is none. */
  readonly originPerWindow: number
  readonly originMaxPerUrl: number
  readonly originOtherRequests: number
  /** CPU of the origin process per second of the live phase, percent of one core. */
  readonly originCpuPercent: number | null
  readonly cpuPressurePercent: number | null
  readonly loadavg1: number
  readonly idleSeconds: number
  /** From the first write to the last client having the last one. */
  readonly writesWallMs: number
  /** CPU of the cache's processes (nginx master and workers; every varnishd) per write, ms. */
  readonly cacheCpuMsPerWrite: number
  /** CPU of the client processes per write, ms (parsing responses and sending the next long-polls). */
  readonly clientCpuMsPerWrite: number
  readonly originServed: Served
}

export interface Run {
  readonly cache: CacheKind
  /** Absent in results written before the ceiling existed: Sluice. */
  readonly origin?: OriginKind
  readonly clients: number
  readonly clientProcesses: number
  /** Cache instances the clients were spread over (Varnish above one process's open-file limit: two edges in front of one shield). */
  readonly edges: number
  readonly sync: SyncFigures
  readonly live: LiveFigures
  readonly clientErrors: Record<string, number>
  readonly cacheStats?: Record<string, number>
}

export interface Report {
  readonly quick: boolean
  readonly partial: boolean
  readonly machine: Machine & { readonly fdLimit: string }
  readonly postgres: { readonly version: string }
  readonly versions: { readonly nginx: string; readonly varnish: string }
  readonly settings: Record<string, unknown>
  readonly originFlags: readonly string[]
  readonly shape: { readonly rows: number; readonly chunkBytes: number }
  readonly runSeconds: number
  readonly loads: readonly LoadNote[]
  readonly runs: readonly Run[]
}

export const CACHE_LABEL: Record<CacheKind, string> = { none: 'no cache (origin direct)', nginx: 'nginx', varnish: 'Varnish' }

export const CEILING_SUFFIX = ', in-memory origin (ceiling)'

/** The cache, its topology, and the origin when it is the ceiling. */
export function runLabel(run: Pick<Run, 'cache' | 'origin' | 'edges'>): string {
  return `${CACHE_LABEL[run.cache]}${run.edges > 1 ? ` (${run.edges} edges + shield)` : ''}${run.origin === 'ceiling' ? CEILING_SUFFIX : ''}`
}

/** Targets are Sluice's: runs through a cache in front of Sluice. */
export function isTargetRun(run: Run): boolean {
  return run.cache !== 'none' && run.origin !== 'ceiling'
}

/** Targets of issue 31 item 10, from a run: about one origin request per window, the last client within 1 s at p99, each chunk from the origin once. */
export interface TargetCheck {
  readonly what: string
  readonly met: boolean
  readonly figure: string
}

export function targetChecks(run: Run): TargetCheck[] {
  return [
    { what: 'origin requests per live window about 1 (at most 1.5)', met: run.live.originPerWindow <= 1.5, figure: run.live.originPerWindow.toFixed(2) },
    { what: 'last client has the write, p99 at most 1 s', met: run.live.lastClient.p99 <= 1000 && run.live.incomplete === 0, figure: `${run.live.lastClient.p99.toFixed(0)} ms` },
    {
      what: 'initial sync: each chunk URL served by the origin once (200 responses; 304 revalidations after max-age read nothing)',
      met: run.sync.originServed.max200PerUrl === 1,
      figure: `max ${run.sync.originServed.max200PerUrl} per URL over ${run.sync.originUrls} URLs (${run.sync.originRequests} requests: ${Object.entries(run.sync.originServed.byStatus).map(([k, v]) => `${v}x ${k}`).join(', ')})`,
    },
  ]
}

function f(x: number, digits = 0): string {
  return Number.isFinite(x) ? x.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits }) : '-'
}

export function markdown(report: Report): string {
  const lines: string[] = []
  lines.push(`# CDN benchmark${report.quick ? ' (QUICK)' : report.partial ? ' (partial)' : ''}`, '')
  lines.push(
    `One shape (${f(report.shape.rows)} rows, --chunk-bytes ${f(report.shape.chunkBytes)}) followed by N long-poll clients through an HTTP cache: nginx ${report.versions.nginx} with packages/server/deploy/nginx.conf, Varnish ${report.versions.varnish} with packages/server/deploy/varnish.vcl, and the clients straight at the origin as the baseline.`,
    '',
  )
  lines.push(`Machine: ${report.machine.nproc} CPUs (${report.machine.cpu}), ${report.machine.memoryGiB} GiB, ${report.machine.os}, Node ${report.machine.node}, ulimit -n ${report.machine.fdLimit}; Postgres ${report.postgres.version}.`, '')
  lines.push(`Load average (1 min): ${report.loads.map((l) => `${l.loadavg[0]} (${l.label})`).join(', ')}.`, '')
  lines.push(
    '| cache | clients | sync wall | sync p99/client | origin 200s per chunk URL (max) | last client p50 | last client p99 | last client max | median client p50 | first client p50 | origin req per live window | origin live req / writes | incomplete writes | origin CPU | cache CPU per write | client CPU per write | load |',
    '|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|',
  )
  for (const r of report.runs) {
    const writes = r.live.writes.length
    lines.push(
      `| ${runLabel(r)} | ${f(r.clients)} | ${f(r.sync.wallMs / 1000, 1)} s | ${f(r.sync.perClientMs.p99)} ms | ${f(r.sync.originServed.max200PerUrl)} (${f(r.sync.originUrls)} URLs) | ${f(r.live.lastClient.p50)} ms | ${f(r.live.lastClient.p99)} ms | ${f(r.live.lastClient.max)} ms | ${f(r.live.medianClient.p50)} ms | ${f(r.live.firstClient?.p50 ?? Number.NaN)} ms | ${f(r.live.originPerWindow, 2)} | ${f(r.live.originLiveRequests)} / ${f(writes)} | ${f(r.live.incomplete)} | ${r.live.originCpuPercent === null ? '-' : `${f(r.live.originCpuPercent)}%`} | ${f(r.live.cacheCpuMsPerWrite)} ms | ${f(r.live.clientCpuMsPerWrite)} ms | ${f(r.live.loadavg1, 1)} |`,
    )
  }
  lines.push('')
  lines.push('Targets (issue 31 item 10), per cached run:', '')
  for (const r of report.runs) {
    if (!isTargetRun(r)) continue
    for (const t of targetChecks(r)) lines.push(`- ${CACHE_LABEL[r.cache]}, ${f(r.clients)} clients: ${t.what}: ${t.met ? 'met' : 'missed'} (${t.figure})`)
  }
  const ceilings = report.runs.filter((r) => r.origin === 'ceiling')
  if (ceilings.length > 0) {
    lines.push('')
    lines.push(
      `Ceiling rows (${CEILING_SUFFIX.slice(2)}): the same cache and clients in front of a bare node:http origin that answers every parked live request from memory the moment of the write (no Postgres, no log, no fsync); the writes are stamped when the ceiling is told of them. What is left of their time to the last client is the cache's and the clients' fan-out on this machine.`,
    )
  }
  lines.push('')
  lines.push(`Run took ${f(report.runSeconds / 60, 1)} min. Settings: \`${JSON.stringify(report.settings)}\`; origin flags \`${report.originFlags.join(' ')}\`.`, '')
  return lines.join('\n')
}

export function writeReport(report: Report, stem: string): void {
  writeFileSync(`${stem}.json`, `${JSON.stringify(report, null, 2)}\n`)
  writeFileSync(`${stem}.md`, markdown(report))
}
