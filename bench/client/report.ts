/**
 * The client benchmark's outputs: `results/client.json` (every run) and
 * `results/client.md` (machine, load, method, medians, ratios ours/official,
 * the target verdict). Pure formatting.
 */
import { writeFileSync } from 'node:fs'
import type { PostgresSettings } from '@sluice/test-utils'
import type { LoadNote } from '../pipeline/report.js'
import { median } from '../pipeline/stats.js'
import type { Machine } from '../storage/report.js'
import { num as n } from '../report/format.js'

export type ClientName = 'ours' | 'official'
export const CLIENTS: readonly ClientName[] = ['ours', 'official']
export const CLIENT_LABEL: Record<ClientName, string> = { ours: '@sluice/client', official: '@electric-sql/client 1.5.28' }

export interface MemoryNow {
  readonly rss: number
  readonly heapUsed: number
  readonly heapTotal: number
  readonly external: number
  readonly arrayBuffers: number
}

export interface SyncRun {
  readonly rep: number
  /** 0 when this client ran first in its repetition. */
  readonly position: number
  readonly ms: number
  readonly rows: number
  readonly userMs: number
  readonly systemMs: number
  /** After loading the client, before the clock (after a forced GC). */
  readonly before: MemoryNow
  /** Kernel high-water mark (VmHWM) over the timed window; null if it could not be reset. */
  readonly peakRss: number | null
  readonly peakRssSampled: number
  readonly peakHeapUsed: number
  /** After a forced GC with the Shape alive: what the materialised rows keep. */
  readonly retained: MemoryNow
  readonly rowsSha256: string
  readonly cpuPressurePercent: number | null
  readonly loadavg1: number
}

export interface SyncMedian {
  readonly ms: number
  readonly cpuMs: number
  readonly peakRss: number
  readonly peakHeapUsed: number
  readonly retainedHeapUsed: number
  readonly retainedRss: number
}

export interface SyncRow {
  readonly rows: number
  readonly table: string
  /** Bytes of the shape's response bodies, summed over its requests (from the priming sync). */
  readonly bodyBytes: number
  readonly requests: number
  readonly runs: Record<ClientName, SyncRun[]>
  readonly median: Record<ClientName, SyncMedian>
  /** The rows both clients materialised were equal (same digest in every run). */
  readonly rowsEqual: boolean
}

export interface WriterResult {
  readonly fromSeq: number
  readonly endSeq: number
  readonly transactions: number
  readonly rows: number
  readonly wallMs: number
  readonly targetRowsPerSec: number
  readonly achievedRowsPerSec: number
  readonly meanTxMs: number
  readonly maxTxMs: number
  readonly maxLateMs: number
}

export interface LiveRun {
  readonly rep: number
  readonly position: number
  readonly where: string
  readonly syncMs: number
  readonly writer: WriterResult
  /** WAL bytes Sluice had not yet confirmed when the writer stopped (its backlog; the same for both clients only if the server kept up). */
  readonly serverBacklogBytes: number
  /** Time waited before the run for Sluice to work off the previous run's backlog. */
  readonly catchUpWaitMs: number
  readonly transactions: number
  /** Transactions whose lag was measured. */
  readonly seen: number
  readonly overtaken: number
  /** Transactions not seen by the end of the drain wait. */
  readonly missing: number
  readonly notifications: number
  readonly lagP50Ms: number
  readonly lagP95Ms: number
  readonly lagP99Ms: number
  readonly lagMaxMs: number
  readonly lagMeanMs: number
  /** From the start of the writes until the last transaction showed. */
  readonly wallMs: number
  readonly userMs: number
  readonly systemMs: number
  readonly before: MemoryNow
  readonly peakRss: number | null
  readonly peakRssSampled: number
  readonly peakHeapUsed: number
  /** The Shape's id:seq:stamp_ns equals Postgres's table after the run. */
  readonly equalsPostgres: boolean
  readonly rowsSha256: string
  readonly cpuPressurePercent: number | null
  readonly loadavg1: number
}

export interface LiveMedian {
  readonly lagP50Ms: number
  readonly lagP99Ms: number
  readonly lagMaxMs: number
  /** Client CPU time per second of the window, in percent of one core. */
  readonly cpuPercent: number
  readonly peakRss: number
  readonly peakHeapUsed: number
  readonly achievedRowsPerSec: number
}

