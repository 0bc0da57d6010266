/**
 * The live benchmark's outputs: `results/live.json` (everything measured,
 * every run) and `results/live.md` (machine, load, method, the table with the
 * targets met or missed). Pure formatting.
 */
import { writeFileSync } from 'node:fs'
import type { PostgresSettings } from '@sluice/test-utils'
import type { LoadNote } from '../pipeline/report.js'
import { median } from '../pipeline/stats.js'
import type { Machine } from '../storage/report.js'
import { ms, num, ratio } from '../report/format.js'

export interface FsyncSample {
  readonly p50Ms: number
  readonly p99Ms: number
  readonly meanMs: number
  readonly samples: number
}

/** Group commits (one journal fdatasync each) and transactions over a stretch, from Sluice's /metrics. */
export interface CommitCount {
  readonly transactions: number
  readonly flushes: number
  /** Flushes per transaction: 1 when every change is made durable on its own, far below 1 when many share one. */
  readonly flushesPerTransaction: number
  readonly meanFlushMs: number
  /** Sluice's event-loop delay over the stretch (nodejs_eventloop_lag_*): how long a ready callback waited. */
  readonly loopP99Ms: number
  readonly loopMaxMs: number
}

export interface LiveRun {
  readonly writes: number
  readonly received: number
  /** Writes of the run no client received (0 unless something was lost). */
  readonly lost: number
  readonly p50Ms: number
  readonly p95Ms: number
  readonly p99Ms: number
  readonly maxMs: number
  readonly meanMs: number
  /** Time for every followed client's handshake (offset=-1, then up to date) before the run. */
  readonly handshakeMs: number
  readonly meanUpdateMs: number
  readonly serverCpuPercent: number | null
  readonly cpuPressurePercent: number | null
  readonly loadavg1: number
  /** Sluice only: group commits per transaction over the timed writes. */
  readonly commits?: CommitCount
  /** Requests, responses with and without data, errors, statuses, as the clients counted them (summed over the client processes). */
  readonly clients: Record<string, unknown>
}

export interface LiveMedian {
  readonly p50Ms: number
  readonly p95Ms: number
  readonly p99Ms: number
  readonly maxMs: number
}

export interface LiveRow {
  readonly shapes: number
  /** Shapes with a live client (all of them unless the open-file limit allows fewer sockets). */
  readonly followed: number
  /** Seconds it took to create the shapes nobody follows (Sluice; the ceiling has nothing to create). */
  readonly createSeconds?: number
  readonly sluice: { readonly runs: readonly LiveRun[]; readonly median: LiveMedian }
  readonly ceiling: { readonly runs: readonly LiveRun[]; readonly median: LiveMedian }
  /** write + fdatasync of a small append in the data directory, once per repetition, next to the runs. */
  readonly fsync: readonly FsyncSample[]
  /** Median of the repetitions' fdatasync p50s. */
  readonly fsyncMs: number
  /** The target's p50 bound: the ceiling's p50 plus one fdatasync. */
  readonly floorMs: number
}

export interface BurstResult {
  readonly connections: number
  readonly seconds: number
  readonly writes: number
  readonly commits: CommitCount
}

export interface Report {
  readonly quick: boolean
  readonly partial: boolean
  readonly machine: Machine & { readonly fdLimit: string }
  readonly postgres: { readonly version: string; readonly settings: PostgresSettings }
  readonly settings: Record<string, unknown>
  readonly sluiceFlags: readonly string[]
  readonly runSeconds: number
  readonly loads: readonly LoadNote[]
  readonly rows: readonly LiveRow[]
  /** Group commit under a busy pipeline: back-to-back commits, Sluice's flushes per transaction. */
  readonly burst?: BurstResult
  /** Observations written after a run, by whoever read it. */
  readonly notes?: readonly string[]
}

/** The p99 bound of the target, at every shape count. */
export const P99_TARGET_MS = 50

export function liveMedian(runs: readonly LiveRun[]): LiveMedian {
  return {
    p50Ms: median(runs.map((r) => r.p50Ms)),
    p95Ms: median(runs.map((r) => r.p95Ms)),
    p99Ms: median(runs.map((r) => r.p99Ms)),
    maxMs: median(runs.map((r) => r.maxMs)),
  }
}

function met(ok: boolean): string {
  return ok ? 'met' : 'missed'
}

