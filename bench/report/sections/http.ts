/** The HTTP benchmark's section: initial sync, Sluice next to its fastify ceiling (write-to-client latency is `live.ts`). */
import type { Report } from '../../http/report.js'
import type { ChartSpec } from '../chart.js'
import { loadLine, machineLines, ms, num, plural, pressureLine, ratio, spread } from '../format.js'
import type { ReportSection, SectionContent, Table } from '../section.js'

const SLUICE = 'Sluice'
const CEILING = 'ceiling (bare fastify)'

function render(report: Report): SectionContent {
  const initialTable: Table = {
    title: `Initial sync (${num(report.initialResponse.rows)}-row shape, \`offset=-1\`, ${num(report.initialResponse.bodyBytes / 1000)} KB)`,
    headers: ['clients', 'server', 'req/s (median)', 'req/s runs (min – max)', 'p50', 'p99', 'p99 runs (min – max)', 'Sluice / ceiling req/s', 'Sluice / ceiling p99'],
    align: ['r', 'l', 'r', 'r', 'r', 'r', 'r', 'r', 'r'],
    rows: report.initial.flatMap((row) =>
      (['sluice', 'ceiling'] as const).map((who) => {
        const side = row[who]
        const own = who === 'sluice'
        return [
          num(row.clients),
          own ? SLUICE : CEILING,
          num(side.median.requestsPerSec),
          spread(side.runs.map((r) => r.requestsPerSec), (x) => num(x)),
          ms(side.median.p50Ms),
          ms(side.median.p99Ms),
          spread(side.runs.map((r) => r.p99Ms), ms),
          own ? ratio(row.sluice.median.requestsPerSec / row.ceiling.median.requestsPerSec) : '',
          own ? ratio(row.sluice.median.p99Ms / row.ceiling.median.p99Ms) : '',
        ]
      }),
    ),
    note: 'Medians of the repetitions; the ranges are those of the runs behind each median. Throughput ratio below 1 and latency ratio above 1 mean Sluice is slower than the ceiling.',
  }
  const charts: ChartSpec[] = []
  if (report.initial.length > 0) {
    charts.push({
      id: 'http-initial-throughput',
      title: 'Initial sync: requests per second',
      x: { title: 'concurrent clients', log: true },
      y: { title: 'requests/s (median)' },
      series: [{ name: SLUICE }, { name: CEILING, dashed: true }],
      points: report.initial.flatMap((row) => [
        { series: SLUICE, x: row.clients, y: row.sluice.median.requestsPerSec },
        { series: CEILING, x: row.clients, y: row.ceiling.median.requestsPerSec },
      ]),
    })
    charts.push(latencyChart('http-initial-latency', 'Initial sync: latency', 'concurrent clients', report.initial.map((r) => ({ x: r.clients, sluice: r.sluice.median, ceiling: r.ceiling.median }))))
  }
  const headline: string[] = []
  const busiest = report.initial.at(-1)
  if (busiest !== undefined) {
    headline.push(
      `Initial sync of a ${num(report.initialResponse.bodyBytes / 1000)} KB shape, ${plural(busiest.clients, 'client')}: Sluice ${num(busiest.sluice.median.requestsPerSec)} req/s, ${ratio(busiest.sluice.median.requestsPerSec / busiest.ceiling.median.requestsPerSec)} the throughput of a bare fastify server sending the same bytes from memory (${num(busiest.ceiling.median.requestsPerSec)} req/s).`,
    )
  }
  const runs = report.initial.flatMap((r) => [...r.sluice.runs, ...r.ceiling.runs])
  const s = report.settings
  return {
    measures: `The Sluice server process (\`sluice start\`) as HTTP clients see it: requests/s and latency of the initial sync of a ${num(report.initialResponse.rows)}-row shape (one chunk, ${num(report.initialResponse.bodyBytes / 1000)} KB) by ${counts(s.initialClients)} concurrent keep-alive clients.`,
    doesNotMeasure:
      'Live requests (the live benchmark), an HTTP cache or CDN in front (the way Sluice is meant to fan initial syncs out), TLS, compression, SSE, shapes of many chunks, networks between machines, browsers.',
    method: [
      `Ceiling: a bare fastify server in its own process answers the initial request with Sluice's own bytes and headers from a Buffer.`,
      `wrk, ${String(s.wrkThreads ?? 1)} thread, N keep-alive connections in closed loops, ${String(s.initialSeconds ?? '?')} s per run after a warm-up; the bodies are checked byte-identical first.`,
      `${plural(Number(s.reps ?? 1), 'repetition')} of every row, the server order alternating between repetitions; each run first waits (up to ${String(s.quietWaitSeconds ?? '?')} s) for the CPU pressure to settle. Postgres, Sluice, the ceiling and wrk are separate processes sharing the same cores.`,
    ],
    machine: machineLines(report.machine, [`Postgres ${report.postgres.version} (fsync off), wrk ${report.wrkVersion}; run took ${num(report.runSeconds / 60, 1)} min`]),
    load: [loadLine(report.loads), pressureLine(runs.map((r) => r.cpuPressurePercent))],
    tables: [initialTable].filter((t) => t.rows.length > 0),
    charts,
    headline,
  }
}

/** "1, 100 and 2,000" from a settings list. */
function counts(list: unknown): string {
  if (!Array.isArray(list) || list.length === 0) return 'several'
  const items = list.map((x) => num(Number(x)))
  return items.length === 1 ? items[0]! : `${items.slice(0, -1).join(', ')} and ${items.at(-1)!}`
}

interface LatencyRow {
  readonly x: number
  readonly sluice: { readonly p50Ms: number; readonly p99Ms: number }
  readonly ceiling: { readonly p50Ms: number; readonly p99Ms: number }
}

function latencyChart(id: string, title: string, xTitle: string, rows: readonly LatencyRow[]): ChartSpec {
  const names = { sp50: `${SLUICE} p50`, sp99: `${SLUICE} p99`, cp50: `${CEILING} p50`, cp99: `${CEILING} p99` }
  return {
    id,
    title,
    x: { title: xTitle, log: true },
    y: { title: 'latency, ms (median of runs; log scale)', log: true },
    series: [{ name: names.sp50 }, { name: names.sp99 }, { name: names.cp50, dashed: true }, { name: names.cp99, dashed: true }],
    points: rows.flatMap((r) => [
      { series: names.sp50, x: r.x, y: r.sluice.p50Ms },
      { series: names.sp99, x: r.x, y: r.sluice.p99Ms },
      { series: names.cp50, x: r.x, y: r.ceiling.p50Ms },
      { series: names.cp99, x: r.x, y: r.ceiling.p99Ms },
    ]),
  }
}

export const httpSection: ReportSection = {
  id: 'http',
  title: 'HTTP: initial sync',
  stem: 'http',
  render: (file) => render(file.data as Report),
}
