/**
 * The fan-out benchmark's outputs: `results/fanout.json` (every write of every
 * cell) and `results/fanout.md` (settings, load, one table with the
 * Sluice/ceiling ratios and the targets). Pure formatting.
 */
import { writeFileSync } from 'node:fs'
import type { PostgresSettings } from '@sluice/test-utils'
import type { LoadNote } from '../pipeline/report.js'
import { quantile } from '../pipeline/stats.js'
import type { Machine } from '../storage/report.js'

export interface WriteTiming {
  readonly write: number
  /** Clients that got the write (all of them unless something was lost or late). */
  readonly received: number
  /** From the commit (ceiling: the first write to a socket) until the last client held the whole transaction. */
  readonly lastMs: number
  readonly medianClientMs: number
  readonly firstMs: number
}

export interface Summary {
  readonly lastP50Ms: number
  readonly lastP99Ms: number
  readonly lastMaxMs: number
  readonly medianClientP50Ms: number
  readonly lost: number
}

export interface SizeRow extends Summary {
  readonly rows: number
  readonly writes: readonly WriteTiming[]
  /** CPU time of the server process per second of the writes, in percent of one core. */
  readonly serverCpuPercent: number | null
  readonly serverCpuMsPerWrite: number | null
  /** Sluice's `sluice_http_log_reads_total` growth per write (the live requests' reads of the new entries and the reparks'). */
  readonly logReadsPerWrite?: number | null
  readonly cpuPressurePercent: number | null
  readonly loadavg1: number
}

/** A server's memory right after a full collection (bench/fanout/gc-on-signal.cjs). */
export interface Collected {
  readonly rssBytes: number
  readonly heapUsedBytes: number
  /** Resident bytes by mapping: glibc's main arena, anonymous (V8's pages, other arenas), the rest. */
  readonly resident?: { readonly mallocHeap: number; readonly anonymous: number; readonly other: number }
  /** Resident bytes of each V8 heap space, by name. */
  readonly v8Spaces?: Readonly<Record<string, number>>
}

export interface Cell {
  readonly kind: 'long-poll' | 'sse'
  readonly clients: number
  readonly parked: number
  readonly connectMs: number
  readonly rssBeforeBytes: number
  readonly rssParkedBytes: number
  readonly rssPeakBytes: number
  /** Deliveries that did not arrive within the wait (clients × writes − received). */
  /** (RSS with every client parked − RSS before they connected) / clients. */
  readonly rssPerParkedBytes: number
  /** Both read right after a full collection: before the clients connected, and with all of them parked. */
  readonly collectedBefore?: Collected
  readonly collectedParked?: Collected
  /** (RSS parked − RSS before) / clients, each right after a full collection. */
  readonly collectedRssPerParkedBytes?: number
  /** The same for the V8 heap in use. */
  readonly collectedHeapPerParkedBytes?: number
  readonly clientCounts: Record<string, number>
  readonly bySize: readonly SizeRow[]
}

export interface Report {
  readonly quick: boolean
  readonly partial: boolean
  readonly machine: Machine & { readonly fdLimit: string }
  readonly postgres: { readonly version: string; readonly settings: PostgresSettings }
  readonly settings: Record<string, unknown>
  readonly sluiceFlags: readonly string[]
  readonly runSeconds: number
  readonly loads: readonly LoadNote[]
  readonly cells: ReadonlyArray<{ readonly kind: 'long-poll' | 'sse'; readonly clients: number; readonly sluice: Cell; readonly ceiling: Cell | undefined }>
}

export function summarize(timings: readonly WriteTiming[], clients: number): Summary {
  const last = timings.map((t) => t.lastMs).filter((x) => Number.isFinite(x))
  return {
    lastP50Ms: quantile(last, 0.5),
    lastP99Ms: quantile(last, 0.99),
    lastMaxMs: last.length === 0 ? Number.NaN : Math.max(...last),
    medianClientP50Ms: quantile(
      timings.map((t) => t.medianClientMs).filter((x) => Number.isFinite(x)),
      0.5,
    ),
    lost: timings.reduce((a, t) => a + Math.max(0, clients - t.received), 0),
  }
}

/** The item's targets: the last of 1k clients within 50 ms and of 10k within 500 ms, at the median. */
export const TARGETS: ReadonlyArray<{ readonly clients: number; readonly ms: number }> = [
  { clients: 1_000, ms: 50 },
  { clients: 10_000, ms: 500 },
]

const f = (x: number | null | undefined, digits = 1): string => (x === null || x === undefined || !Number.isFinite(x) ? '–' : x.toFixed(digits))
const mib = (b: number): string => (b / 2 ** 20).toFixed(0)

