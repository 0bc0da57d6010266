/** The compaction benchmark's section: a new client's initial sync and the log on disk, before and after compaction, next to the current rows. */
import type { Report, Side } from '../../compaction/report.js'
import { TARGET_RATIO, medianBytes, medianMs, targetMet } from '../../compaction/report.js'
import type { ChartSpec } from '../chart.js'
import { loadLine, machineLines, mib, ms, num, plural, pressureLine, ratio, spread } from '../format.js'
import type { ReportSection, SectionContent, Table } from '../section.js'

function render(report: Report): SectionContent {
  const current = medianBytes(report.currentRows)
  const sides: Array<[string, Side]> = [
    ['before compaction', report.before],
    ['after compaction', report.after],
    ['current rows (a fresh shape)', report.currentRows],
  ]
  const table: Table = {
    title: `A new client's initial sync of ${num(report.rows)} rows updated ${num(report.updates)} times`,
    headers: ['log', 'syncs', 'bytes (median)', 'time (median)', 'time (min – max)', 'requests', 'disk', 'bytes / current rows'],
    align: ['l', 'r', 'r', 'r', 'r', 'r', 'r', 'r'],
    rows: sides.map(([name, side]) => [
      name,
      num(side.syncs.length),
      mib(medianBytes(side)),
      ms(medianMs(side)),
      spread(side.syncs.map((s) => s.ms), ms),
      num(side.syncs[0]?.requests ?? 0),
      side.diskBytes === 0 ? '' : mib(side.diskBytes),
      ratio(medianBytes(side) / current),
    ]),
    note: "Bytes: the bodies from `offset=-1` to the first up-to-date. Disk: the shape's log files (log.dat and its indexes). Current rows: a new shape over the same rows (`where=id > 0`), whose log is its snapshot.",
  }
  const after = medianBytes(report.after) / current
  const targets: Table = {
    title: 'Target',
    headers: ['target', 'figure', 'verdict'],
    rows: [[`after compaction a new client downloads at most ${TARGET_RATIO}x the current rows`, `${ratio(after)} (${mib(medianBytes(report.after))} vs ${mib(current)})`, targetMet(report) ? 'met' : 'missed']],
  }
  const chart: ChartSpec = {
    id: 'compaction-sync',
    title: "A new client's initial sync, run by run",
    x: { title: 'run' },
    y: { title: 'milliseconds (log scale)', log: true },
    series: sides.map(([name]) => ({ name })),
    points: sides.flatMap(([name, side]) => side.syncs.map((s, i) => ({ series: name, x: i + 1, y: s.ms }))),
  }
  return {
    measures: `A shape of ${num(report.rows)} rows whose rows are updated ${num(report.updates)} times in all, served by the \`sluice start\` CLI: a new client's initial sync (bytes, time, requests) and the shape's log on disk, before compaction (--compact-ratio 0) and after (the server restarted with compaction on), next to a fresh shape over the same rows.`,
    doesNotMeasure: 'Compaction while writes continue (the crash and integration tests cover correctness there), clients resuming inside the compacted part, shapes with deletes (whose tombstones stay), other machines.',
    method: [
      `${num(report.updates)} updates of \`n = n + 1\`, ${num(Math.min(report.rows, report.updates))} rows per transaction; the shape followed until every row shows the last update (${ms(report.catchUpMs)} after the last commit).`,
      `${plural(report.after.syncs.length, 'new client')} per log, one after another, plain fetch from this process; the server in its own process.`,
      `The compaction: ${ms(report.compaction.durationMs)} by the server's metric (${ms(report.compaction.startToDoneMs)} from the restart, the first check coming after 10 s), ${num(report.compaction.peakKeys)} keys held, ${mib(report.compaction.reclaimedBytes)} reclaimed.`,
    ],
    machine: machineLines(report.machine),
    load: [loadLine(report.loads), pressureLine(report.cpuPressurePercent === undefined ? [] : [report.cpuPressurePercent])],
    tables: [table, targets],
    charts: [chart],
    headline: [
      `Compaction: a new client of ${num(report.rows)} rows updated ${num(report.updates)} times downloads ${mib(medianBytes(report.before))} before and ${mib(medianBytes(report.after))} after compaction (${ratio(medianBytes(report.after) / medianBytes(report.before))}), ${ms(medianMs(report.before))} vs ${ms(medianMs(report.after))}; ${ratio(after)} the current rows (target ≤ ${TARGET_RATIO}x: ${targetMet(report) ? 'met' : 'missed'}); disk ${mib(report.before.diskBytes)} → ${mib(report.after.diskBytes)}.`,
    ],
  }
}

export const compactionSection: ReportSection = {
  id: 'compaction',
  title: 'Compaction: what a new client downloads',
  stem: 'compaction',
  render: (file) => render(file.data as Report),
}
