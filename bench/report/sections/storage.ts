/** The storage micro-benchmark's section: our file engine next to SQLite, LMDB and a raw file. */
import type { EngineName } from '../../storage/engines.js'
import type { Machine, Measurement, TargetCheck, WorkloadInfo } from '../../storage/report.js'
import type { ChartSpec } from '../chart.js'
import { machineLines, ms, num, percent, pressureLine, ratio } from '../format.js'
import type { ReportSection, SectionContent, Table } from '../section.js'

/** `results/storage.json` as `storage/run.ts` writes it. */
interface StorageReport {
  readonly quick: boolean
  readonly machine: Machine
  readonly loadAverage1m: { readonly before: number; readonly after: number }
  readonly settings: { readonly chunkBytes: number; readonly appendRows: readonly number[]; readonly readChunks: readonly number[]; readonly readers: number }
  readonly durationSeconds: number
  readonly workloads: readonly WorkloadInfo[]
  readonly results: readonly Measurement[]
  readonly targets: readonly TargetCheck[]
}

const ENGINES: readonly EngineName[] = ['ours', 'sqlite', 'lmdb', 'raw']
const LABEL: Record<EngineName, string> = { ours: 'Sluice storage', sqlite: 'SQLite', lmdb: 'LMDB', raw: 'raw file (ceiling)' }

function find(report: StorageReport, workload: string, engine: EngineName): Measurement | undefined {
  return report.results.find((m) => m.workload === workload && m.engine === engine)
}

function throughputChart(report: StorageReport, id: string, title: string, xTitle: string, log: boolean, points: readonly { x: number; workload: string }[]): ChartSpec {
  return {
    id,
    title,
    x: { title: xTitle, log },
    y: { title: 'MB/s (from the mean latency; log scale)', log: true },
    series: ENGINES.map((e) => ({ name: LABEL[e], dashed: e === 'raw' })),
    points: points.flatMap((p) =>
      ENGINES.flatMap((e) => {
        const m = find(report, p.workload, e)
        return m === undefined ? [] : [{ series: LABEL[e], x: p.x, y: m.mbPerSec }]
      }),
    ),
  }
}

function render(report: StorageReport): SectionContent {
  const table: Table = {
    title: 'Appends and reads, per engine',
    headers: ['workload', 'engine', 'median', 'p99', 'mean ±95%', 'MB/s', 'Sluice vs it (throughput)', 'samples', 'CPU pressure'],
    align: ['l', 'l', 'r', 'r', 'r', 'r', 'r', 'r', 'r'],
    rows: report.workloads.flatMap((w) =>
      ENGINES.flatMap((e) => {
        const m = find(report, w.id, e)
        if (m === undefined) return []
        const ours = find(report, w.id, 'ours')
        return [
          [
            w.title,
            LABEL[e],
            ms(m.medianMs),
            ms(m.p99Ms),
            Number.isFinite(m.rmePercent) ? `±${m.rmePercent.toFixed(m.rmePercent < 10 ? 1 : 0)}%` : '-',
            num(m.mbPerSec, m.mbPerSec < 10 ? 2 : 1),
            e === 'ours' || ours === undefined ? '' : ratio(ours.opsPerSec / m.opsPerSec),
            num(m.samples),
            percent(m.cpuPressurePercent),
          ],
        ]
      }),
    ),
    note: 'Median and p99 of one operation (see the workloads in `bench/README.md`); the spread of each figure is its p99 and the 95% margin of error of its mean. "Sluice vs it" above 1 means Sluice is faster.',
  }
  const targets: Table = {
    title: 'Targets',
    headers: ['target', 'figure', 'verdict'],
    rows: report.targets.map((t) => [t.target, t.figure, t.met === undefined ? 'not measured' : t.met ? 'met' : 'missed']),
  }
  const appends = report.settings.appendRows.map((rows) => ({ x: rows, workload: `append-${rows}` }))
  const reads = report.settings.readChunks.map((chunks) => ({ x: chunks, workload: `read-${chunks}` }))
  const charts = [
    throughputChart(report, 'storage-append', 'Buffered appends: throughput', 'rows per transaction', true, appends),
    throughputChart(report, 'storage-read', 'Reads of whole chunks, one reader', 'chunks per read', false, reads),
  ].filter((c) => c.points.length > 0)
  const headline: string[] = []
  const bigRows = report.settings.appendRows.at(-1)
  const big = bigRows === undefined ? undefined : find(report, `append-${bigRows}`, 'ours')
  if (big !== undefined && bigRows !== undefined) {
    const other = (e: EngineName) => find(report, `append-${bigRows}`, e)
    const raw = other('raw')
    headline.push(
      `Appending ${num(bigRows)}-row transactions: ${num(big.mbPerSec, 0)} MB/s, ${raw ? percent((big.mbPerSec / raw.mbPerSec) * 100) : '-'} of a raw file's write throughput, ${ratio(big.opsPerSec / (other('sqlite')?.opsPerSec ?? Number.NaN))} SQLite's and ${ratio(big.opsPerSec / (other('lmdb')?.opsPerSec ?? Number.NaN))} LMDB's.`,
    )
  }
  const readChunks = report.settings.readChunks.at(-1)
  const read = readChunks === undefined ? undefined : find(report, `read-${readChunks}`, 'ours')
  const readRaw = readChunks === undefined ? undefined : find(report, `read-${readChunks}`, 'raw')
  if (read !== undefined && readRaw !== undefined) {
    headline.push(`Reading ${readChunks} whole chunks: ${num(read.mbPerSec, 0)} MB/s, ${percent((read.mbPerSec / readRaw.mbPerSec) * 100)} of raw \`pread\` (${num(readRaw.mbPerSec, 0)} MB/s).`)
  }
  return {
    measures:
      'The time to append pre-encoded change lines to one shape log and to read whole chunks of it back into memory, for four engines in one process and run: the Sluice file engine, complete SQLite and LMDB implementations of the same store contract, and a raw file (one write per transaction, `pread` of the same ranges: the ceiling).',
    doesNotMeasure: 'HTTP, sendfile, JSON encoding, replication, reads that miss the page cache, many shapes at once, recovery after a crash, other machines.',
    method: [
      'Every engine stores the same bytes (a seeded pool of change lines, the same transactions); reads are checked byte for byte against each other.',
      `Chunks of ${num(report.settings.chunkBytes / 2 ** 20)} MiB; the ${num(report.settings.readers)}-reader workloads use smaller chunks (see \`bench/README.md\`).`,
      'tinybench in interleaved rounds (each engine a short task per round, order rotating, samples pooled), so outside load falls on every engine alike; each workload first waits for the CPU pressure to settle.',
    ],
    machine: machineLines(report.machine, [`run took ${num(report.durationSeconds / 60, 1)} min`]),
    load: [
      `load average (1 min) ${report.loadAverage1m.before.toFixed(1)} before, ${report.loadAverage1m.after.toFixed(1)} after`,
      pressureLine(report.results.map((m) => m.cpuPressurePercent)),
    ],
    tables: [table, targets].filter((t) => t.rows.length > 0),
    charts,
    headline,
  }
}

export const storageSection: ReportSection = {
  id: 'storage',
  title: 'Storage engine: appends and reads',
  stem: 'storage',
  render: (file) => render(file.data as StorageReport),
}
