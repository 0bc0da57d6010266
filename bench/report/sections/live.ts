/** The live benchmark's section: write-to-client latency with many independent shapes, Sluice next to its LISTEN/NOTIFY ceiling and the floor of durable-before-sent. */
import { P99_TARGET_MS, type Report, burstLine, targetLines } from '../../live/report.js'
import type { ChartSpec } from '../chart.js'
import { loadLine, machineLines, ms, num, plural, pressureLine, ratio, spread } from '../format.js'
import type { ReportSection, SectionContent, Table } from '../section.js'

const SLUICE = 'Sluice'
const CEILING = 'ceiling (LISTEN/NOTIFY, in memory)'
const FLOOR = 'floor: ceiling p50 + one fdatasync'
const P99_TARGET = `p99 target (${P99_TARGET_MS} ms)`

function render(report: Report): SectionContent {
  const table: Table = {
    title: `Write-to-client latency (one live long-poll client per followed shape, ${String(report.settings.writeRate)} commits/s)`,
    headers: ['shapes', 'followed', 'server', 'p50', 'p50 runs (min – max)', 'p99', 'p99 runs (min – max)', 'lost', 'floor (ceiling p50 + fdatasync)', 'p50 / floor', `p99 / ${P99_TARGET_MS} ms`, 'flushes / transaction'],
    align: ['r', 'r', 'l', 'r', 'r', 'r', 'r', 'r', 'r', 'r', 'r', 'r'],
    rows: report.rows.flatMap((row) =>
      (['sluice', 'ceiling'] as const).map((who) => {
        const side = row[who]
        const own = who === 'sluice'
        const perTx = side.runs.map((r) => r.commits?.flushesPerTransaction).filter((x): x is number => x !== undefined)
        return [
          num(row.shapes),
          num(row.followed),
          own ? SLUICE : CEILING,
          ms(side.median.p50Ms),
          spread(side.runs.map((r) => r.p50Ms), ms),
          ms(side.median.p99Ms),
          spread(side.runs.map((r) => r.p99Ms), ms),
          num(side.runs.reduce((a, r) => a + r.lost, 0)),
          own ? `${ms(row.floorMs)} (${ms(row.ceiling.median.p50Ms)} + ${ms(row.fsyncMs)})` : '',
          own ? ratio(side.median.p50Ms / row.floorMs) : '',
          own ? ratio(side.median.p99Ms / P99_TARGET_MS) : '',
          perTx.length === 0 ? '' : perTx.map((x) => num(x, 2)).join(', '),
        ]
      }),
    ),
    note: 'Latency from the writer sending the update to the client holding the whole response body (one CLOCK_MONOTONIC for every process). fdatasync: a small append and fdatasync in the data directory, median of a few hundred, next to each repetition. Flushes per transaction from Sluice\'s /metrics over each timed run (1: every change made durable on its own, at once).',
  }
  const tables = [table]
  if (report.burst !== undefined) {
    const b = report.burst
    tables.push({
      title: 'Group commit under a busy pipeline (back-to-back commits, no clients)',
      headers: ['writer connections', 'seconds', 'transactions routed', 'transactions/s', 'flushes (one fdatasync each)', 'flushes / transaction', 'transactions per fdatasync', 'mean flush'],
      align: ['r', 'r', 'r', 'r', 'r', 'r', 'r', 'r'],
      rows: [[num(b.connections), num(b.seconds, 1), num(b.commits.transactions), num(b.commits.transactions / b.seconds), num(b.commits.flushes), num(b.commits.flushesPerTransaction, 3), num(1 / b.commits.flushesPerTransaction, 1), ms(b.commits.meanFlushMs)]],
      note: 'From /metrics: sluice_storage_flush_duration_seconds_count over sluice_transactions_routed_total. Each flush commits the journal with one fdatasync.',
    })
  }
  const points = report.rows.flatMap((r) => [
    { series: `${SLUICE} p50`, x: r.shapes, y: r.sluice.median.p50Ms },
    { series: `${SLUICE} p99`, x: r.shapes, y: r.sluice.median.p99Ms },
    { series: `${CEILING} p50`, x: r.shapes, y: r.ceiling.median.p50Ms },
    { series: `${CEILING} p99`, x: r.shapes, y: r.ceiling.median.p99Ms },
    { series: FLOOR, x: r.shapes, y: r.floorMs },
    { series: P99_TARGET, x: r.shapes, y: P99_TARGET_MS },
  ])
  const charts: ChartSpec[] =
    report.rows.length === 0
      ? []
      : [
          {
            id: 'live-latency',
            title: 'Write-to-client latency vs shapes',
            x: { title: 'shapes, one live client each (up to the open-file limit)', log: true },
            y: { title: 'latency, ms (median of runs; log scale)', log: true },
            series: [
              { name: `${SLUICE} p50` },
              { name: `${SLUICE} p99` },
              { name: `${CEILING} p50`, dashed: true },
              { name: `${CEILING} p99`, dashed: true },
              { name: FLOOR, dashed: true },
              { name: P99_TARGET, dashed: true },
            ],
            points,
          },
        ]
  const s = report.settings
  const runs = report.rows.flatMap((r) => [...r.sluice.runs, ...r.ceiling.runs])
  const burst = burstLine(report)
  return {
    measures: `Write-to-client latency (Electric's benchmark 3): ${counts(s.shapes)} independent shapes \`k = i\`, one live long-poll client each, ${String(s.writeRate)} single-row commits a second into random shapes; the time from the update being sent to its client holding the response. Next to an in-memory ceiling and the floor of durable-before-sent (the ceiling plus one fdatasync of the same disk, measured in the same run); and the group commit's fdatasyncs per transaction when idle and under back-to-back commits.`,
    doesNotMeasure: 'Many clients of one shape (fan-out), SSE, an HTTP cache in front, TLS, networks between machines. Past the open-file limit the extra shapes exist on the server but have no client.',
    method: [
      'Ceiling: a bare fastify server in its own process, woken in-process by Postgres `LISTEN/NOTIFY` from a trigger on the same table, so the same commits drive both servers; no decoding, no storage, no durability.',
      `The writer stamps each update with CLOCK_MONOTONIC just before sending; each client subtracts it when the whole body has arrived; ${String(s.liveSeconds)} s of writes per run; clients split over processes of up to ${num(Number(s.clientsPerProcess))} sockets, each on its own loopback address.`,
      `Targets: p50 at most the floor, p99 at most ${P99_TARGET_MS} ms, at every shape count.`,
      `${plural(Number(s.reps ?? 1), 'repetition')} per shape count, the server order alternating; Postgres, Sluice, the ceiling, the clients, the writer and the fdatasync probe are separate processes sharing the same cores.`,
    ],
    machine: machineLines(report.machine, [`Postgres ${report.postgres.version} (fsync off), open-file limit ${report.machine.fdLimit}; run took ${num(report.runSeconds / 60, 1)} min`]),
    load: [loadLine(report.loads), pressureLine(runs.map((r) => r.cpuPressurePercent))],
    tables,
    charts,
    headline: [...targetLines(report).map((l) => `Write-to-client, ${l.replace(/\*\*/g, '')}`), ...(burst === undefined ? [] : [burst])],
  }
}

/** "1, 1,000 and 10,000" from a settings list. */
function counts(list: unknown): string {
  if (!Array.isArray(list) || list.length === 0) return 'several'
  const items = list.map((x) => num(Number(x)))
  return items.length === 1 ? items[0]! : `${items.slice(0, -1).join(', ')} and ${items.at(-1)!}`
}

export const liveSection: ReportSection = {
  id: 'live',
  title: 'Live: write-to-client latency with many independent shapes',
  stem: 'live',
  render: (file) => render(file.data as Report),
}
