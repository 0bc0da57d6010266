/** The large-chunks benchmark's section: Sluice's sendfile path next to its pread path and to nginx serving the same bytes. */
import { type Report, SERVERS, SERVER_LABEL, sizeLabel, targetChecks } from '../../chunks/report.js'
import type { ChartSpec } from '../chart.js'
import { loadLine, machineLines, ms, num, plural, pressureLine, ratio, spread } from '../format.js'
import type { ReportSection, SectionContent, Table } from '../section.js'

function render(report: Report): SectionContent {
  const throughput: Table[] = report.results.map((result) => ({
    title: `${sizeLabel(result.chunkBytes)} chunks: requests per second (body ${num(result.bodyBytes)} bytes)`,
    headers: ['clients', 'server', 'req/s (median)', 'req/s runs (min – max)', 'MB/s', 'p50', 'p99', 'sendfile / this req/s'],
    align: ['r', 'l', 'r', 'r', 'r', 'r', 'r', 'r'],
    rows: result.rows.flatMap((row) =>
      SERVERS.map((name) => {
        const side = row.sides[name]
        return [
          num(row.clients),
          SERVER_LABEL[name],
          num(side.median.requestsPerSec, 1),
          spread(side.runs.map((r) => r.requestsPerSec), (x) => num(x, 1)),
          num(side.median.bytesPerSec / 1e6),
          ms(side.median.p50Ms),
          ms(side.median.p99Ms),
          name === 'sendfile' ? '' : ratio(row.sides.sendfile.median.requestsPerSec / side.median.requestsPerSec),
        ]
      }),
    ),
    note: 'Medians of the repetitions; MB/s counts what wrk read (headers and bodies).',
  }))
  const cpu: Table = {
    title: 'Server CPU per GB sent (CPU-seconds of user + system time per 10^9 bytes)',
    headers: ['chunk', 'clients', ...SERVERS.map((s) => SERVER_LABEL[s]), 'sendfile / pread', 'sendfile / nginx', 'sendfile runs (min – max)'],
    align: ['l', 'r', 'r', 'r', 'r', 'r', 'r', 'r'],
    rows: report.results.flatMap((result) =>
      result.rows.map((row) => [
        sizeLabel(result.chunkBytes),
        num(row.clients),
        ...SERVERS.map((s) => num(row.sides[s].median.cpuSecondsPerGB, 3)),
        ratio(row.sides.sendfile.median.cpuSecondsPerGB / row.sides.pread.median.cpuSecondsPerGB),
        ratio(row.sides.sendfile.median.cpuSecondsPerGB / row.sides.nginx.median.cpuSecondsPerGB),
        spread(row.sides.sendfile.runs.map((r) => r.cpuSecondsPerGB ?? Number.NaN), (x) => num(x, 3)),
      ]),
    ),
    note: 'CPU of the server process over each run, from /proc (nginx: master and its worker), divided by the bytes wrk read in that run.',
  }
  const checks = targetChecks(report)
  const targets: Table = {
    title: 'Targets (issue 31, item 6)',
    headers: ['chunk', 'clients', 'ratio', 'measured', 'target', ''],
    align: ['l', 'r', 'l', 'r', 'r', 'l'],
    rows: checks.map((t) => [sizeLabel(t.chunkBytes), num(t.clients), t.name, ratio(t.ratio), `${t.name.includes('CPU') ? '≤' : '≥'} ${ratio(t.bound)}`, t.met ? 'met' : 'missed']),
  }
  const charts: ChartSpec[] = report.results.map((result) => ({
    id: `chunks-throughput-${sizeLabel(result.chunkBytes).replace(' ', '').toLowerCase()}`,
    title: `${sizeLabel(result.chunkBytes)} chunks: requests per second`,
    x: { title: 'concurrent clients', log: true },
    y: { title: 'requests/s (median)' },
    series: SERVERS.map((s) => ({ name: SERVER_LABEL[s], dashed: s === 'nginx' })),
    points: result.rows.flatMap((row) => SERVERS.map((s) => ({ series: SERVER_LABEL[s], x: row.clients, y: row.sides[s].median.requestsPerSec }))),
  }))
  const headline: string[] = []
  for (const result of report.results) {
    const row = result.rows.at(-1)
    if (row === undefined) continue
    const s = row.sides.sendfile.median
    const p = row.sides.pread.median
    const n = row.sides.nginx.median
    headline.push(
      `${sizeLabel(result.chunkBytes)} chunks, ${plural(row.clients, 'client')}: sendfile ${num(s.requestsPerSec)} req/s, ${ratio(s.requestsPerSec / p.requestsPerSec)} the pread path's and ${ratio(s.requestsPerSec / n.requestsPerSec)} nginx's, at ${ratio(s.cpuSecondsPerGB / p.cpuSecondsPerGB)} the pread path's CPU per GB (${num(s.cpuSecondsPerGB, 2)} CPU-s/GB; nginx ${num(n.cpuSecondsPerGB, 2)}).`,
    )
  }
  const met = checks.filter((t) => t.met).length
  if (checks.length > 0) headline.push(`Large-chunk targets: ${met} of ${checks.length} met (see the targets table for each ratio).`)
  const runs = report.results.flatMap((r) => r.rows.flatMap((row) => SERVERS.flatMap((s) => row.sides[s].runs)))
  const st = report.settings
  return {
    measures: `Serving large sealed chunks of one shape's log (${report.results.map((r) => sizeLabel(r.chunkBytes)).join(' and ')}, \`--chunk-bytes\`) to ${String((st.clients as number[] | undefined)?.join(', ') ?? '?')} concurrent keep-alive clients: requests/s, latency and server CPU per GB for Sluice's sendfile(2) path, the pread path of the same build (\`--no-sendfile\`), and nginx serving the same bytes as a static file (the ceiling; nginx sends files with sendfile too).`,
    doesNotMeasure:
      'A cold page cache (every server reads the chunk from memory), small responses (see the HTTP section), live requests, TLS, compression, networks between machines. On loopback the receiver’s TCP work partly lands on the sender, so CPU per GB is higher than on a real network for every server alike.',
    method: [
      `A ${num(report.tableRows)}-row table (about 1 KB per row); each Sluice server snapshots it into a shape whose log is cut into chunks; the benchmark reads the shape up to date and serves its second chunk (sealed: more follow). Its bytes are checked identical from both Sluice servers, then written to a file nginx serves, and checked identical again from all three.`,
      `wrk, ${String(st.wrkThreads ?? 1)} thread, N keep-alive connections in closed loops, ${String(st.seconds ?? '?')} s per run after a warm-up; ${plural(Number(st.reps ?? 1), 'repetition')} of every row, the server order rotating between repetitions; each run first waits (up to ${String(st.quietWaitSeconds ?? '?')} s) for the CPU pressure to settle.`,
      'Both Sluice servers run at once (own storage dir, slot and publication); nginx runs 1 worker (as Sluice is one process) with `sendfile on`, `tcp_nopush on`, no access log and no keep-alive request cap. Every server and wrk share the same 2 cores.',
      'CPU per GB: user + system time of the server process over each run (/proc/<pid>/stat; nginx: master and worker) divided by the bytes wrk read.',
    ],
    machine: machineLines(report.machine, [`wrk ${report.wrkVersion}, nginx ${report.nginxVersion}, Postgres ${report.postgresVersion}; run took ${num(report.runSeconds / 60, 1)} min`]),
    load: [loadLine(report.loads), pressureLine(runs.map((r) => r.cpuPressurePercent))],
    tables: [...throughput, cpu, targets],
    charts,
    headline,
  }
}

export const chunksSection: ReportSection = {
  id: 'chunks',
  title: 'Large chunks: sendfile, pread and nginx',
  stem: 'chunks',
  render: (file) => render(file.data as Report),
}