export interface LiveRow {
  readonly rows: number
  readonly runs: Record<ClientName, LiveRun[]>
  readonly median: Record<ClientName, LiveMedian>
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
  readonly sync: readonly SyncRow[]
  readonly live: readonly LiveRow[]
  readonly notes?: readonly string[]
}

export function syncMedian(runs: readonly SyncRun[]): SyncMedian {
  return {
    ms: median(runs.map((r) => r.ms)),
    cpuMs: median(runs.map((r) => r.userMs + r.systemMs)),
    peakRss: median(runs.map((r) => r.peakRss ?? r.peakRssSampled)),
    peakHeapUsed: median(runs.map((r) => r.peakHeapUsed)),
    retainedHeapUsed: median(runs.map((r) => r.retained.heapUsed)),
    retainedRss: median(runs.map((r) => r.retained.rss)),
  }
}

export function liveMedian(runs: readonly LiveRun[]): LiveMedian {
  return {
    lagP50Ms: median(runs.map((r) => r.lagP50Ms)),
    lagP99Ms: median(runs.map((r) => r.lagP99Ms)),
    lagMaxMs: median(runs.map((r) => r.lagMaxMs)),
    cpuPercent: median(runs.map((r) => ((r.userMs + r.systemMs) / r.wallMs) * 100)),
    peakRss: median(runs.map((r) => r.peakRss ?? r.peakRssSampled)),
    peakHeapUsed: median(runs.map((r) => r.peakHeapUsed)),
    achievedRowsPerSec: median(runs.map((r) => r.writer.achievedRowsPerSec)),
  }
}

function mib(bytes: number | null): string {
  return bytes === null ? '-' : n(bytes / 2 ** 20, 0)
}

function ratio(ours: number, official: number): string {
  return Number.isFinite(ours / official) ? `${(ours / official).toFixed(2)}x` : '-'
}

/** Lines of the verdict: ours vs official, time and memory, for each part. */
export function verdictLines(report: Report): string[] {
  const lines: string[] = []
  for (const row of report.sync) {
    const o = row.median.ours
    const e = row.median.official
    const fast = o.ms <= e.ms
    const light = o.peakRss <= e.peakRss
    lines.push(
      `Sync ${n(row.rows)} rows: ours ${n(o.ms)} ms vs official ${n(e.ms)} ms (time ${ratio(o.ms, e.ms)}), peak RSS ${mib(o.peakRss)} vs ${mib(e.peakRss)} MiB (${ratio(o.peakRss, e.peakRss)}), ` +
        `retained heap ${mib(o.retainedHeapUsed)} vs ${mib(e.retainedHeapUsed)} MiB (${ratio(o.retainedHeapUsed, e.retainedHeapUsed)}): ` +
        `${fast && light ? 'target met' : `target NOT met (${[fast ? '' : 'slower', light ? '' : 'more memory'].filter(Boolean).join(', ')})`}.`,
    )
  }
  for (const row of report.live) {
    const o = row.median.ours
    const e = row.median.official
    const fast = o.lagP50Ms <= e.lagP50Ms && o.cpuPercent <= e.cpuPercent
    const light = o.peakRss <= e.peakRss
    lines.push(
      `Live, ${n(row.rows)}-row Shape at ${n(o.achievedRowsPerSec)} / ${n(e.achievedRowsPerSec)} updates/s achieved: lag p50 ${n(o.lagP50Ms, 1)} vs ${n(e.lagP50Ms, 1)} ms (${ratio(o.lagP50Ms, e.lagP50Ms)}), ` +
        `p99 ${n(o.lagP99Ms, 1)} vs ${n(e.lagP99Ms, 1)} ms, client CPU ${n(o.cpuPercent)}% vs ${n(e.cpuPercent)}% of a core (${ratio(o.cpuPercent, e.cpuPercent)}), ` +
        `peak RSS ${mib(o.peakRss)} vs ${mib(e.peakRss)} MiB (${ratio(o.peakRss, e.peakRss)}): ` +
        `${fast && light ? 'target met' : `target NOT met (${[fast ? '' : 'slower', light ? '' : 'more memory'].filter(Boolean).join(', ')})`}.`,
    )
  }
  return lines
}

