/** The start benchmark's section: spawn to a healthy server, the compiled CLI next to the same CLI from its sources. */
import type { Mode, Report, Run } from '../../start/report.js'
import { MODES, TARGET_MS } from '../../start/report.js'
import type { ChartSpec, Point } from '../chart.js'
import { machineLines, median, ms, num, plural, pressureLine, ratio, spread } from '../format.js'
import type { ReportSection, SectionContent, Table } from '../section.js'

const LABEL: Record<Mode, string> = { compiled: 'compiled (dist/)', source: 'from source (tsx)' }
const TARGET = 'issue target (compiled)'

interface Case {
  readonly shapes: number
  readonly mode: Mode
  readonly runs: readonly Run[]
  readonly healthyMs: number
  readonly cpuMs: number
}

function cases(report: Report): Case[] {
  return report.sizes.flatMap((shapes) =>
    MODES.flatMap((mode) => {
      const runs = report.runs.filter((r) => r.shapes === shapes && r.mode === mode)
      if (runs.length === 0) return []
      return [{ shapes, mode, runs, healthyMs: median(runs.map((r) => r.healthyMs)), cpuMs: median(runs.map((r) => r.cpuMs)) }]
    }),
  )
}

function verdict(c: Case): string {
  const target = TARGET_MS[c.shapes]
  if (c.mode !== 'compiled' || target === undefined) return ''
  return c.healthyMs <= target ? 'met' : '**missed**'
}

