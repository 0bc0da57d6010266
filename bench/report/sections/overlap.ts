/** The overlap benchmark's section: one write into many overlapping shapes, and many shapes created at once. */
import type { CreateRun, FanoutMode, FanoutRun, Report } from '../../overlap/report.js'
import type { ChartSpec, Point } from '../chart.js'
import { loadLine, machineLines, median, ms, num, plural, pressureLine, ratio, spread } from '../format.js'
import type { ResultsKind } from '../results-file.js'
import type { ReportSection, SectionContent, Table } from '../section.js'

const MODE_TEXT: Record<FanoutMode, string> = { independent: 'one client per shape', one: 'one client in all' }

function mib(x: number): string {
  return Number.isFinite(x) ? `${num(x)} MiB` : '-'
}

function secs(x: number): string {
  return Number.isFinite(x) ? `${num(x / 1000, 2)} s` : '-'
}

function fanoutTable(runs: readonly FanoutRun[], reference: FanoutRun | undefined): Table {
  return {
    title: 'One write into N overlapping shapes: commit to the first and the last client',
    headers: ['shapes', 'clients', 'first p50', 'first p99', 'last p50', 'last p99', 'last max', 'last p50 / 1 shape', 'lost', 'server CPU per write', 'server CPU', 'client CPU', 'RSS parked', 'RSS peak', 'handshake', 'load (1 min)'],
    align: ['r', 'l', 'r', 'r', 'r', 'r', 'r', 'r', 'r', 'r', 'r', 'r', 'r', 'r', 'r', 'r'],
    rows: runs.map((r) => [
      num(r.shapes),
      r.mode === 'one' ? MODE_TEXT.one : `${MODE_TEXT.independent} (${r.processes} proc.)`,
      ms(r.firstP50Ms),
      ms(r.firstP99Ms),
      ms(r.lastP50Ms),
      ms(r.lastP99Ms),
      ms(r.lastMaxMs),
      reference === undefined || r === reference ? '' : ratio(r.lastP50Ms / reference.lastP50Ms),
      num(r.lost),
      r.serverCpuMsPerWrite === null ? '-' : ms(r.serverCpuMsPerWrite),
      r.serverCpuPercent === null ? '-' : `${num(r.serverCpuPercent)}%`,
      `${num(r.clientCpuPercent)}%`,
      mib(r.parkedRssMiB),
      mib(Math.max(r.writesPeakRssMiB, r.handshakePeakRssMiB)),
      secs(r.handshakeMs),
      num(r.loadavg1, 1),
    ]),
    note: '*first*/*last*: per write, from just before the UPDATE is sent (its commit included) until the first/last client has read the whole response holding it; p50/p99/max over the writes. *last* is when every client is up to date. *server CPU per write*: the server\'s CPU time over the writes divided by their number (long-poll re-polls included). *RSS parked*: the server with every client waiting, before the writes; *RSS peak*: the highest 100 ms sample from the handshake to the last write. *handshake*: every client from offset=-1 to its first long-poll; the first mode at a count also creates the shapes new since the count before.',
  }
}

function createTable(runs: readonly CreateRun[]): Table {
  return {
    title: 'N new shapes requested at once: until each client has its snapshot',
    headers: ['shapes', 'run', 'all done', 'p50', 'p99', 'max', 'done', '503s retried', 'other errors', 'ceiling: plain SELECTs', 'Sluice / ceiling', 'RSS start → peak', 'Postgres connections', 'server CPU', 'load (1 min)'],
    align: ['r', 'r', 'r', 'r', 'r', 'r', 'r', 'r', 'r', 'r', 'r', 'r', 'r', 'r', 'r'],
    rows: runs.map((r) => [
      num(r.count),
      num(r.rep),
      secs(r.totalMs),
      secs(r.p50Ms),
      secs(r.p99Ms),
      secs(r.maxMs),
      `${num(r.completed)}/${num(r.count)}`,
      num(r.retries503),
      num(r.networkErrors + r.otherStatus + r.failed),
      secs(r.ceiling.totalMs),
      ratio(r.totalMs / r.ceiling.totalMs),
      `${mib(r.startRssMiB)} → ${mib(r.peakRssMiB)}`,
      `${num(r.pgClientConnections)} + ${num(r.pgWalsenders)} walsender`,
      r.serverCpuPercent === null ? '-' : `${num(r.serverCpuPercent)}%`,
      num(r.loadavg1, 1),
    ]),
    note: '*p50/p99/max*: per request, from the burst until its response says up-to-date, 503 waits included (the client waits the retry-after it is given, 6-10 s by default). *other errors*: network errors, statuses other than 200/409/503, requests given up. *ceiling*: the same number of `SELECT … WHERE id = $j` straight to Postgres, queued at once on a pool of as many connections as Sluice uses for snapshots, until the last answers. *Postgres connections*: the most client backends seen during the burst (sampled every 100 ms), plus the replication connection.',
  }
}

