/** The pipeline benchmark's section: replication slot to durable shape logs, next to Postgres's own decoding. */
import type { PhaseResult, Report } from '../../pipeline/report.js'
import { keepUpVariants, targetChecks } from '../../pipeline/report.js'
import type { ChartSpec, Series } from '../chart.js'
import { compact, loadLine, machineLines, mib, ms, num, percent, pressureLine, spread } from '../format.js'
import type { ReportSection, SectionContent, Table } from '../section.js'

/** The phases whose shape sets are the indexed `col = const` ones at 1 to 100k shapes: the x axis of the chart. */
function scalingPhases(report: Report): PhaseResult[] {
  return report.throughput.filter((p) => p.table === 'bench_items' && p.sets.some((s) => s.set.startsWith('eq')))
}

function sluiceName(perTx: number): string {
  return `Sluice, ${perTx}-row transactions`
}

function ceilingName(perTx: number): string {
  return `ceiling (pg_recvlogical), ${perTx}-row`
}

function kib(bytes: number): string {
  return bytes >= 2 ** 20 ? mib(bytes) : `${num(bytes / 1024)} KiB`
}

function render(report: Report): SectionContent {
  const throughput: Table = {
    title: 'Throughput: row changes per second from the slot to durable shape logs',
    headers: ['workload', 'shapes', 'changes/s (median)', 'runs (min – max)', 'ceiling changes/s', 'ceiling runs (min – max)', 'Sluice / ceiling'],
    align: ['l', 'l', 'r', 'r', 'r', 'r', 'r'],
    rows: report.throughput.flatMap((phase) =>
      phase.sets.map((set) => [
        phase.label,
        set.title,
        compact(set.medianChangesPerSec),
        spread(set.runs.map((r) => r.changesPerSec), compact),
        compact(phase.ceiling.medianChangesPerSec),
        spread(phase.ceiling.runs.map((r) => r.changesPerSec), compact),
        percent(set.ratioToCeiling * 100, set.ratioToCeiling < 0.1 ? 1 : 0),
      ]),
    ),
    note: 'The ceiling is Postgres decoding the same WAL with the same protocol options into /dev/null (`pg_recvlogical`); each contender replays exactly the same WAL from its own slot.',
  }
  const registrations: Table = {
    title: 'Registering shapes, and the memory they hold when idle',
    headers: ['set', 'shapes', 'wall time', 'shapes/s', 'RSS after (full GC)', 'heap after'],
    align: ['l', 'r', 'r', 'r', 'r', 'r'],
    rows: report.registrations.map((r) => [r.title, num(r.count), ms(r.wallMs), num(r.shapesPerSec), mib(r.memoryAfter.rss), mib(r.memoryAfter.heapUsed)]),
    note: 'One run each: registering is timed once per set, so these figures have no spread.',
  }
  const keepUp: Table = {
    title: 'Keeping up with a saturating pgbench insert load',
    headers: ['placement', 'shapes', 'transactions/s', 'lag p50', 'lag p99', 'lag median, first third', 'lag median, last third', 'caught up after the load'],
    align: ['l', 'r', 'r', 'r', 'r', 'r', 'r', 'r'],
    rows: keepUpVariants(report).map((k) => [
      k.cores ?? 'shared',
      num(k.shapes),
      num(k.tps),
      kib(k.lagP50),
      kib(k.lagP99),
      kib(k.firstThirdMedian),
      kib(k.lastThirdMedian),
      k.caughtUpMs === null ? 'never' : ms(k.caughtUpMs),
    ]),
    note: 'Lag is WAL bytes between Postgres\'s insert position and the pipeline\'s durable position, sampled every 100 ms; one run per placement. A lag that grows from the first third to the last means the pipeline falls behind.',
  }
  const targets: Table = {
    title: 'Targets',
    headers: ['target', 'figure', 'verdict'],
    rows: targetChecks(report).map((t) => [t.target, t.figure, t.met === undefined ? 'not measured' : t.met ? 'met' : 'missed']),
  }
  const phases = scalingPhases(report)
  const series: Series[] = [
    ...phases.map((p) => ({ name: sluiceName(p.perTx) })),
    ...phases.map((p) => ({ name: ceilingName(p.perTx), dashed: true })),
  ]
  const charts: ChartSpec[] = []
  if (phases.length > 0) {
    charts.push({
      id: 'pipeline-throughput',
      title: 'Replication to durable shape logs: throughput',
      x: { title: 'shapes (each change in exactly one)', log: true },
      y: { title: 'row changes/s (median)' },
      series,
      points: phases.flatMap((p) =>
        p.sets
          .filter((s) => s.set.startsWith('eq'))
          .flatMap((s) => [
            { series: sluiceName(p.perTx), x: s.count, y: s.medianChangesPerSec },
            // The ceiling decodes the same WAL whatever the shapes: one value, drawn at every shape count for comparison.
            { series: ceilingName(p.perTx), x: s.count, y: p.ceiling.medianChangesPerSec },
          ]),
      ),
    })
  }
  const eqRegistrations = report.registrations.filter((r) => r.set.startsWith('eq'))
  if (eqRegistrations.length > 1) {
    charts.push({
      id: 'pipeline-idle-memory',
      title: 'Pipeline RSS with idle shapes',
      x: { title: 'registered shapes', log: true },
      y: { title: 'RSS after a full GC, MiB' },
      series: [{ name: 'Sluice pipeline' }],
      points: eqRegistrations.map((r) => ({ series: 'Sluice pipeline', x: r.count, y: r.memoryAfter.rss / 2 ** 20 })),
    })
  }
  const headline: string[] = []
  for (const p of phases) {
    const eq = p.sets.filter((s) => s.set.startsWith('eq'))
    const most = eq.reduce<(typeof eq)[number] | undefined>((a, b) => (a === undefined || b.count > a.count ? b : a), undefined)
    if (most === undefined) continue
    headline.push(
      `${num(most.count)} shapes, ${p.perTx}-row transactions: ${compact(most.medianChangesPerSec)} row changes/s into durable shape logs, ${percent(most.ratioToCeiling * 100)} of Postgres decoding the same WAL into /dev/null (${compact(p.ceiling.medianChangesPerSec)}/s).`,
    )
  }
  const biggest = eqRegistrations.at(-1)
  if (biggest !== undefined) headline.push(`RSS of the pipeline with ${num(biggest.count)} idle shapes: ${mib(biggest.memoryAfter.rss)}.`)
  const pressures = [
    ...report.throughput.flatMap((p) => [...p.ceiling.runs, ...p.sets.flatMap((s) => s.runs)].map((r) => r.cpuPressurePercent)),
    ...report.registrations.map((r) => r.cpuPressurePercent),
  ]
  const s = report.settings as { reps?: number; changes?: number }
  return {
    measures:
      "Row changes per second from a replication slot into durable shape logs (the server's `Pipeline`: pgoutput decoding, transaction assembly, shape routing, change encoding, the file storage engine with group commit) next to Postgres decoding the same WAL into /dev/null; replication lag under a saturating insert load with 100k shapes; memory with idle shapes; the time to register shapes.",
    doesNotMeasure: 'HTTP, clients, reads of the logs, snapshots of large tables, a Postgres on another machine (Postgres, the load and the pipeline share the same cores, except in the keep-up phase\'s separate-cores placement).',
    method: [
      `Each repetition (${num(s.reps ?? 1)}) creates one slot per contender at the same position, then writes the workload (${num(s.changes ?? 0)} changes in groups of 7 inserts, 2 updates, 1 delete, one or 100 per transaction); every contender replays exactly that WAL; the order rotates each repetition.`,
      'A pipeline run is a new process on the store left by registration; its clock starts when `Pipeline.start` resolves and stops at the first flush whose durable watermark reaches a marker transaction after the workload.',
      'Keep-up: pgbench inserts as fast as it can for a fixed time while the pipeline with 100k shapes follows; placements: shared cores, Postgres and the pipeline on separate cores, and each in a CPU control group.',
      'Postgres runs with fsync off, so the load is bounded by CPU and not by the disk: the hardest input for a sync engine on the same machine. Sluice\'s storage fsyncs as in production.',
    ],
    machine: machineLines(report.machine, [
      `Postgres ${report.postgres.version}, logical replication protocol ${report.protoVersion}; run took ${num(report.runSeconds / 60, 1)} min${report.fixture ? '; shape sets reused from an earlier run (registration figures are that run\'s)' : ''}`,
    ]),
    load: [loadLine(report.loads), pressureLine(pressures)],
    tables: [throughput, registrations, keepUp, targets].filter((t) => t.rows.length > 0),
    charts,
    headline,
  }
}

export const pipelineSection: ReportSection = {
  id: 'pipeline',
  title: 'Pipeline: replication to durable shape logs',
  stem: 'pipeline',
  render: (file) => render(file.data as Report),
}