export function markdown(report: Report): string {
  const m = report.machine
  const out: string[] = []
  out.push(`# Client benchmark${report.quick ? ' (QUICK smoke run: small counts, not figures)' : report.partial ? ' (partial run)' : ''}`)
  out.push('')
  out.push(
    'Our `Shape` (`@sluice/client`) against the official one (`@electric-sql/client` 1.5.28), in the same run against the same Sluice server, ' +
      'each measurement in a fresh Node process of its own. Produced by `bench/client/run.ts` (`npm run bench:client`).',
  )
  out.push('')
  out.push(`Machine: ${m.nproc} cores (${m.cpu}), ${m.memoryGiB} GiB, ${m.os}, Node ${m.node}; Postgres ${report.postgres.version}; ${m.date}. Run took ${n(report.runSeconds)} s.`)
  out.push('')
  out.push(
    '**The machine is shared and noisy**: other work ran on the same 2 cores during the run. Load averages (1, 5, 15 min): ' +
      report.loads.map((l) => `${l.label} ${l.loadavg.join(' / ')}`).join('; ') +
      '. Each run shows its CPU pressure (Linux PSI: share of the time some task waited for a CPU) and 1-min load; read the figures with them.',
  )
  out.push('')
  out.push('## Verdict (target: at least as fast as the official client with no more memory)')
  out.push('')
  for (const line of verdictLines(report)) out.push(`- ${line}`)
  out.push('')
  if (report.sync.length > 0) {
    out.push('## Sync and materialise')
    out.push('')
    out.push(
      'Clock: from creating the stream and Shape to the first up-to-date, with the Map holding every row (checked). The shape already exists on the server and was synced ' +
        'once before any timing (a priming sync by plain fetch), so both clients read the same cached, warm logs: this is client work plus HTTP, not the server snapshot. ' +
        'Peak RSS is the kernel high-water mark (VmHWM) over the timed window, reset at its start; it includes Node and the loaded client (the "before" column). ' +
        'Peak heap is heapUsed sampled every 20 ms (a long synchronous task can hide the true peak). Retained: heapUsed after a forced GC with the Shape still alive.',
    )
    out.push('')
    out.push('| rows | body MB (requests) | client | time ms (median) | CPU ms | peak RSS MiB | RSS before MiB | peak heap MiB | retained heap MiB | time ours/official | peak RSS ours/official |')
    out.push('|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|')
    for (const row of report.sync) {
      for (const c of CLIENTS) {
        const md = row.median[c]
        const before = median(row.runs[c].map((r) => r.before.rss))
        out.push(
          `| ${n(row.rows)} | ${n(row.bodyBytes / 1e6, 1)} (${row.requests}) | ${CLIENT_LABEL[c]} | ${n(md.ms)} | ${n(md.cpuMs)} | ${mib(md.peakRss)} | ${mib(before)} | ${mib(md.peakHeapUsed)} | ${mib(md.retainedHeapUsed)} | ` +
            `${c === 'ours' ? ratio(row.median.ours.ms, row.median.official.ms) : ''} | ${c === 'ours' ? ratio(row.median.ours.peakRss, row.median.official.peakRss) : ''} |`,
        )
      }
    }
    out.push('')
    out.push('Every run (rep, position in its repetition 1st/2nd):')
    out.push('')
    out.push('| rows | client | rep | pos | ms | CPU ms | peak RSS MiB | peak heap MiB | retained heap MiB | CPU pressure % | load 1m |')
    out.push('|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|')
    for (const row of report.sync) {
      for (const c of CLIENTS) {
        for (const r of row.runs[c]) {
          out.push(
            `| ${n(row.rows)} | ${c} | ${r.rep + 1} | ${r.position + 1} | ${n(r.ms)} | ${n(r.userMs + r.systemMs)} | ${mib(r.peakRss ?? r.peakRssSampled)} | ${mib(r.peakHeapUsed)} | ${mib(r.retained.heapUsed)} | ${n(r.cpuPressurePercent ?? Number.NaN)} | ${n(r.loadavg1, 2)} |`,
          )
        }
      }
    }
    out.push('')
    out.push(`Rows equal between the clients (sha256 of every row, sorted by key): ${report.sync.map((r) => `${n(r.rows)}: ${r.rowsEqual ? 'yes' : 'NO'}`).join(', ')}.`)
    out.push('')
  }
  if (report.live.length > 0) {
    const s = report.settings
    out.push('## Live updates')
    out.push('')
    out.push(
      `A ${n(Number(s.liveRows))}-row Shape is synced (untimed; a new shape per run, \`where id > -<run>\`, so every client starts from a 100k-row snapshot rather than a log grown by earlier runs), ` +
        `then a writer process commits ${n(Number(s.liveRate))} row updates/s as ${n(Number(s.liveRate) / Number(s.liveRowsPerTx))} transactions/s of ${n(Number(s.liveRowsPerTx))} rows ` +
        `(${n(Number(s.writerConnections))} connections) for ${n(Number(s.liveSeconds))} s. Each transaction stamps its rows with CLOCK_MONOTONIC ns taken just before it is sent; ` +
        'at each Shape notification the client process checks which transactions its rows now show and records now minus stamp (so lag includes the commit, replication, the server, HTTP long-poll and the Shape). ' +
        'CPU is the client process\'s user+system time over the window divided by its wall time; peak RSS is VmHWM reset at the start of the window. ' +
        'After the run, the Shape\'s id:seq:stamp_ns of every row is compared with Postgres. Before each run the orchestrator waits for Sluice\'s replication slot to be caught up, ' +
        'and records its backlog when the writer stops: lag the server causes falls on whichever client runs then.',
    )
    out.push('')
    out.push('| rows | client | achieved updates/s | lag p50 ms | lag p99 ms | lag max ms | client CPU % of a core | peak RSS MiB | peak heap MiB | lag ours/official | CPU ours/official | RSS ours/official |')
    out.push('|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|')
    for (const row of report.live) {
      for (const c of CLIENTS) {
        const md = row.median[c]
        const o = row.median.ours
        const e = row.median.official
        out.push(
          `| ${n(row.rows)} | ${CLIENT_LABEL[c]} | ${n(md.achievedRowsPerSec)} | ${n(md.lagP50Ms, 1)} | ${n(md.lagP99Ms, 1)} | ${n(md.lagMaxMs, 1)} | ${n(md.cpuPercent)} | ${mib(md.peakRss)} | ${mib(md.peakHeapUsed)} | ` +
            `${c === 'ours' ? ratio(o.lagP50Ms, e.lagP50Ms) : ''} | ${c === 'ours' ? ratio(o.cpuPercent, e.cpuPercent) : ''} | ${c === 'ours' ? ratio(o.peakRss, e.peakRss) : ''} |`,
        )
      }
    }
    out.push('')
    out.push('Every run:')
    out.push('')
    out.push('| client | rep | pos | writer rows/s | tx max ms | server backlog MB at writer end | tx seen / written | overtaken | missing | lag p50 | p95 | p99 | max | CPU ms | wall s | peak RSS MiB | equals Postgres | CPU pressure % | load 1m |')
    out.push('|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|')
    for (const row of report.live) {
      for (const c of CLIENTS) {
        for (const r of row.runs[c]) {
          out.push(
            `| ${c} | ${r.rep + 1} | ${r.position + 1} | ${n(r.writer.achievedRowsPerSec)} | ${n(r.writer.maxTxMs)} | ${n(r.serverBacklogBytes / 1e6, 1)} | ${n(r.seen)} / ${n(r.transactions)} | ${r.overtaken} | ${r.missing} | ${n(r.lagP50Ms, 1)} | ${n(r.lagP95Ms, 1)} | ${n(r.lagP99Ms, 1)} | ${n(r.lagMaxMs, 1)} | ` +
              `${n(r.userMs + r.systemMs)} | ${n(r.wallMs / 1000, 1)} | ${mib(r.peakRss ?? r.peakRssSampled)} | ${r.equalsPostgres ? 'yes' : 'NO'} | ${n(r.cpuPressurePercent ?? Number.NaN)} | ${n(r.loadavg1, 2)} |`,
          )
        }
      }
    }
    out.push('')
  }
  out.push('## Settings')
  out.push('')
  out.push('```json')
  out.push(JSON.stringify({ settings: report.settings, sluiceFlags: report.sluiceFlags }, null, 2))
  out.push('```')
  if (report.notes !== undefined && report.notes.length > 0) {
    out.push('')
    out.push('## Notes')
    out.push('')
    for (const note of report.notes) out.push(`- ${note}`)
  }
  out.push('')
  return out.join('\n')
}

export function writeReport(report: Report, basePath: string): void {
  writeFileSync(`${basePath}.json`, `${JSON.stringify(report, null, 2)}\n`)
  writeFileSync(`${basePath}.md`, markdown(report))
}
