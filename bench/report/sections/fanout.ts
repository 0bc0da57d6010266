/** The fan-out benchmark's section: one shape, many live clients, Sluice next to a node:http ceiling. */
import { type Report, TARGETS } from '../../fanout/report.js'
import type { ChartSpec, Point } from '../chart.js'
import { loadLine, machineLines, mib, ms, num, plural, pressureLine, ratio } from '../format.js'
import type { ReportSection, SectionContent, Table } from '../section.js'

const SLUICE = 'Sluice'
const CEILING = 'ceiling (node:http from memory)'

function render(report: Report): SectionContent {
  const table: Table = {
    title: 'Commit to the last client, one shape',
    headers: ['clients', 'kind', 'rows/tx', 'server', 'last client p50', 'p99', 'max', 'median client p50', 'lost', 'server CPU / write', 'Sluice / ceiling (last p50)'],
    align: ['r', 'l', 'r', 'l', 'r', 'r', 'r', 'r', 'r', 'r', 'r'],
    rows: report.cells.flatMap((cell) =>
      cell.sluice.bySize.flatMap((size) =>
        (['sluice', 'ceiling'] as const).flatMap((who) => {
          const s = cell[who]?.bySize.find((x) => x.rows === size.rows)
          if (s === undefined) return []
          const ceiling = cell.ceiling?.bySize.find((x) => x.rows === size.rows)
          return [
            [
              num(cell.clients),
              cell.kind,
              num(size.rows),
              who === 'sluice' ? SLUICE : CEILING,
              ms(s.lastP50Ms),
              ms(s.lastP99Ms),
              ms(s.lastMaxMs),
              ms(s.medianClientP50Ms),
              num(s.lost),
              s.serverCpuMsPerWrite === null ? '–' : ms(s.serverCpuMsPerWrite),
              who === 'sluice' && ceiling !== undefined ? ratio(size.lastP50Ms / ceiling.lastP50Ms) : '',
            ],
          ]
        }),
      ),
    ),
    note: `Over ${String(report.settings.writes ?? '?')} writes per row. Sluice's time runs from just before COMMIT is sent; the ceiling's from its first write to a socket (it has no commit), so the ratio charges Sluice with the commit, decoding and the durable flush too.`,
  }
  const memory: Table = {
    title: 'Server memory with every client parked',
    headers: ['clients', 'kind', 'server', 'RSS before', 'RSS parked', 'RSS peak', 'per parked request'],
    align: ['r', 'l', 'l', 'r', 'r', 'r', 'r'],
    rows: report.cells.flatMap((cell) =>
      (['sluice', 'ceiling'] as const).flatMap((who) => {
        const c = cell[who]
        if (c === undefined) return []
        return [[num(cell.clients), cell.kind, who === 'sluice' ? SLUICE : CEILING, mib(c.rssBeforeBytes), mib(c.rssParkedBytes), mib(c.rssPeakBytes), `${num(c.rssPerParkedBytes / 1024, 1)} KiB`]]
      }),
    ),
    note: 'VmRSS of the server process before the clients connect and 0.5 s after the last one is parked; per request = the growth divided by the clients.',
  }
  const charts: ChartSpec[] = []
  const longPolls = report.cells.filter((c) => c.kind === 'long-poll')
  const rowsList = [...new Set(longPolls.flatMap((c) => c.sluice.bySize.map((s) => s.rows)))]
  if (longPolls.length > 0) {
    const series = rowsList.flatMap((rows) => [{ name: `${SLUICE}, ${plural(rows, 'row')}` }, { name: `${CEILING}, ${plural(rows, 'row')}`, dashed: true }])
    const points: Point[] = longPolls.flatMap((cell) =>
      rowsList.flatMap((rows) => {
        const out: Point[] = []
        const s = cell.sluice.bySize.find((x) => x.rows === rows)
        const c = cell.ceiling?.bySize.find((x) => x.rows === rows)
        if (s !== undefined) out.push({ series: `${SLUICE}, ${plural(rows, 'row')}`, x: cell.clients, y: s.lastP50Ms })
        if (c !== undefined) out.push({ series: `${CEILING}, ${plural(rows, 'row')}`, x: cell.clients, y: c.lastP50Ms })
        return out
      }),
    )
    charts.push({
      id: 'fanout-last-client',
      title: 'One write to one shape: time until the last long-poll client has it (p50 over writes)',
      x: { title: 'live long-poll clients of the shape', log: true },
      y: { title: 'commit to last client, ms (log scale)', log: true },
      series,
      points,
    })
  }
  const headline: string[] = []
  for (const target of TARGETS) {
    const cell = report.cells.find((c) => c.kind === 'long-poll' && c.clients === target.clients)
    const one = cell?.sluice.bySize[0]
    if (cell === undefined || one === undefined) continue
    const ceiling = cell.ceiling?.bySize.find((x) => x.rows === one.rows)
    headline.push(
      `A ${num(one.rows)}-row write reaches the last of ${num(target.clients)} long-poll clients of one shape in ${ms(one.lastP50Ms)} at the median (target ${ms(target.ms)}: ${one.lastP50Ms <= target.ms ? 'met' : 'missed'}${ceiling === undefined ? '' : `; ${ratio(one.lastP50Ms / ceiling.lastP50Ms)} the time of a node:http process writing the same bytes from memory, ${ms(ceiling.lastP50Ms)}`}).`,
    )
  }
  const runs = report.cells.flatMap((c) => [...c.sluice.bySize, ...(c.ceiling?.bySize ?? [])])
  return {
    measures:
      'One shape followed by many live clients (Electric\'s benchmark 4): for long-poll clients, then SSE clients, the time from a commit until the last client holds the whole transaction, over several writes of 1, 100 and 1,000 rows, with the server\'s CPU per write and its resident set with every client parked.',
    doesNotMeasure: 'Many shapes (the HTTP benchmark), an HTTP cache in front (clients here all reach the server), initial sync, TLS, clients on other machines.',
    method: [
      'Clients on raw TCP sockets (one each), up to 10,000 per load-generator process; a long-poll client sends its next request as soon as a response is whole, an SSE client holds one stream; each notes CLOCK_MONOTONIC when the transaction\'s last row (an end marker) has arrived.',
      'Ceiling: a bare node:http process parks the same requests and writes Sluice\'s own headers and body for a transaction of that size (captured in the same run) to every parked socket from one buffer; SSE streams get the same entries as events.',
      'Each write waits until every client has it and every long-poll is back and waiting; the top count is 19,000 because the open-file limit here is 20,000 per process (hard).',
    ],
    machine: machineLines(report.machine, [`Postgres ${report.postgres.version} (fsync off); run took ${num(report.runSeconds / 60, 1)} min`]),
    load: [loadLine(report.loads), pressureLine(runs.map((r) => r.cpuPressurePercent))],
    tables: [table, memory].filter((t) => t.rows.length > 0),
    charts,
    headline,
  }
}

export const fanoutSection: ReportSection = {
  id: 'fanout',
  title: 'Fan-out: one shape, many live clients',
  stem: 'fanout',
  render: (file) => render(file.data as Report),
}
