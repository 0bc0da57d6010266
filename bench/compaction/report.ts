/**
 * The compaction benchmark's results file (`results/compaction.json`), as
 * `run.ts` writes it and the combined report reads it, its markdown, and the
 * issue's target.
 */
import { writeFileSync } from 'node:fs'
import type { LoadNote } from '../pipeline/report.js'
import { median } from '../pipeline/stats.js'
import type { Machine } from '../storage/report.js'

/** After compaction a new client downloads at most this many times the bytes of the shape's current rows. */
export const TARGET_RATIO = 2

/** One new client's initial sync: `offset=-1` to the first up-to-date. */
export interface Sync {
  readonly bytes: number
  readonly ms: number
  readonly requests: number
}

export interface Side {
  readonly syncs: readonly Sync[]
  /** Bytes of the shape's log files on disk (after compaction: the compacted generation, which stays once the old log's grace period ends). */
  readonly diskBytes: number
}

export interface Report {
  readonly date: string
  readonly machine: Machine
  readonly quick: boolean
  readonly partial: boolean
  readonly rows: number
  readonly updates: number
  /** A fresh shape over the same rows (its snapshot): the size of the current rows as the protocol carries them. */
  readonly currentRows: Side
  readonly before: Side
  readonly after: Side
  /** The server's own figures for the compaction. */
  readonly compaction: { readonly durationMs: number; readonly reclaimedBytes: number; readonly peakKeys: number; readonly startToDoneMs: number }
  /** Routing the updates: last update committed to the shape's head reaching it. */
  readonly catchUpMs: number
  readonly runSeconds: number
  /** Share of the run's wall time some task waited for a CPU (PSI), in percent; null without PSI. Absent from the first full run's file. */
  readonly cpuPressurePercent?: number | null
  readonly loads: readonly LoadNote[]
}

export const medianBytes = (side: Side): number => median(side.syncs.map((s) => s.bytes))
export const medianMs = (side: Side): number => median(side.syncs.map((s) => s.ms))

export function targetMet(report: Report): boolean {
  return medianBytes(report.after) <= TARGET_RATIO * medianBytes(report.currentRows)
}

export function markdown(report: Report): string {
  const mb = (b: number): string => `${(b / 1024 / 1024).toFixed(2)} MiB`
  const kb = (b: number): string => `${(b / 1024).toFixed(1)} KiB`
  const size = (b: number): string => (b >= 1024 * 1024 ? mb(b) : kb(b))
  const row = (name: string, side: Side): string =>
    `| ${name} | ${size(medianBytes(side))} | ${medianMs(side).toFixed(0)} ms | ${median(side.syncs.map((s) => s.requests))} | ${size(side.diskBytes)} | ${(medianBytes(side) / medianBytes(report.currentRows)).toFixed(2)}x |`
  const lines = [
    `# Log compaction${report.quick ? ' (QUICK)' : report.partial ? ' (partial run)' : ''}`,
    '',
    `${report.rows.toLocaleString('en')} rows, updated ${report.updates.toLocaleString('en')} times; a new client's initial sync (median of ${report.after.syncs.length}).`,
    '',
    '| shape | sync bytes | sync time | requests | disk | bytes / current rows |',
    '|---|---:|---:|---:|---:|---:|',
    row('before compaction', report.before),
    row('after compaction', report.after),
    row('current rows (fresh shape)', report.currentRows),
    '',
    `Target: after compaction at most ${TARGET_RATIO}x the current rows: ${(medianBytes(report.after) / medianBytes(report.currentRows)).toFixed(2)}x, ${targetMet(report) ? 'met' : 'missed'}.`,
    `Compaction took ${report.compaction.durationMs.toFixed(0)} ms (server start to done ${report.compaction.startToDoneMs.toFixed(0)} ms), held ${report.compaction.peakKeys} keys, reclaimed ${size(report.compaction.reclaimedBytes)}; routing the updates took ${report.catchUpMs.toFixed(0)} ms to catch up.`,
    `Load average: ${report.loads.map((l) => `${l.label} ${l.loadavg.join('/')}`).join('; ')} (${report.machine.nproc} cores).`,
  ]
  return `${lines.join('\n')}\n`
}

export function writeReport(report: Report, stem: string): void {
  writeFileSync(`${stem}.json`, `${JSON.stringify(report, null, 2)}\n`)
  writeFileSync(`${stem}.md`, markdown(report))
}