/** One sentence per shape count: both targets, met or missed, with figures and ratios. */
export function targetLines(report: Report): string[] {
  return report.rows.map((row) => {
    const s = row.sluice.median
    const followed = row.followed < row.shapes ? ` (${num(row.followed)} followed)` : ''
    return `${num(row.shapes)} shape${row.shapes === 1 ? '' : 's'}${followed}: p50 ${ms(s.p50Ms)} vs floor ${ms(row.floorMs)} (ceiling ${ms(row.ceiling.median.p50Ms)} + fdatasync ${ms(row.fsyncMs)}): ${ratio(s.p50Ms / row.floorMs)} the floor, **${met(s.p50Ms <= row.floorMs)}**; p99 ${ms(s.p99Ms)} vs ${P99_TARGET_MS} ms: ${ratio(s.p99Ms / P99_TARGET_MS)}, **${met(s.p99Ms <= P99_TARGET_MS)}**.`
  })
}

export function burstLine(report: Report): string | undefined {
  const b = report.burst
  if (b === undefined) return undefined
  const idle = report.rows[0]?.sluice.runs.map((r) => r.commits?.flushesPerTransaction).filter((x): x is number => x !== undefined) ?? []
  const idleText = idle.length === 0 ? '' : ` At ${String(report.settings.writeRate)} commits/s (the latency runs) it was ${num(median(idle), 2)} flushes per transaction: each change made durable on its own, at once.`
  return `Group commit under load: ${num(b.writes)} back-to-back commits in ${num(b.seconds)} s from ${b.connections} connections (${num(b.commits.transactions / b.seconds)} transactions/s reached Sluice) took ${num(b.commits.flushes)} flushes (one journal fdatasync each): ${num(b.commits.flushesPerTransaction, 3)} per transaction, one fdatasync shared by ${num(1 / b.commits.flushesPerTransaction, 1)} transactions on average (mean flush ${ms(b.commits.meanFlushMs)}).${idleText}`
}

function list<T>(runs: readonly T[], f: (r: T) => string): string {
  return runs.map(f).join(', ')
}

function pct(x: number | null | undefined): string {
  return x === null || x === undefined || !Number.isFinite(x) ? '-' : `${x.toFixed(0)}%`
}

