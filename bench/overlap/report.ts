/**
 * The overlap benchmark's outputs: `results/overlap.json` (every run, every
 * write) and `results/overlap.md`, which is the benchmark's section of the
 * combined report (`report/sections/overlap.ts`) rendered on its own, so the
 * two never disagree.
 */
import { writeFileSync } from 'node:fs'
import type { PostgresSettings } from '@sluice/test-utils'
import { markdownTable } from '../report/markdown.js'
import type { ResultsKind } from '../report/results-file.js'
import { overlapContent } from '../report/sections/overlap.js'
import type { LoadNote } from '../pipeline/report.js'
import type { Machine } from '../storage/report.js'

/** `independent`: one client per shape, spread over processes; `one`: one process following every shape. */
export type FanoutMode = 'independent' | 'one'

/** One write, as the clients saw it: latencies from just before the UPDATE is sent to the whole body read. */
export interface WriteFigures {
  /** Shapes (clients) that had it before the wait ended. */
  readonly received: number
  readonly firstMs: number
  readonly p50Ms: number
  /** The last client to have it: when every client was up to date. */
  readonly lastMs: number
  /** The UPDATE's round trip, commit included. */
  readonly updateMs: number
}

export interface FanoutRun {
  readonly shapes: number
  readonly mode: FanoutMode
  readonly processes: number
  /** Every client from offset=-1 to up-to-date; creates the shapes new since the previous count. */
  readonly handshakeMs: number
  readonly handshakePeakRssMiB: number
  /** Server RSS with every client parked, before the writes. */
  readonly parkedRssMiB: number
  readonly writesPeakRssMiB: number
  readonly writes: readonly WriteFigures[]
  /** Shape-writes never received (0 unless something was lost or too slow). */
  readonly lost: number
  readonly firstP50Ms: number
  readonly firstP99Ms: number
  readonly lastP50Ms: number
  readonly lastP99Ms: number
  readonly lastMaxMs: number
  /** Server CPU time over the writes, in percent of one core of their wall time. */
  readonly serverCpuPercent: number | null
  readonly serverCpuMsPerWrite: number | null
  /** The client processes' CPU over the writes, together, in percent of one core. */
  readonly clientCpuPercent: number
  readonly cpuPressurePercent: number | null
  readonly loadavg1: number
  readonly clients: readonly Record<string, unknown>[]
}

export interface CreateRun {
  readonly count: number
  readonly rep: number
  /** Requests that reached up-to-date. */
  readonly completed: number
  /** From the burst to the last snapshot at its client. */
  readonly totalMs: number
  /** Per request, from the burst to its up-to-date (retries included). */
  readonly p50Ms: number
  readonly p99Ms: number
  readonly maxMs: number
  readonly requests: number
  readonly retries503: number
  readonly networkErrors: number
  readonly otherStatus: number
  readonly failed: number
  readonly statuses: Record<string, number>
  readonly startRssMiB: number
  readonly peakRssMiB: number
  /** The most client backends Postgres had during the burst (the replication walsender apart). */
  readonly pgClientConnections: number
  readonly pgWalsenders: number
  readonly serverCpuPercent: number | null
  readonly cpuPressurePercent: number | null
  readonly loadavg1: number
  /** The same count of plain SELECTs on a pool, straight to Postgres. */
  readonly ceiling: { readonly totalMs: number; readonly p50Ms: number; readonly p99Ms: number; readonly maxMs: number; readonly connections: number }
}

export interface Report {
  readonly quick: boolean
  readonly partial: boolean
  readonly machine: Machine & { readonly fdLimit: string }
  readonly postgresSettings: PostgresSettings
  readonly settings: {
    readonly fanoutShapes: readonly number[]
    readonly writes: number
    readonly clientProcesses: number
    readonly gapMs: number
    readonly handshakeConcurrency: number
    readonly createCounts: readonly number[]
    readonly createReps: number
    readonly selectConnections: number
    readonly [key: string]: unknown
  }
  readonly sluiceFlags: readonly string[]
  readonly runSeconds: number
  readonly loads: readonly LoadNote[]
  readonly fanout: readonly FanoutRun[]
  readonly create: readonly CreateRun[]
  /** Observations written after a run, by whoever read it (`overlap/render.ts` re-renders the markdown). */
  readonly notes?: readonly string[]
}

export function writeReport(report: Report, basePath: string, kind: ResultsKind): void {
  writeFileSync(`${basePath}.json`, `${JSON.stringify(report, null, 2)}\n`)
  const c = overlapContent(report, kind)
  const out = [
    `# Overlapping shapes and concurrent shape creation${kind === 'full' ? '' : ` (${kind} run)`}`,
    '',
    `**Measures:** ${c.measures}`,
    '',
    `**Does not measure:** ${c.doesNotMeasure}`,
    '',
    '## Method',
    '',
    ...c.method.map((m) => `- ${m}`),
    '',
    '## Machine and load',
    '',
    ...[...c.machine, ...c.load].map((m) => `- ${m}`),
    '',
    '## Headline',
    '',
    ...c.headline.map((h) => `- ${h}`),
    '',
  ]
  for (const t of c.tables) {
    out.push(`## ${t.title}`, '', ...markdownTable(t), '')
    if (t.note !== undefined) out.push(t.note, '')
  }
  writeFileSync(`${basePath}.md`, out.join('\n'))
}

export function closingLines(report: Report): string[] {
  return [...overlapContent(report, report.quick ? 'quick' : report.partial ? 'partial' : 'full').headline]
}
