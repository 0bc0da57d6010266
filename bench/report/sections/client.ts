/** The client benchmark's section: our `Shape` next to the official `@electric-sql/client` one. */
import type { ClientName, Report } from '../../client/report.js'
import type { ChartSpec } from '../chart.js'
import { loadLine, machineLines, mib, ms, num, percent, pressureLine, ratio, spread } from '../format.js'
import type { ReportSection, SectionContent, Table } from '../section.js'

const LABEL: Record<ClientName, string> = { ours: 'Sluice client', official: 'official client (@electric-sql/client 1.5.28)' }
const WHO: readonly ClientName[] = ['ours', 'official']

function render(report: Report): SectionContent {
  const syncTable: Table = {
    title: 'Sync and materialise a shape (primed on the server)',
    headers: ['rows', 'client', 'time (median)', 'time runs (min – max)', 'CPU', 'peak RSS', 'retained heap', 'ours / official time', 'rows equal'],
    align: ['r', 'l', 'r', 'r', 'r', 'r', 'r', 'r', 'l'],
    rows: report.sync.flatMap((row) =>
      WHO.map((who) => [
        num(row.rows),
        LABEL[who],
        ms(row.median[who].ms),
        spread(row.runs[who].map((r) => r.ms), ms),
        ms(row.median[who].cpuMs),
        mib(row.median[who].peakRss),
        mib(row.median[who].retainedHeapUsed),
        who === 'ours' ? ratio(row.median.ours.ms / row.median.official.ms) : '',
        who === 'ours' ? (row.rowsEqual ? 'yes' : '**no**') : '',
      ]),
    ),
    note: 'Time from creating the stream to the first up-to-date with every row in the Map; CPU is the client process\'s user + system time; peak RSS is the kernel high-water mark over the window.',
  }
  const liveTable: Table = {
    title: 'Live updates: end-to-end lag of a large Shape under row updates',
    headers: ['rows', 'client', 'lag p50', 'p50 runs (min – max)', 'lag p99', 'p99 runs (min – max)', 'client CPU', 'peak RSS', 'updates/s achieved', 'ours / official p50'],
    align: ['r', 'l', 'r', 'r', 'r', 'r', 'r', 'r', 'r', 'r'],
    rows: report.live.flatMap((row) =>
      WHO.map((who) => [
        num(row.rows),
        LABEL[who],
        ms(row.median[who].lagP50Ms),
        spread(row.runs[who].map((r) => r.lagP50Ms), ms),
        ms(row.median[who].lagP99Ms),
        spread(row.runs[who].map((r) => r.lagP99Ms), ms),
        percent(row.median[who].cpuPercent),
        mib(row.median[who].peakRss),
        num(row.median[who].achievedRowsPerSec),
        who === 'ours' ? ratio(row.median.ours.lagP50Ms / row.median.official.lagP50Ms) : '',
      ]),
    ),
    note: 'Lag: from the writer sending a stamped transaction to the client seeing it in its Shape (commit, replication, server, long-poll and Shape included). Client CPU in per cent of one core.',
  }
  const charts: ChartSpec[] = []
  if (report.sync.length > 0) {
    charts.push({
      id: 'client-sync-time',
      title: 'Sync and materialise a shape: time',
      x: { title: 'rows in the shape', log: true },
      y: { title: 'seconds (median; log scale)', log: true },
      series: WHO.map((w) => ({ name: LABEL[w], dashed: w === 'official' })),
      points: report.sync.flatMap((row) => WHO.map((w) => ({ series: LABEL[w], x: row.rows, y: row.median[w].ms / 1000 }))),
    })
    charts.push({
      id: 'client-sync-memory',
      title: 'Sync and materialise a shape: peak RSS',
      x: { title: 'rows in the shape', log: true },
      y: { title: 'peak RSS, MiB (median; log scale)', log: true },
      series: WHO.map((w) => ({ name: LABEL[w], dashed: w === 'official' })),
      points: report.sync.flatMap((row) => WHO.map((w) => ({ series: LABEL[w], x: row.rows, y: row.median[w].peakRss / 2 ** 20 }))),
    })
  }
  const headline: string[] = []
  const biggest = report.sync.at(-1)
  if (biggest !== undefined) {
    headline.push(
      `Sync and materialise ${num(biggest.rows)} rows: Sluice's client ${ms(biggest.median.ours.ms)}, the official client ${ms(biggest.median.official.ms)} (${ratio(biggest.median.ours.ms / biggest.median.official.ms)} the time; peak RSS ${mib(biggest.median.ours.peakRss)} vs ${mib(biggest.median.official.peakRss)}).`,
    )
  }
  const live = report.live[0]
  if (live !== undefined) {
    headline.push(
      `A ${num(live.rows)}-row Shape under ${num(live.median.ours.achievedRowsPerSec)} row updates/s: lag p50 ${ms(live.median.ours.lagP50Ms)} vs ${ms(live.median.official.lagP50Ms)} (${ratio(live.median.ours.lagP50Ms / live.median.official.lagP50Ms)}), client CPU ${percent(live.median.ours.cpuPercent)} vs ${percent(live.median.official.cpuPercent)} of a core.`,
    )
  }
  const runs = [...report.sync.flatMap((r) => [...r.runs.ours, ...r.runs.official]), ...report.live.flatMap((r) => [...r.runs.ours, ...r.runs.official])]
  const s = report.settings
  return {
    measures:
      'Our client (`Shape` of `@sluice/client`) next to the official one (`Shape` of `@electric-sql/client`), in the same run against the same Sluice server: time, CPU and peak memory to sync and materialise large shapes, and end-to-end lag, client CPU and memory while a large Shape takes a stream of row updates.',
    doesNotMeasure: "The server's snapshot of a new shape (the shapes are primed first), browsers, SSE, an HTTP cache in front, other machines (the clients, Sluice and Postgres share the same cores).",
    method: [
      'Every client measurement runs in a fresh Node process of its own (`--expose-gc`, only the client it measures loaded, through the same tsx loader), so the memory it reports is that client\'s.',
      'Both clients must materialise the same rows: the sha256 of every row sorted by key is compared in every sync run, and after each live run the Shape equals Postgres\'s table.',
      `Live: a writer commits ${num(Number(s.liveRate ?? 0))} row updates/s (${String(s.liveRowsPerTx ?? '?')} rows a transaction) for ${String(s.liveSeconds ?? '?')} s, each transaction stamped with CLOCK_MONOTONIC; the client records now minus stamp when the transaction shows in its Shape.`,
      `${num(Number(s.reps ?? 1))} repetition(s), the client order alternating; each run first waits (up to ${String(s.quietWaitSeconds ?? '?')} s) for the CPU pressure to settle.`,
    ],
    machine: machineLines(report.machine, [`Postgres ${report.postgres.version} (fsync off); run took ${num(report.runSeconds / 60, 1)} min`]),
    load: [loadLine(report.loads), pressureLine(runs.map((r) => r.cpuPressurePercent))],
    tables: [syncTable, liveTable].filter((t) => t.rows.length > 0),
    charts,
    headline,
  }
}

export const clientSection: ReportSection = {
  id: 'client',
  title: 'Client: Sluice client vs the official client',
  stem: 'client',
  render: (file) => render(file.data as Report),
}