export function closingNote(report: Report): string[] {
  const lines: string[] = []
  for (const target of TARGETS) {
    const cell = report.cells.find((c) => c.kind === 'long-poll' && c.clients === target.clients)
    if (cell === undefined) continue
    for (const size of cell.sluice.bySize) {
      const met = size.lastP50Ms <= target.ms
      const ceiling = cell.ceiling?.bySize.find((s) => s.rows === size.rows)
      lines.push(
        `target: last of ${target.clients} long-poll clients within ${target.ms} ms at the median, ${size.rows}-row transactions: ${met ? 'MET' : 'MISSED'} (${f(size.lastP50Ms)} ms, ${f(size.lastP50Ms / target.ms, 2)}x the target${ceiling === undefined ? '' : `; ceiling ${f(ceiling.lastP50Ms)} ms, Sluice/ceiling ${f(size.lastP50Ms / ceiling.lastP50Ms, 2)}x`})`,
      )
    }
  }
  for (const cell of report.cells) {
    lines.push(`memory: ${cell.clients} parked ${cell.kind} requests grew Sluice's RSS by ${f(cell.sluice.rssPerParkedBytes / 1024, 2)} KiB each${cell.ceiling === undefined ? '' : ` (ceiling ${f(cell.ceiling.rssPerParkedBytes / 1024, 2)} KiB)`}`)
    const gcRss = (c: Cell | undefined): string => f(c?.collectedRssPerParkedBytes === undefined ? undefined : c.collectedRssPerParkedBytes / 1024, 2)
    const gcHeap = (c: Cell | undefined): string => f(c?.collectedHeapPerParkedBytes === undefined ? undefined : c.collectedHeapPerParkedBytes / 1024, 2)
    lines.push(
      `memory after a full collection: ${cell.clients} parked ${cell.kind} requests, ${gcRss(cell.sluice)} KiB of RSS and ${gcHeap(cell.sluice)} KiB of heap each${cell.ceiling === undefined ? '' : ` (ceiling ${gcRss(cell.ceiling)} and ${gcHeap(cell.ceiling)} KiB)`}`,
    )
  }
  return lines
}

function perParkedAfterGc(c: Cell): string {
  if (c.collectedRssPerParkedBytes === undefined || c.collectedHeapPerParkedBytes === undefined) return '–'
  return `${f(c.collectedRssPerParkedBytes / 1024, 2)} KiB, ${f(c.collectedHeapPerParkedBytes / 1024, 2)} KiB`
}

function renderMarkdown(report: Report): string {
  const out: string[] = []
  out.push(`# Fan-out: one shape, many live clients${report.quick ? ' (QUICK)' : report.partial ? ' (partial run)' : ''}`, '')
  out.push(
    'Time from a commit (CLOCK_MONOTONIC just before COMMIT is sent; for the ceiling, its first write to a socket) until the last client holds the whole transaction, over the writes of each cell. The ceiling is a bare node:http process writing the same headers and body to the same number of parked sockets from one buffer.',
    '',
  )
  out.push(`- machine: ${report.machine.cpu} × ${report.machine.nproc}, ${report.machine.memoryGiB} GiB, ${report.machine.os}, Node ${report.machine.node}; open-file limit ${report.machine.fdLimit}`)
  out.push(`- Postgres ${report.postgres.version}; Sluice flags \`${report.sluiceFlags.join(' ')}\``)
  out.push(`- settings: \`${JSON.stringify(report.settings)}\``)
  out.push(`- load average (1, 5, 15 min): ${report.loads.map((l) => `${l.label} ${l.loadavg.join('/')}`).join('; ')}`)
  out.push(`- run took ${(report.runSeconds / 60).toFixed(1)} min`, '')
  out.push('| clients | kind | rows/tx | server | last client p50 | p99 | max | median client p50 | server CPU ms/write | RSS before → parked → peak (MiB) | RSS per parked request | after a full collection: RSS, heap per parked request | Sluice / ceiling (last p50) |')
  out.push('|---:|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|')
  for (const cell of report.cells) {
    for (const size of cell.sluice.bySize) {
      for (const who of ['sluice', 'ceiling'] as const) {
        const c = cell[who]
        if (c === undefined) continue
        const s = c.bySize.find((x) => x.rows === size.rows)
        if (s === undefined) continue
        const ceiling = cell.ceiling?.bySize.find((x) => x.rows === size.rows)
        out.push(
          `| ${cell.clients} | ${cell.kind} | ${size.rows} | ${who} | ${f(s.lastP50Ms)} ms | ${f(s.lastP99Ms)} ms | ${f(s.lastMaxMs)} ms | ${f(s.medianClientP50Ms)} ms | ${f(s.serverCpuMsPerWrite, 0)} | ${mib(c.rssBeforeBytes)} → ${mib(c.rssParkedBytes)} → ${mib(c.rssPeakBytes)} | ${f(c.rssPerParkedBytes / 1024, 2)} KiB | ${perParkedAfterGc(c)} | ${who === 'sluice' && ceiling !== undefined ? `${f(size.lastP50Ms / ceiling.lastP50Ms, 2)}x` : ''} |`,
        )
      }
    }
  }
  out.push('', ...closingNote(report).map((l) => `- ${l}`), '')
  return out.join('\n')
}

export function writeReport(report: Report, basePath: string): void {
  writeFileSync(`${basePath}.json`, `${JSON.stringify(report, null, 2)}\n`)
  writeFileSync(`${basePath}.md`, renderMarkdown(report))
}