export function renderMarkdown(report: Report): string {
  const s = report.settings
  const out: string[] = []
  out.push(`# Live benchmark: write-to-client latency with many independent shapes${report.quick ? ' (QUICK smoke run: short runs, one repetition; not figures to quote)' : report.partial ? ' (partial run)' : ''}`)
  out.push('')
  out.push(
    "K independent shapes (`k = i`), one live long-poll client each (Electric's benchmark 3): the time from a writer sending a one-row update to the shape's client holding the whole response, next to a bare fastify server woken by Postgres LISTEN/NOTIFY (the in-memory ceiling) and to the physical floor of durable-before-sent (the ceiling plus one fdatasync of this disk, measured in the same run).",
  )
  out.push('')
  out.push('## Machine')
  out.push('')
  const m = report.machine
  out.push(`- ${m.nproc} CPUs (${m.cpu}), ${m.memoryGiB} GiB RAM, ${m.os}, Node ${m.node}; open-file limit ${m.fdLimit}`)
  out.push(`- data on ${m.filesystem} (${m.dataDir}); Postgres ${report.postgres.version} (fsync off)`)
  out.push(`- run on ${m.date}, ${num(report.runSeconds)} s`)
  out.push('- **The machine is shared** with other engineers\' builds and tests: load averages and CPU pressure are shown with every run.')
  out.push('')
  out.push('| moment | load average (1, 5, 15 min) |')
  out.push('|---|---|')
  for (const l of report.loads) out.push(`| ${l.label} (${l.at.slice(11, 19)} UTC) | ${l.loadavg.map((x) => x.toFixed(2)).join(', ')} |`)
  out.push('')
  out.push('## Method')
  out.push('')
  out.push(
    `- **Processes.** \`live/run.ts\` orchestrates a throwaway Postgres, the Sluice server (\`sluice start\`, flags \`${report.sluiceFlags.join(' ')}\`), the ceiling (\`live/ceiling-server.ts\`), the live clients (\`live/live-clients.ts\`, up to ${num(Number(s.clientsPerProcess))} sockets per process, each process on its own loopback address), the writer (\`live/writer.ts\`) and the fdatasync probe (\`live/fsync-probe.ts\`), each its own process on the same ${m.nproc} cores.`,
  )
  out.push(
    `- **Clients.** Each client shakes hands (\`offset=-1\`, then until up-to-date) and long-polls (\`live=true\`, handle, offset, cursor), re-polling as soon as a response is complete. The writer commits one-row updates at ${String(s.writeRate)}/s into uniformly random followed shapes, each stamped with CLOCK_MONOTONIC just before it is sent; the client subtracts the stamp when the whole body has arrived. ${String(s.liveSeconds)} s of writes per run after ${String(s.liveWarmupSeconds)} s of warm-up; long-poll timeout ${num(Number(s.longPollTimeoutMs) / 1000)} s for both servers. Sluice's runs start once its /metrics shows no shape being created and one journal segment (the checkpoint after creating shapes done; at most 120 s): they measure the steady state.`,
  )
  out.push(
    `- **Shapes nobody follows.** A server holds one socket per live client, and this machine's open-file limit (${m.fdLimit}, not raisable here) caps the sockets: past ${num(Number(s.followCap))} shapes the extra shapes are created (each through \`offset=-1\` until up to date, ${String(s.createConcurrency)} at a time) and exist on the server, but only ${num(Number(s.followCap))} have a client and take the writes.`,
  )
  out.push(
    `- **The floor.** Before each repetition \`fsync-probe.ts\` appends ${String(s.fsyncBytes)} bytes to a file in the data directory and fdatasyncs it, ${String(s.fsyncSamples)} times ${String(s.fsyncGapMs)} ms apart; its median is one fdatasync of this disk. The p50 target is the ceiling's p50 plus that; the p99 target is ${P99_TARGET_MS} ms.`,
  )
  out.push(
    `- **Group commit.** Sluice's \`/metrics\` is read before and after each of its timed runs: \`sluice_storage_flush_duration_seconds_count\` (flushes, each one journal fdatasync) over \`sluice_transactions_routed_total\`, and the mean flush (\`sluice_storage_flush_duration_seconds\`: from the start of a group commit until its watermark is published, the journal's write and fdatasync included, and any wait for the event loop between its steps). After the latency rows, ${String(s.burstConnections)} writer connections commit back to back for ${String(s.burstSeconds)} s (no clients) and the same counters are read.`,
  )
  out.push(`- **Repetitions.** ${String(s.reps)} per shape count, the server order alternating; medians of the repetitions.`)
  out.push('')
  out.push('## Results')
  out.push('')
  out.push(...targetLines(report).map((l) => `- ${l}`))
  const b = burstLine(report)
  if (b !== undefined) out.push(`- ${b}`)
  out.push('')
  out.push('| shapes | followed | server | p50 | p95 | p99 | max | p50 / floor | p50 per run | p99 per run | writes / lost | fdatasync p50 (per rep) | flushes / tx | mean flush | event-loop delay p99 / max | handshake | server CPU | CPU pressure | load (1 min) |')
  out.push('|--:|--:|---|--:|--:|--:|--:|--:|---|---|---|---|---|---|---|---|---|---|---|')
  for (const row of report.rows) {
    for (const who of ['sluice', 'ceiling'] as const) {
      const side = row[who]
      const med = side.median
      out.push(
        `| ${num(row.shapes)} | ${num(row.followed)} | ${who === 'sluice' ? 'Sluice' : 'ceiling'} | ${ms(med.p50Ms)} | ${ms(med.p95Ms)} | ${ms(med.p99Ms)} | ${ms(med.maxMs)} | ${ratio(med.p50Ms / row.floorMs)} | ${list(side.runs, (r) => ms(r.p50Ms))} | ${list(side.runs, (r) => ms(r.p99Ms))} | ${list(side.runs, (r) => `${r.writes}/${r.lost}`)} | ${who === 'sluice' ? list(row.fsync, (f) => ms(f.p50Ms)) : ''} | ${list(side.runs, (r) => (r.commits === undefined ? '' : num(r.commits.flushesPerTransaction, 2)))} | ${list(side.runs, (r) => (r.commits === undefined ? '' : ms(r.commits.meanFlushMs)))} | ${list(side.runs, (r) => (r.commits === undefined ? '' : `${ms(r.commits.loopP99Ms)} / ${ms(r.commits.loopMaxMs)}`))} | ${list(side.runs, (r) => `${(r.handshakeMs / 1000).toFixed(1)} s`)} | ${list(side.runs, (r) => pct(r.serverCpuPercent))} | ${list(side.runs, (r) => pct(r.cpuPressurePercent))} | ${list(side.runs, (r) => r.loadavg1.toFixed(1))} |`,
      )
    }
  }
  out.push('')
  if (report.notes !== undefined && report.notes.length > 0) {
    out.push('## Notes on this run')
    out.push('')
    out.push(...report.notes.map((l) => `- ${l}`))
    out.push('')
  }
  out.push(`Reproduce: \`${report.quick ? 'QUICK=1 ' : ''}npm run bench:live\` (or \`pnpm --filter @sluice/bench run bench:live\`); every run's figures are in \`results/${report.quick ? 'live.quick' : report.partial ? 'live.partial' : 'live'}.json\`.`)
  out.push('')
  return out.join('\n')
}

export function writeReport(report: Report, basePath: string): void {
  writeFileSync(`${basePath}.json`, `${JSON.stringify(report, null, 2)}\n`)
  writeFileSync(`${basePath}.md`, renderMarkdown(report))
}