function render(report: Report): SectionContent {
  const all = cases(report)
  const find = (shapes: number, mode: Mode) => all.find((c) => c.shapes === shapes && c.mode === mode)
  const table: Table = {
    title: 'Spawn to the first 200 of /v1/health, on a store left at a clean stop',
    headers: ['shapes', 'CLI', 'runs', 'healthy (median)', 'healthy runs (min – max)', 'server part (median)', 'CPU at healthy (median)', 'CPU runs (min – max)', 'stop (median)', 'compiled / source time', 'compiled / source CPU', 'target', ''],
    align: ['r', 'l', 'r', 'r', 'r', 'r', 'r', 'r', 'r', 'r', 'r', 'r', 'l'],
    rows: all.map((c) => {
      const other = c.mode === 'compiled' ? find(c.shapes, 'source') : undefined
      const target = TARGET_MS[c.shapes]
      return [
        num(c.shapes),
        LABEL[c.mode],
        num(c.runs.length),
        ms(c.healthyMs),
        spread(c.runs.map((r) => r.healthyMs), ms),
        ms(median(c.runs.map((r) => r.serverMs))),
        ms(c.cpuMs),
        spread(c.runs.map((r) => r.cpuMs), ms),
        ms(median(c.runs.map((r) => r.stopMs))),
        other === undefined ? '' : ratio(c.healthyMs / other.healthyMs),
        other === undefined ? '' : ratio(c.cpuMs / other.cpuMs),
        c.mode === 'compiled' && target !== undefined ? `≤ ${ms(target)}` : '',
        verdict(c),
      ]
    }),
    note: "Server part: the banner's `started in` (createServer() to listening: the store, restoring the shapes, publication, slot, replication); the rest of the time to healthy is Node starting and loading the code. CPU at healthy: the server process's user + system time then, every thread; on a shared machine wall time includes waiting for a core, CPU time does not. Stop: SIGTERM to exit.",
  }
  const targets: Table = {
    title: 'Targets',
    headers: ['target', 'figure', 'verdict'],
    rows: Object.entries(TARGET_MS).map(([shapes, target]) => {
      const c = find(Number(shapes), 'compiled')
      return [
        `${plural(Number(shapes), 'shape')}: compiled CLI healthy within ${ms(target)}`,
        c === undefined ? 'not run' : `${ms(c.healthyMs)} (median of ${num(c.runs.length)})`,
        c === undefined ? 'not measured' : c.healthyMs <= target ? 'met' : 'missed',
      ]
    }),
  }
  const chart = (id: string, title: string, y: string, value: (c: Case) => number, withTargets: boolean): ChartSpec => {
    const points: Point[] = all.map((c) => ({ series: LABEL[c.mode], x: c.shapes, y: value(c) / 1000 }))
    const xs = [...new Set(all.map((c) => c.shapes))]
    const targetPoints = withTargets ? xs.flatMap((x) => (TARGET_MS[x] === undefined ? [] : [{ series: TARGET, x, y: TARGET_MS[x]! / 1000 }])) : []
    return {
      id,
      title,
      x: { title: 'shapes in the store', log: true },
      y: { title: y, log: true },
      series: [{ name: LABEL.compiled }, { name: LABEL.source, dashed: true }, ...(targetPoints.length > 0 ? [{ name: TARGET, dashed: true }] : [])],
      points: [...points, ...targetPoints],
    }
  }
  const charts = all.length === 0 ? [] : [
    chart('start-healthy', 'Spawn to healthy', 'seconds (median; log scale)', (c) => c.healthyMs, true),
    chart('start-cpu', 'CPU time used by the time it is healthy', 'CPU seconds (median; log scale)', (c) => c.cpuMs, false),
  ]
  const headline: string[] = []
  for (const shapes of report.sizes) {
    const c = find(shapes, 'compiled')
    if (c === undefined) continue
    const s = find(shapes, 'source')
    const target = TARGET_MS[shapes]
    const loads = c.runs.map((r) => r.load1)
    headline.push(
      `Spawn to healthy with ${plural(shapes, 'shape')}: compiled CLI ${ms(c.healthyMs)} (runs ${spread(c.runs.map((r) => r.healthyMs), ms)}, load average ${spread(loads, (x) => num(x, 1))})` +
        (target === undefined ? '' : `, target ≤ ${ms(target)} ${c.healthyMs <= target ? 'met' : 'missed'}`) +
        (s === undefined ? '' : `; from source ${ms(s.healthyMs)} (compiled ${ratio(c.healthyMs / s.healthyMs)} the time; CPU at healthy ${ms(c.cpuMs)} vs ${ms(s.cpuMs)}, ${ratio(c.cpuMs / s.cpuMs)})`) +
        '.',
    )
  }
  const loads = report.runs.map((r) => r.load1)
  const cores = report.machine?.nproc
  return {
    measures:
      'Wall time from spawning `node packages/server/bin/sluice.js start` to the first 200 of `GET /v1/health`, on a store a previous server left at a clean stop with 10 and with 100,000 shapes, Postgres already running: the compiled CLI (the build in `dist/`: from 2026-11-30 on its bundle `dist/sluice.mjs`, what `sluice start` runs) next to the same CLI run from its TypeScript sources through tsx (`SLUICE_FROM_SOURCE=1`); with the server\'s own part of it, its CPU time by then, and the time to stop.',
    doesNotMeasure: 'An embedded Postgres starting, a start after a crash (the journal replay and the scan of every log), building the sources (a no-op when nothing changed), the first requests after healthy, other machines.',
    method: [
      'The fixture: one table; the first shape made by a real server over HTTP, the rest written through the storage engine with its meta (one `id = $1` shape per id), then the store closed cleanly; one store per shape count, reused by every run.',
      '/v1/health is polled every 5 ms from the spawn; CPU time is read from /proc at the first 200; then SIGTERM, timed to the exit. The server must log that it restored every shape.',
      `${plural(report.runsPerMode, 'run')} per shape count and CLI, after one warm-up start of each that is not counted; the two CLIs alternate, the order reversing every run.`,
    ],
    machine: report.machine === undefined ? ['machine: not recorded in this results file (its own report names it)'] : machineLines(report.machine),
    load: [
      loads.length === 0
        ? 'load average: not recorded'
        : `load average (1 min) at the runs' starts: median ${num(median(loads), 1)}, ${spread(loads, (x) => num(x, 1))}${cores === undefined ? '' : ` on ${plural(cores, 'core')}`}; above the cores' count a start waits for a core, and its wall time grows while its CPU time stays`,
      pressureLine([]),
    ],
    tables: [table, targets].filter((t) => t.rows.length > 0),
    charts,
    headline,
  }
}

export const startSection: ReportSection = {
  id: 'start',
  title: 'Start: spawn to a healthy server',
  stem: 'start',
  render: (file) => render(file.data as Report),
}
