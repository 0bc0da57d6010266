/** The lifecycle benchmark's section: a server's RSS and disk with 20,000 idle shapes, and after they expired. */
import { type Phase, type Report, TARGET, bytesPerIdleShape, phase } from '../../lifecycle/report.js'
import type { ChartSpec } from '../chart.js'
import { machineLines, mib, num, pressureLine, ratio } from '../format.js'
import type { ReportSection, SectionContent, Table } from '../section.js'

const kib = (bytes: number): string => `${num(bytes / 1024, 1)} KiB`

function render(report: Report): SectionContent {
  const base = phase(report, 'baseline')
  const full = phase(report, 'shapes')
  const after = phase(report, 'expired')
  const perShape = bytesPerIdleShape(report)
  const points: Table = {
    title: 'The server at each point (median RSS of the second half of each settle window)',
    headers: ['point', 'shapes', 'RSS', 'V8 heap used', 'disk (logs/)', 'shape files', 'files', 'load (1 min)'],
    align: ['l', 'r', 'r', 'r', 'r', 'r', 'r', 'r'],
    rows: report.phases.map((p: Phase) => [p.label, num(p.shapes), mib(p.rssBytes), mib(p.heapUsedBytes), kib(p.diskBytes), kib(p.shapeFileBytes), num(p.files), num(p.load1, 1)]),
    note: 'Disk: allocated blocks of every file and directory under the store (logs/), the journal included; shape files: logs/shapes and logs/trash alone.',
  }
  const targets: Table = {
    title: 'Targets (issue 32 item 6)',
    headers: ['target', 'figure', 'verdict'],
    rows:
      base === undefined || after === undefined
        ? []
        : [
            [`RSS after expiry within 10% of the baseline`, `${mib(after.rssBytes)} / ${mib(base.rssBytes)} = ${ratio(after.rssBytes / base.rssBytes)}`, after.rssBytes / base.rssBytes <= TARGET.returnRatio ? 'met' : 'missed'],
            [`disk after expiry within 10% of the baseline`, `${kib(after.diskBytes)} / ${kib(base.diskBytes)} = ${ratio(after.diskBytes / base.diskBytes)}`, after.diskBytes / base.diskBytes <= TARGET.returnRatio ? 'met' : 'missed'],
            [`resident memory per idle shape ≤ 10 KB`, perShape === undefined ? 'n/a' : kib(perShape), perShape !== undefined && perShape <= TARGET.bytesPerIdleShape ? 'met' : 'missed'],
          ],
  }
  const chart: ChartSpec = {
    id: 'lifecycle-rss',
    title: 'Resident memory: before, with the shapes, after they expired',
    x: { title: 'point (0 baseline, 1 with the shapes, 2 expired)', continuous: true },
    y: { title: 'MiB' },
    series: [{ name: 'RSS' }, { name: 'V8 heap used', dashed: true }],
    points: report.phases.flatMap((p, i) => [
      { series: 'RSS', x: i, y: p.rssBytes / 2 ** 20 },
      { series: 'V8 heap used', x: i, y: p.heapUsedBytes / 2 ** 20 },
    ]),
  }
  const headline: string[] = []
  if (base !== undefined && full !== undefined && after !== undefined) {
    headline.push(
      `${num(report.shapes)} idle shapes: ${perShape === undefined ? 'n/a' : kib(perShape)} of RSS each (target ≤ 10 KB ${perShape !== undefined && perShape <= TARGET.bytesPerIdleShape ? 'met' : 'missed'}); once expired, RSS ${ratio(after.rssBytes / base.rssBytes)} the baseline (${mib(after.rssBytes)} vs ${mib(base.rssBytes)}) and disk ${ratio(after.diskBytes / base.diskBytes)} (target ≤ 1.10x: RSS ${after.rssBytes / base.rssBytes <= TARGET.returnRatio ? 'met' : 'missed'}, disk ${after.diskBytes / base.diskBytes <= TARGET.returnRatio ? 'met' : 'missed'}); load average ${report.phases.map((p) => num(p.load1, 1)).join(' / ')}.`,
    )
  }
  return {
    measures: `The \`sluice start\` process's resident set and V8 heap, and its store's disk use, before any shape, with ${num(report.shapes)} idle shapes (distinct where clauses \`id = n\`, one row each), and after \`--shape-ttl\` expired them all: the resident memory per idle shape and how much of it, and of the disk, expiry gives back.`,
    doesNotMeasure: 'Shapes with many rows or live clients, eviction past --max-shapes, a restart, or the time creation takes (HTTP creation speed is another item).',
    method: [
      `Shapes made over HTTP against the server process (one \`offset=-1\` GET each, ${num(report.concurrency)} at once, the creation limits off): ${num(report.createSeconds)} s, ${num(report.createPerSecond, 1)} shapes/s.`,
      `\`--shape-ttl ${num(report.ttlSeconds)}s\`, above the creation time; every shape expired ${num(report.expireSeconds)} s after the last was made.`,
      `Each point: RSS from /proc every 0.5 s for ${num(report.settleSeconds)} s (after expiry ${num(report.afterSeconds)} s; the baseline ${num(report.baselineSeconds ?? report.settleSeconds)} s), the median of the second half; the V8 heap and shape count from /metrics; disk as allocated blocks under logs/.`,
    ],
    machine: machineLines(report.machine),
    load: [`load average (1 min) at the three points: ${report.phases.map((p) => `${num(p.load1, 1)} (${p.label})`).join(', ')}`, pressureLine([])],
    tables: [points, targets].filter((t) => t.rows.length > 0),
    charts: report.phases.length === 0 ? [] : [chart],
    headline,
  }
}

export const lifecycleSection: ReportSection = {
  id: 'lifecycle',
  title: 'Lifecycle: idle shapes and expiry',
  stem: 'lifecycle',
  render: (file) => render(file.data as Report),
}
