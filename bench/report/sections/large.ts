/** The large-shape benchmark's section: one client downloading 100k and 1M rows, our client next to the official one and a raw download. */
import { type LargeClient, OURS_TARGET_MS, RAW_TARGET_MS, type Report, TARGET_ROWS, clientsIn, targetRow } from '../../large/report.js'
import type { ChartSpec } from '../chart.js'
import { loadLine, machineLines, mib, ms, num, pressureLine, ratio, spread } from '../format.js'
import type { ReportSection, SectionContent, Table } from '../section.js'

const LABEL: Record<LargeClient, string> = {
  ours: 'Sluice client',
  official: 'official client (@electric-sql/client 1.5.28)',
  parse: 'JSON.parse floor (rows in a Map, not typed)',
  raw: 'raw HTTP download (no parsing)',
}

function render(report: Report): SectionContent {
  const table: Table = {
    title: 'Download a large shape with one client',
    headers: ['rows', 'shape', 'client', 'time (median)', 'time runs (min – max)', 'CPU', 'peak RSS', 'peak heap', 'retained heap', 'time / official', 'time / raw'],
    align: ['r', 'l', 'l', 'r', 'r', 'r', 'r', 'r', 'r', 'r', 'r'],
    rows: report.results.flatMap((row) =>
      clientsIn(row).map((who) => {
        const m = row.median[who]!
        return [
          num(row.rows),
          row.temperature,
          LABEL[who],
          ms(m.ms),
          spread(row.runs[who]!.map((r) => r.ms), ms),
          ms(m.cpuMs),
          mib(m.peakRss),
          mib(m.peakHeapUsed),
          mib(m.retainedHeapUsed),
          who === 'official' ? '' : ratio(m.ms / row.median.official.ms),
          who === 'raw' ? '' : ratio(m.ms / row.median.raw.ms),
        ]
      }),
    ),
    note: 'Time from the first request to the response that says up-to-date (for a Shape, every row in its Map). Warm: the shape was created and downloaded once before; cold: the first request creates it, the server\'s snapshot included. CPU is the client process\'s user + system time; peak RSS the kernel high-water mark over the window.',
  }
  const target = targetRow(report)
  const targets: Table | undefined =
    target === undefined
      ? undefined
      : {
          title: `Targets (issue 31 item 12: ${num(TARGET_ROWS)} rows from a warm shape)`,
          headers: ['what', 'target', 'measured (median)', 'verdict'],
          align: ['l', 'r', 'r', 'l'],
          rows: [
            ['raw download', `under ${ms(RAW_TARGET_MS)}`, ms(target.median.raw.ms), verdict(target.rows, target.median.raw.ms, RAW_TARGET_MS)],
            ['Sluice client', `under ${ms(OURS_TARGET_MS)}`, ms(target.median.ours.ms), verdict(target.rows, target.median.ours.ms, OURS_TARGET_MS)],
            ...(target.median.parse === undefined
              ? []
              : [['the JSON.parse floor of any client that keeps the rows (for reference)', '', ms(target.median.parse.ms), `Sluice client ${ratio(target.median.ours.ms / target.median.parse.ms)} of it`]]),
          ],
          ...(target.rows === TARGET_ROWS ? {} : { note: `This run's biggest warm shape has ${num(target.rows)} rows: not judged.` }),
        }
  const warm = report.results.filter((r) => r.temperature === 'warm')
  const charts: ChartSpec[] = []
  const charted = warm.length === 0 ? [] : clientsIn(warm[0]!)
  if (warm.length > 0) {
    charts.push({
      id: 'large-time',
      title: 'Download a warm shape: time',
      x: { title: 'rows in the shape', log: true },
      y: { title: 'seconds (median; log scale)', log: true },
      series: charted.map((w) => ({ name: LABEL[w], dashed: w !== 'ours' })),
      points: warm.flatMap((row) => charted.map((w) => ({ series: LABEL[w], x: row.rows, y: row.median[w]!.ms / 1000 }))),
    })
    charts.push({
      id: 'large-memory',
      title: 'Download a warm shape: client peak RSS',
      x: { title: 'rows in the shape', log: true },
      y: { title: 'peak RSS, MiB (median; log scale)', log: true },
      series: charted.map((w) => ({ name: LABEL[w], dashed: w !== 'ours' })),
      points: warm.flatMap((row) => charted.map((w) => ({ series: LABEL[w], x: row.rows, y: row.median[w]!.peakRss / 2 ** 20 }))),
    })
  }
  const headline: string[] = []
  if (target !== undefined) {
    const m = target.median
    headline.push(
      `One client, ${num(target.rows)} rows from a warm shape: Sluice's client ${ms(m.ours.ms)} (${ratio(m.ours.ms / m.official.ms)} the official client's ${ms(m.official.ms)}` +
        `${m.parse === undefined ? '' : `, ${ratio(m.ours.ms / m.parse.ms)} the ${ms(m.parse.ms)} of JSON.parse and a Map alone`}), a raw download ${ms(m.raw.ms)}; peak RSS ${mib(m.ours.peakRss)} vs ${mib(m.official.peakRss)}.`,
    )
  }
  const runs = report.results.flatMap((r) => clientsIn(r).flatMap((w) => r.runs[w]!))
  return {
    measures:
      'One client downloading one large shape from Sluice: our client (`Shape` of `@sluice/client`), the official one (`Shape` of `@electric-sql/client`), a raw HTTP download of the same log (the ceiling for any client: bodies read and counted, nothing parsed) and the JSON.parse floor (the same download, each body through one JSON.parse and every row into a Map by its key, values left as text: what any JavaScript client that keeps the rows must at least do). Time, client CPU and client memory, from a warm shape and from a cold one.',
    doesNotMeasure: 'Many clients at once, live updates (the client benchmark), an HTTP cache in front, browsers, other machines (the client, Sluice and Postgres share the same cores).',
    method: [
      'Every run is a fresh Node process of its own (`--expose-gc`, only the client it measures loaded, through the same tsx loader), so the memory it reports is that client\'s.',
      'The raw download follows the log with node:http keep-alive requests, reading each body to its end and taking the next offset from the `electric-offset` header.',
      'Both clients must materialise the same rows: the sha256 of every row sorted by key is compared over all their runs.',
      `Warm: ${num(Number(report.settings.reps ?? 0))} repetition(s) per client, the order rotating; cold: ${num(Number(report.settings.coldReps ?? 0))} per client, each on a new shape (\`where id > -<n>\`). Each run first waits (up to ${String(report.settings.quietWaitSeconds ?? '?')} s) for the CPU pressure to settle.`,
    ],
    machine: machineLines(report.machine, [`Postgres ${report.postgres.version} (fsync off); run took ${num(report.runSeconds / 60, 1)} min`]),
    load: [loadLine(report.loads), pressureLine(runs.map((r) => r.cpuPressurePercent))],
    tables: targets === undefined ? [table] : [targets, table],
    charts,
    headline,
  }
}

function verdict(rows: number, measured: number, target: number): string {
  if (rows !== TARGET_ROWS) return 'not judged'
  return measured < target ? 'met' : '**missed**'
}

export const largeSection: ReportSection = {
  id: 'large',
  title: 'One large shape, one client',
  stem: 'large',
  render: (file) => render(file.data as Report),
}
