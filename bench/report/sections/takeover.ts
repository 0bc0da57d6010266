/** The takeover benchmark's section: a standby writer replacing a writer that stops or is killed, by shape count. */
import type { TakeoverReport, TakeoverRun, Way } from '../../start/takeover-report.js'
import type { ChartSpec } from '../chart.js'
import { machineLines, median, mib, ms, num, plural, pressureLine, spread } from '../format.js'
import type { ReportSection, SectionContent, Table } from '../section.js'

const LABEL: Record<Way, string> = { SIGTERM: 'writer stopped (SIGTERM)', SIGKILL: 'writer killed (SIGKILL)' }

interface Case {
  readonly shapes: number
  readonly way: Way
  readonly runs: readonly TakeoverRun[]
}

function cases(report: TakeoverReport): Case[] {
  return report.sizes.flatMap((shapes) =>
    report.ways.flatMap((way) => {
      const runs = report.runs.filter((r) => r.shapes === shapes && r.way === way)
      return runs.length === 0 ? [] : [{ shapes, way, runs }]
    }),
  )
}

/** The median of a figure over a case's runs, runs without it left out. */
function med(c: Case, value: (r: TakeoverRun) => number | null): number {
  return median(c.runs.map(value).filter((v): v is number => v !== null && Number.isFinite(v)))
}

const takeoverCpu = (r: TakeoverRun): number => r.cpuHealthyMs - r.cpuWaitingMs

/** From the writer's exit to the standby's health: what the standby itself takes (0 when it answered before the exit was seen). */
const afterExit = (r: TakeoverRun): number => Math.max(0, r.healthyMs - r.writerExitMs)