export function overlapContent(report: Report, kind: ResultsKind): SectionContent {
  const fan = report.fanout
  const reference = fan.find((r) => r.shapes === 1 && r.mode === 'independent')
  const counts = [...new Set(fan.map((r) => r.shapes))]
  const charts: ChartSpec[] = []
  if (fan.length > 0) {
    const series = (['independent', 'one'] as const).flatMap((mode) => [
      { name: `last client p50, ${MODE_TEXT[mode]}`, mode, pick: (r: FanoutRun) => r.lastP50Ms },
      { name: `last client p99, ${MODE_TEXT[mode]}`, mode, pick: (r: FanoutRun) => r.lastP99Ms },
      { name: `first client p50, ${MODE_TEXT[mode]}`, mode, pick: (r: FanoutRun) => r.firstP50Ms },
    ])
    const points: Point[] = series.flatMap((s) => fan.filter((r) => r.mode === s.mode).map((r) => ({ series: s.name, x: r.shapes, y: s.pick(r) })))
    charts.push({
      id: 'overlap-fanout',
      title: 'One write into N overlapping shapes: commit to client',
      x: { title: 'shapes (each holding the written row)', log: true },
      y: { title: 'ms (log)', log: true },
      series: series.map((s) => ({ name: s.name, dashed: s.mode === 'one' })),
      points,
    })
  }
  const create = report.create
  if (create.length > 0) {
    const byCount = [...new Set(create.map((r) => r.count))]
    const med = (c: number, pick: (r: CreateRun) => number) => median(create.filter((r) => r.count === c).map(pick))
    charts.push({
      id: 'overlap-create',
      title: 'N new shapes requested at once: time until all have their snapshot',
      x: { title: 'shapes requested at once', log: true },
      y: { title: 'seconds' },
      series: [{ name: 'Sluice: all done' }, { name: 'Sluice: p50 request' }, { name: 'ceiling: plain SELECTs, all done', dashed: true }],
      points: byCount.flatMap((c) => [
        { series: 'Sluice: all done', x: c, y: med(c, (r) => r.totalMs) / 1000 },
        { series: 'Sluice: p50 request', x: c, y: med(c, (r) => r.p50Ms) / 1000 },
        { series: 'ceiling: plain SELECTs, all done', x: c, y: med(c, (r) => r.ceiling.totalMs) / 1000 },
      ]),
    })
  }
  const headline: string[] = []
  for (const shapes of counts.filter((c) => c > 1).slice(-1)) {
    for (const mode of ['independent', 'one'] as const) {
      const r = fan.find((x) => x.shapes === shapes && x.mode === mode)
      if (r === undefined) continue
      headline.push(
        `One write into ${num(shapes)} overlapping shapes, ${MODE_TEXT[mode]}: commit to the last client p50 ${ms(r.lastP50Ms)}, p99 ${ms(r.lastP99Ms)} (first ${ms(r.firstP50Ms)}; ${reference === undefined ? '' : `${ratio(r.lastP50Ms / reference.lastP50Ms)} the ${ms(reference.lastP50Ms)} of 1 shape; `}${num(r.lost)} lost), server ${r.serverCpuMsPerWrite === null ? '-' : ms(r.serverCpuMsPerWrite)} CPU per write, RSS ${mib(r.parkedRssMiB)} parked.`,
      )
    }
  }
  for (const count of [...new Set(create.map((r) => r.count))]) {
    const rs = create.filter((r) => r.count === count)
    const total = median(rs.map((r) => r.totalMs))
    const ceil = median(rs.map((r) => r.ceiling.totalMs))
    headline.push(
      `${num(count)} new shapes requested at once: all have their snapshot after ${secs(total)} (p50 request ${secs(median(rs.map((r) => r.p50Ms)))}; ${num(median(rs.map((r) => r.retries503)))} 503s retried, ${num(median(rs.map((r) => r.networkErrors + r.otherStatus + r.failed)))} other errors), ${ratio(total / ceil)} the ${secs(ceil)} of the same SELECTs straight to Postgres; peak RSS ${mib(median(rs.map((r) => r.peakRssMiB)))}, ${num(Math.max(...rs.map((r) => r.pgClientConnections)))} Postgres connections.`,
    )
  }
  const s = report.settings
  return {
    measures:
      "Two ways many shapes meet at once (Electric's benchmarks 5 and 6). Fan-out: N distinct shapes that all hold the row one UPDATE changes, each followed live by a long-polling client, then all followed by one client; per write, the time from the commit to the first and to the last client having it (the last: every client up to date), the server's CPU and its peak memory. Creation: N new shapes requested at the same moment against the default admission control; the time until each client has its snapshot, the 503s it was told to retry, errors, the server's peak memory and the Postgres connections it used.",
    doesNotMeasure:
      'Many clients on one shape (the one-shape fan-out benchmark), big transactions, SSE, an HTTP cache in front, snapshots of big shapes, other machines: Postgres, the server and the load generators share the same 2 cores.',
    method: [
      `\`sluice start ${report.sluiceFlags.join(' ')}\` (every limit at its default: 300 initial requests at once, 10,000 others, 20 s long-polls) in its own process; a throwaway Postgres (the pipeline benchmark's settings); load generators in their own Node processes on raw \`node:http\` keep-alive sockets, one socket per shape.`,
      `Fan-out: table \`overlap_items\` with one row; shape j is \`value > -(j+1)\`, so all N hold the row and none is in the router's hash index (each clause is evaluated per change). Shape counts ${s.fanoutShapes.map((c) => num(c)).join(', ')}, in that order on one server (each count adds shapes). Per count: N clients, one per shape, in ${s.clientProcesses} processes, then one process following all N (on HTTP/1.1 that is N long-polls too, from one client). ${plural(s.writes, 'write')} per case, one at a time: a writer process stamps \`stamp\` with CLOCK_MONOTONIC just before the UPDATE, each client subtracts it on reading the whole response; the next write comes ${num(s.gapMs)} ms after the last client had the one before.`,
      `Creation: for each count (${s.createCounts.map((c) => num(c)).join(', ')}; ${plural(s.createReps, 'run')} each) a fresh Postgres and server; table \`overlap_create\` with one row per shape; shape j is \`id = j\`. One process sends all N \`offset=-1\` requests at once, each on its own socket, follows each to up-to-date, and waits out every 503's retry-after. Then, the server stopped, the same count of plain SELECTs of the same rows on a pool of ${num(s.selectConnections)} connections: the ceiling, Postgres's own part.`,
      'Server RSS: VmRSS every 100 ms; CPU: /proc/<pid>/stat before and after. The 1-shape fan-out row is the reference: the same write, one shape, one client.',
    ],
    machine: machineLines(report.machine, [`open-file limit ${report.machine.fdLimit}`, `results: a ${kind} run`]),
    load: [loadLine(report.loads), pressureLine([...fan.map((r) => r.cpuPressurePercent), ...create.map((r) => r.cpuPressurePercent)])],
    tables: [
      fan.length > 0 ? fanoutTable(fan, reference) : undefined,
      create.length > 0 ? createTable(create) : undefined,
      (report.notes ?? []).length > 0 ? { title: 'Observations from this run', headers: ['observation'], rows: (report.notes ?? []).map((n) => [n]) } : undefined,
    ].filter((t): t is Table => t !== undefined),
    charts,
    headline,
  }
}

export const overlapSection: ReportSection = {
  id: 'overlap',
  title: 'Overlap: one write into many shapes, many shapes created at once',
  stem: 'overlap',
  render: (file) => overlapContent(file.data as Report, file.kind),
}
