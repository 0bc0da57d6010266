/**
 * The large-shape benchmark's outputs: `results/large.json` (every run) and
 * `results/large.md` (machine, load, method, medians, ratios, the targets'
 * verdict). Pure formatting.
 */
import { writeFileSync } from 'node:fs'
import type { PostgresSettings } from '@sluice/test-utils'
import type { MemoryNow } from '../client/process-memory.js'
import type { LoadNote } from '../pipeline/report.js'
import { median } from '../pipeline/stats.js'
import type { Machine } from '../storage/report.js'
import { num as n } from '../report/format.js'

export type LargeClient = 'ours' | 'official' | 'parse' | 'raw'
export const LARGE_CLIENTS: readonly LargeClient[] = ['ours', 'official', 'parse', 'raw']
export const LARGE_LABEL: Record<LargeClient, string> = {
  ours: '@sluice/client',
  official: '@electric-sql/client 1.5.28',
  parse: 'JSON.parse floor (node:http, each body parsed, rows kept in a Map, values not typed)',
  raw: 'raw HTTP download (node:http, bodies counted, not parsed)',
}

/** The clients a results file has runs of: files written before the `parse` floor existed have none of it. */
export function clientsIn(row: Pick<LargeRow, 'runs'>): LargeClient[] {
  return LARGE_CLIENTS.filter((c) => (row.runs[c]?.length ?? 0) > 0)
}

/** Warm: the shape exists and was downloaded once before the clock. Cold: the first request creates it (the server's snapshot is in the time). */
export type Temperature = 'warm' | 'cold'

/** Issue 31, item 12: 1M rows from a warm shape. */
export const TARGET_ROWS = 1_000_000
export const RAW_TARGET_MS = 2_000
export const OURS_TARGET_MS = 10_000

export interface LargeRun {
  readonly client: LargeClient
  readonly temperature: Temperature
  readonly rep: number
  /** 0 when this client ran first in its repetition. */
  readonly position: number
  /** The where clause that made a cold run's shape new (undefined for warm runs). */
  readonly where?: string
  readonly ms: number
  /** Rows in the Shape's Map at the first up-to-date (null for raw). */
  readonly rows: number | null
  /** Raw only: body bytes read and requests made. */
  readonly bodyBytes: number | null
  readonly requests: number | null
  readonly userMs: number
  readonly systemMs: number
  readonly before: MemoryNow
  /** Kernel high-water mark (VmHWM) over the timed window; null if it could not be reset. */
  readonly peakRss: number | null
  readonly peakRssSampled: number
  readonly peakHeapUsed: number
  /** After a forced GC with the rows still held (raw holds nothing). */
  readonly retained: MemoryNow
  readonly rowsSha256: string | null
  readonly cpuPressurePercent: number | null
  readonly loadavg1: number
}

export interface LargeMedian {
  readonly ms: number
  readonly cpuMs: number
  readonly peakRss: number
  readonly peakHeapUsed: number
  readonly retainedHeapUsed: number
}

export interface LargeRow {
  readonly rows: number
  readonly table: string
  readonly temperature: Temperature
  /** Bytes of the shape's bodies over all its requests (from the priming download; for cold rows, from a raw run). */
  readonly bodyBytes: number
  readonly requests: number
  /** `parse` is missing from files written before it existed. */
  readonly runs: Partial<Record<LargeClient, LargeRun[]>> & Record<'ours' | 'official' | 'raw', LargeRun[]>
  readonly median: Partial<Record<LargeClient, LargeMedian>> & Record<'ours' | 'official' | 'raw', LargeMedian>
  /** Ours and the official client materialised equal rows (one digest over all their runs). */
  readonly rowsEqual: boolean
}

export interface Report {
  readonly quick: boolean
  readonly partial: boolean
  readonly machine: Machine
  readonly postgres: { readonly version: string; readonly settings: PostgresSettings }
  readonly settings: Record<string, unknown>
  readonly sluiceFlags: readonly string[]
  readonly runSeconds: number
  readonly loads: readonly LoadNote[]
  readonly results: readonly LargeRow[]
}