function render(report: TakeoverReport): SectionContent {
  const all = cases(report)
  const table: Table = {
    title: 'From the signal to the writer, to the standby serving',
    headers: ['shapes', 'writer', 'runs', 'writer gone', 'lock taken', 'shapes restored', 'healthy (median)', 'healthy runs (min – max)', 'healthy after the writer\'s exit (median)', 'after exit, runs (min – max)', 'new row served (median)', 'row runs (min – max)', 'standby CPU, takeover', 'standby RSS at healthy', "writer's own start"],
    align: ['r', 'l', 'r', 'r', 'r', 'r', 'r', 'r', 'r', 'r', 'r', 'r', 'r', 'r', 'r'],
    rows: all.map((c) => [
      num(c.shapes),
      LABEL[c.way],
      num(c.runs.length),
      ms(med(c, (r) => r.writerExitMs)),
      ms(med(c, (r) => r.lockMs)),
      ms(med(c, (r) => r.restoredMs)),
      ms(med(c, (r) => r.healthyMs)),
      spread(c.runs.map((r) => r.healthyMs), ms),
      ms(med(c, afterExit)),
      spread(c.runs.map(afterExit), ms),
      ms(med(c, (r) => r.rowMs)),
      spread(c.runs.map((r) => r.rowMs), ms),
      ms(med(c, takeoverCpu)),
      mib(med(c, (r) => r.rssHealthyKiB) * 1024),
      ms(med(c, (r) => r.writerHealthyMs)),
    ]),
    note: "Medians, in wall time from the signal. Writer gone: its exit, as its parent sees it. Lock taken: the store's LOCK file names the standby (polled every 5 ms). Shapes restored: the standby's log line, once its store is open and its shapes are back. Healthy: its first 200 of /v1/health; after the writer's exit: the same less the writer's exit (0 where the standby answered before its parent saw the writer exit: a stopping writer lets the lock go before it ends). New row served: a row committed right after the signal, in the body of a shape request to the standby from the handle and offset a client of the writer had (retried every 5 ms while the standby does not listen, then long-polled). Standby CPU, takeover: its user + system time from the signal to healthy (every thread). Writer's own start: the writer's spawn to healthy on the same store left at a clean stop, before the run: what a restart without a standby takes, plus the new process's start.",
  }
  const chart: ChartSpec = {
    id: 'takeover-healthy',
    title: 'Signal to the standby healthy',
    x: { title: 'shapes in the store', log: true },
    y: { title: 'seconds (median; log scale)', log: true },
    series: report.ways.map((way) => ({ name: LABEL[way], ...(way === 'SIGKILL' ? { dashed: true } : {}) })),
    points: all.map((c) => ({ series: LABEL[c.way], x: c.shapes, y: med(c, (r) => r.healthyMs) / 1000 })),
  }
  const headline = report.sizes.flatMap((shapes) => {
    const here = all.filter((c) => c.shapes === shapes)
    if (here.length === 0) return []
    const parts = here.map(
      (c) => `${c.way === 'SIGTERM' ? 'after a SIGTERM' : 'after a SIGKILL'} healthy in ${ms(med(c, (r) => r.healthyMs))}${c.runs.length > 1 ? ` (runs ${spread(c.runs.map((r) => r.healthyMs), ms)})` : ''}, ${ms(med(c, afterExit))} after the writer's exit${c.runs.length > 1 ? ` (runs ${spread(c.runs.map(afterExit), ms)})` : ''}, a row committed at the signal served in ${ms(med(c, (r) => r.rowMs))}, ${ms(med(c, takeoverCpu))} of CPU`,
    )
    const start = median(here.flatMap((c) => c.runs.map((r) => r.writerHealthyMs)))
    return [`Standby takeover with ${plural(shapes, 'shape')}: ${parts.join('; ')}; a writer's own start on that store takes ${ms(start)}.`]
  })
  const loads = report.runs.map((r) => r.load1)
  return {
    measures:
      'How long a standby writer (`sluice start --standby`, same storage directory and slot, another port) takes to replace the writer when the writer is stopped with SIGTERM (a rolling upgrade) or killed with SIGKILL (a crash): from the signal, the writer\'s exit, the standby taking the writer lock, restoring its shapes, answering /v1/health, and serving a row committed right after the signal through the shape a client of the writer followed; with the standby\'s CPU time and RSS.',
    doesNotMeasure:
      'A load balancer noticing the change, clients reconnecting (the row is asked for by this process, every 5 ms until the standby listens), requests in flight at the writer, a writer with a large heap or much unflushed work, a standby on another machine (a shared file system), Postgres restarts, other machines.',
    method: [
      `The start benchmark's fixture (bench/start/fixture.ts), shapes ${report.where === 'literal' ? '`id = <n>`, each its own clause text' : '`id = $1`, one per id'}; the runs use a copy of its store (\`cp -a\`) and of its replication slot, so the fixture stays as it was.`,
      `Each run: a writer started and healthy, a standby started and logging that it waits for the writer lock (a standby first builds its store's logs from the writer's heads file and restores its shapes on them, docs/operations.md); ${plural(report.preCommits, 'row')} committed (a transaction each) and followed until the writer serves them; then the signal (t0), and at once a commit to the row of the store's last shape (\`id = <shape count>\`), which a client of the writer followed.`,
      'After the standby serves the row it is stopped with SIGTERM, so the store is left clean for the next run, whose writer therefore starts after a clean stop; the standby then promotes its prepared store: after a SIGKILL over what the killed writer left (journal replay; the logs appended to since the writer last wrote its heads file are read from their entries on), after a SIGTERM over a heads file the writer wrote at its stop, which the standby reads again.',
      `${plural(report.runsPerWay, 'run')} per shape count and way, the ways alternating, their order reversing every run. The standby tries the lock every 100 ms (LOCK_RETRY_MS), which bounds how soon it can see the writer gone.`,
    ],
    machine: machineLines(report.machine),
    load: [
      loads.length === 0
        ? 'load average: not recorded'
        : `load average (1 min) at the runs' starts: median ${num(median(loads), 1)}, ${spread(loads, (x) => num(x, 1))} on ${plural(report.machine.nproc, 'core')}; above the cores' count a takeover waits for a core, and its wall time grows while its CPU time stays`,
      pressureLine([]),
    ],
    tables: all.length === 0 ? [] : [table],
    charts: all.length === 0 ? [] : [chart],
    headline,
  }
}

export const takeoverSection: ReportSection = {
  id: 'takeover',
  title: 'Takeover: a standby replacing the writer',
  stem: 'takeover',
  render: (file) => render(file.data as TakeoverReport),
}
