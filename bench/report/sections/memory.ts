/** The memory benchmark's section: one huge transaction through the server, its resident memory and the time to a live client. */
import type { Report, Run } from '../../memory/report.js'
import { TARGET } from '../../memory/report.js'
import type { ChartSpec, Point } from '../chart.js'
import { machineLines, median, num, percent, plural, pressureLine, ratio, spread } from '../format.js'
import type { ReportSection, SectionContent, Table } from '../section.js'
import type { ResultsFile } from '../results-file.js'

/** BENCH_AFTER_S's default: a full run (none of the BENCH_ variables set) always waits this long. */
const DEFAULT_AFTER_S = 60

function mibs(x: number): string {
  return Number.isFinite(x) ? `${num(x)} MiB` : '-'
}

function seconds(x: number): string {
  return Number.isFinite(x) ? `${num(x, 1)} s` : '-'
}

function verdict(met: boolean): string {
  return met ? 'met' : '**missed**'
}

function render(report: Report, kind: ResultsFile['kind']): SectionContent {
  const runs = report.runs
  const m = (pick: (r: Run) => number) => median(runs.map(pick))
  const range = (pick: (r: Run) => number, format: (x: number) => string) => spread(runs.map(pick), format)
  // Files written before `afterS` was recorded: a full run used the default, any other run may not have.
  const afterS = report.afterS ?? (kind === 'full' ? DEFAULT_AFTER_S : undefined)
  const after = afterS === undefined ? 'after the wait (BENCH_AFTER_S)' : `${num(afterS)} s after`
  const pre = m((r) => r.preMiB)
  const peak = m((r) => r.peakMiB)
  const afterCommit = m((r) => r.afterCommitMiB)
  const afterLast = m((r) => r.afterLastRowMiB)
  const lastRow = m((r) => r.lastRowS)
  const ceiling = m((r) => r.ceilingS)
  const over = (x: number) => percent((x / pre - 1) * 100)
  const figures: Table = {
    title: `One ${num(report.rows)}-row transaction: server RSS and commit to the client's last row`,
    headers: ['figure', 'median', 'runs (min – max)', 'target', 'verdict'],
    align: ['l', 'r', 'r', 'l', 'l'],
    rows: runs.length === 0 ? [] : [
      ['RSS before the transaction', mibs(pre), range((r) => r.preMiB, mibs), '', ''],
      ['peak RSS', `${mibs(peak)} (${ratio(peak / pre)} before)`, range((r) => r.peakMiB, mibs), `< ${num(TARGET.peakMiB)} MiB`, verdict(peak < TARGET.peakMiB)],
      [`RSS ${after} the commit`, `${mibs(afterCommit)} (${over(afterCommit)} over before)`, range((r) => r.afterCommitMiB, mibs), `within ${percent((TARGET.afterRatio - 1) * 100)} of before`, verdict(afterCommit <= pre * TARGET.afterRatio)],
      [`RSS ${after} the last row`, `${mibs(afterLast)} (${over(afterLast)} over before)`, range((r) => r.afterLastRowMiB, mibs), '', ''],
      ['commit to the last row at the client', seconds(lastRow), range((r) => r.lastRowS, seconds), `< ${num(TARGET.lastRowS)} s`, verdict(lastRow < TARGET.lastRowS)],
      ['ceiling: pg_recvlogical receives it', `${seconds(ceiling)} (Sluice ${ratio(lastRow / ceiling)})`, range((r) => r.ceilingS, seconds), '', ''],
    ],
    note: 'Medians of the runs; the peak is the highest 100 ms sample of VmRSS from the INSERT on, "before" the median of the 2 s before it. The ceiling is Postgres alone: pg_recvlogical with the options Sluice asks for, to /dev/null, timed to its slot confirming the commit.',
  }
  const mb = (bytes: number | undefined) => (bytes === undefined || !Number.isFinite(bytes) ? '-' : num(bytes / 2 ** 20))
  const everyRun: Table = {
    title: 'Every run',
    headers: ['run', 'WAL', 'INSERT took', 'before', 'peak (s after commit)', 'V8 heap used / external at peak', `${after} commit`, `${after} last row`, 'malloc heap, before → end', 'last row', 'ceiling', 'load (1, 5, 15 min) at the end'],
    align: ['r', 'r', 'r', 'r', 'r', 'r', 'r', 'r', 'r', 'r', 'r', 'l'],
    rows: runs.map((r) => [
      num(r.rep),
      `${num(r.walBytes / 1e9, 2)} GB`,
      seconds(r.commitS),
      mibs(r.preMiB),
      `${mibs(r.peakMiB)} (${num(r.peakAtS, 1)})`,
      `${mb(r.atPeak?.heapUsed)} / ${mb(r.atPeak?.external)} MiB`,
      mibs(r.afterCommitMiB),
      mibs(r.afterLastRowMiB),
      `${num(r.start.mallocHeapMiB)} → ${num(r.end.mallocHeapMiB)} MiB`,
      seconds(r.lastRowS),
      seconds(r.ceilingS),
      r.load,
    ]),
    note: "The malloc heap is the resident part of the process's `[heap]` mapping (from /proc/<pid>/smaps): memory malloc keeps after a peak shows there.",
  }
  const charts: ChartSpec[] = []
  const withTimeline = runs.filter((r) => r.timeline.length > 0)
  if (withTimeline.length > 0) {
    const name = (r: Run) => `run ${r.rep}`
    const target = `target: peak below ${num(TARGET.peakMiB)} MiB`
    const points: Point[] = withTimeline.flatMap((r) => r.timeline.map(([t, rss]) => ({ series: name(r), x: t, y: rss })))
    const xs = points.map((p) => p.x)
    charts.push({
      id: 'memory-rss',
      title: `Server RSS through one ${num(report.rows)}-row transaction`,
      x: { title: 'seconds since the commit (the INSERT runs before 0)', continuous: true },
      y: { title: 'RSS, MiB (sampled once a second)' },
      series: [...withTimeline.map((r) => ({ name: name(r) })), { name: target, dashed: true }],
      points: [...points, { series: target, x: Math.min(...xs), y: TARGET.peakMiB }, { series: target, x: Math.max(...xs), y: TARGET.peakMiB }],
    })
  }
  const headline: string[] = []
  if (runs.length > 0) {
    headline.push(
      `One ${num(report.rows)}-row transaction (${num(m((r) => r.walBytes) / 1e9, 2)} GB of WAL) through \`sluice start ${report.flags.join(' ')}\`: peak server RSS ${mibs(peak)} (target < ${num(TARGET.peakMiB)} MiB ${peak < TARGET.peakMiB ? 'met' : 'missed'}; ${ratio(peak / pre)} the ${mibs(pre)} before it); ${after} the commit ${mibs(afterCommit)}, ${over(afterCommit)} over before (target within ${percent((TARGET.afterRatio - 1) * 100)} ${afterCommit <= pre * TARGET.afterRatio ? 'met' : 'missed'}).`,
      `Commit to the last of those rows at a live long-polling client: ${seconds(lastRow)} (target < ${num(TARGET.lastRowS)} s ${lastRow < TARGET.lastRowS ? 'met' : 'missed'}), ${ratio(lastRow / ceiling)} the ${seconds(ceiling)} pg_recvlogical takes to receive the same transaction to /dev/null.`,
    )
  }
  return {
    measures:
      "What one huge transaction costs the `sluice start` process's memory, and how long its rows take to reach a live client: the server's resident set (VmRSS, every 100 ms) before, at its peak and after the transaction, with one shape on the table and one client long-polling it, and the time from the commit until that client has the last row, next to Postgres's own part of that time (pg_recvlogical).",
    doesNotMeasure: 'Many shapes or many clients, transactions spread over time, memory of Postgres or of the client, other machines (Postgres, the server and the client share the same cores).',
    method: [
      `Per run: a throwaway Postgres (the pipeline benchmark's settings: fsync off, \`logical_decoding_work_mem\` 64MB), \`sluice start ${report.flags.join(' ')}\`${report.nodeOptions === undefined ? '' : ` (NODE_OPTIONS=${report.nodeOptions})`} in its own process on a fresh storage directory, one shape on the whole table \`big\`, one client in the benchmark process that catches up and then long-polls it, counting inserts.`,
      `After 5 s idle, one \`INSERT … SELECT generate_series\` of ${num(report.rows)} rows; the commit is the moment the INSERT returns, the last row the moment the client's count reaches ${num(report.rows)}. RSS is sampled until ${afterS === undefined ? 'the wait (BENCH_AFTER_S)' : `${num(afterS)} s`} after the last row; V8's heap from /metrics once a second.`,
      'Ceiling, after the server stopped: `pg_recvlogical` (pgoutput protocol 2, streaming on, as Sluice asks for it) to /dev/null on a new slot receives the same transaction on the emptied table, timed from the commit to the slot confirming it (status every second, so up to a second late).',
      `${plural(runs.length, 'run')}, each on a new cluster; the figures are medians of the runs.`,
    ],
    machine: report.machine === undefined ? ['machine: not recorded in this results file (its own report names it)'] : machineLines(report.machine),
    load: [
      runs.length === 0 ? 'load average: not recorded' : `load average (1, 5, 15 min) at the end of each run: ${runs.map((r) => `${r.load} (run ${r.rep})`).join('; ')}`,
      pressureLine([]),
    ],
    tables: [figures, everyRun].filter((t) => t.rows.length > 0),
    charts,
    headline,
  }
}

export const memorySection: ReportSection = {
  id: 'memory',
  title: 'Memory: one huge transaction through the server',
  stem: 'memory',
  render: (file) => render(file.data as Report, file.kind),
}