export function largeMedian(runs: readonly LargeRun[]): LargeMedian {
  return {
    ms: median(runs.map((r) => r.ms)),
    cpuMs: median(runs.map((r) => r.userMs + r.systemMs)),
    peakRss: median(runs.map((r) => r.peakRss ?? r.peakRssSampled)),
    peakHeapUsed: median(runs.map((r) => r.peakHeapUsed)),
    retainedHeapUsed: median(runs.map((r) => r.retained.heapUsed)),
  }
}

function mib(bytes: number | null): string {
  return bytes === null ? '-' : n(bytes / 2 ** 20, 0)
}

function ratio(a: number, b: number): string {
  return Number.isFinite(a / b) ? `${(a / b).toFixed(2)}x` : '-'
}

/** The row a target is read from: the biggest warm size, which is 1M rows in a full run. */
export function targetRow(report: Report): LargeRow | undefined {
  return report.results.filter((r) => r.temperature === 'warm').sort((a, b) => b.rows - a.rows)[0]
}

/** The targets of issue 31 item 12, met or missed, with the ratios to the other two downloads. */
export function verdictLines(report: Report): string[] {
  const row = targetRow(report)
  if (row === undefined) return []
  const m = row.median
  const verdict = (ms: number, target: number): string => (row.rows !== TARGET_ROWS ? `not judged (the target is for ${n(TARGET_ROWS)} rows)` : ms < target ? 'met' : 'MISSED')
  return [
    `Raw download of ${n(row.rows)} rows from a warm shape: ${n(m.raw.ms)} ms (target under ${n(RAW_TARGET_MS)} ms): ${verdict(m.raw.ms, RAW_TARGET_MS)}.`,
    `Our client, ${n(row.rows)} rows from a warm shape: ${n(m.ours.ms)} ms (target under ${n(OURS_TARGET_MS)} ms): ${verdict(m.ours.ms, OURS_TARGET_MS)}; ` +
      `${ratio(m.ours.ms, m.official.ms)} the official client's time (${n(m.official.ms)} ms), ${ratio(m.ours.ms, m.raw.ms)} the raw download's; ` +
      `peak RSS ${mib(m.ours.peakRss)} vs ${mib(m.official.peakRss)} MiB (${ratio(m.ours.peakRss, m.official.peakRss)}).`,
    ...(m.parse === undefined
      ? []
      : [
          `The floor of any JavaScript client that keeps the rows (each body through one JSON.parse, every row into a Map, no value typed): ${n(m.parse.ms)} ms; ` +
            `our client ${ratio(m.ours.ms, m.parse.ms)} of it, the official client ${ratio(m.official.ms, m.parse.ms)}.`,
        ]),
  ]
}

export function markdown(report: Report): string {
  const m = report.machine
  const out: string[] = []
  out.push(`# Large shape, one client${report.quick ? ' (QUICK smoke run: small counts, not figures)' : report.partial ? ' (partial run)' : ''}`)
  out.push('')
  out.push(
    'One client downloads one large shape from a Sluice server: our `Shape` (`@sluice/client`), the official one (`@electric-sql/client` 1.5.28), a raw HTTP download ' +
      'of the same log (node:http, bodies read and counted, the next offset taken from the headers, no JSON parsed) and the JSON.parse floor (the same download, each body ' +
      'decoded and given to one JSON.parse, every row put in a Map by its key, values left as text: the least any JavaScript client that keeps the rows does), each run in a fresh Node process of its own. ' +
      'Produced by `bench/large/run.ts` (`npm run bench:large`).',
  )
  out.push('')
  out.push(`Machine: ${m.nproc} cores (${m.cpu}), ${m.memoryGiB} GiB, ${m.os}, Node ${m.node}; Postgres ${report.postgres.version}; ${m.date}. Run took ${n(report.runSeconds)} s.`)
  out.push('')
  out.push(
    '**The machine is shared**: other work may run on the same cores. Load averages (1, 5, 15 min): ' +
      report.loads.map((l) => `${l.label} ${l.loadavg.join(' / ')}`).join('; ') +
      '. Each run shows its CPU pressure (Linux PSI: share of the time some task waited for a CPU) and 1-min load; read the figures with them.',
  )
  out.push('')
  out.push(`## Targets (issue 31, item 12: raw under ${n(RAW_TARGET_MS)} ms, our client under ${n(OURS_TARGET_MS)} ms, for ${n(TARGET_ROWS)} rows from a warm shape)`)
  out.push('')
  for (const line of verdictLines(report)) out.push(`- ${line}`)
  out.push('')
  out.push('## Medians')
  out.push('')
  out.push(
    'Clock: from the first request (`offset=-1`) to the response that says up-to-date; for a Shape, until `ready()` with every row in its Map (checked). ' +
      'Warm: the shape exists and was downloaded once before any timing, so its log is on disk and in the page cache. Cold: each run asks for a shape nobody asked for before ' +
      '(`where id > -<n>`, all rows), so the time includes the server taking its snapshot from Postgres. ' +
      'Peak RSS is the kernel high-water mark (VmHWM) over the timed window, reset at its start; it includes Node and the loaded client (the "before" column). ' +
      'Peak heap is heapUsed sampled every 20 ms. Retained: heapUsed after a forced GC with the rows still held.',
  )
  out.push('')
  out.push('| rows | shape | body MB (requests) | client | time ms (median) | CPU ms | peak RSS MiB | RSS before MiB | peak heap MiB | retained heap MiB | time / official | time / raw |')
  out.push('|---:|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|')
  for (const row of report.results) {
    for (const c of clientsIn(row)) {
      const md = row.median[c]!
      const before = median(row.runs[c]!.map((r) => r.before.rss))
      out.push(
        `| ${n(row.rows)} | ${row.temperature} | ${n(row.bodyBytes / 1e6, 1)} (${row.requests}) | ${LARGE_LABEL[c]} | ${n(md.ms)} | ${n(md.cpuMs)} | ${mib(md.peakRss)} | ${mib(before)} | ${mib(md.peakHeapUsed)} | ${mib(md.retainedHeapUsed)} | ` +
          `${c === 'official' ? '' : ratio(md.ms, row.median.official.ms)} | ${c === 'raw' ? '' : ratio(md.ms, row.median.raw.ms)} |`,
      )
    }
  }
  out.push('')
  out.push(`Rows equal between the two clients (sha256 of every row, sorted by key): ${report.results.map((r) => `${n(r.rows)} ${r.temperature}: ${r.rowsEqual ? 'yes' : 'NO'}`).join(', ')}.`)
  out.push('')
  out.push('## Every run')
  out.push('')
  out.push('| rows | shape | client | rep | pos | ms | CPU ms | peak RSS MiB | peak heap MiB | retained heap MiB | CPU pressure % | load 1m |')
  out.push('|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|')
  for (const row of report.results) {
    for (const c of clientsIn(row)) {
      for (const r of row.runs[c]!) {
        out.push(
          `| ${n(row.rows)} | ${row.temperature} | ${c} | ${r.rep + 1} | ${r.position + 1} | ${n(r.ms)} | ${n(r.userMs + r.systemMs)} | ${mib(r.peakRss ?? r.peakRssSampled)} | ${mib(r.peakHeapUsed)} | ${mib(r.retained.heapUsed)} | ${n(r.cpuPressurePercent ?? Number.NaN)} | ${n(r.loadavg1, 2)} |`,
        )
      }
    }
  }
  out.push('')
  out.push('## Settings')
  out.push('')
  out.push('```json')
  out.push(JSON.stringify({ settings: report.settings, sluiceFlags: report.sluiceFlags }, null, 2))
  out.push('```')
  out.push('')
  return out.join('\n')
}

export function writeReport(report: Report, basePath: string): void {
  writeFileSync(`${basePath}.json`, `${JSON.stringify(report, null, 2)}\n`)
  writeFileSync(`${basePath}.md`, markdown(report))
}
