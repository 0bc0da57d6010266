/**
 * The pipeline benchmark's outputs: `results/pipeline.json` (everything
 * measured) and `results/pipeline.md` (machine, load, method, tables, targets).
 */
import { readFileSync, writeFileSync } from 'node:fs'
import type { Machine } from '../storage/report.js'
import type { PostgresSettings } from '@sluice/test-utils'
import { num as n } from '../report/format.js'

export interface MemorySample {
  readonly rss: number
  readonly heapUsed: number
  readonly heapTotal: number
  readonly external: number
  readonly arrayBuffers: number
}

export interface LoadNote {
  readonly label: string
  readonly at: string
  /** 1, 5 and 15-minute load averages. */
  readonly loadavg: readonly number[]
}

export interface RegistrationResult {
  readonly set: string
  readonly title: string
  readonly count: number
  readonly concurrency: number
  readonly snapshotConnections: number
  readonly wallMs: number
  readonly shapesPerSec: number
  readonly meanResolveMs: number
  readonly meanReadyMs: number
  readonly meanSnapshotMs: number
  readonly meanFinishMs: number
  readonly cpuUserMs: number
  readonly cpuSystemMs: number
  /** At process start, before `Pipeline.start`. */
  readonly processStart: MemorySample
  /** After `Pipeline.start`, before the first shape (full GC). */
  readonly memoryBefore: MemorySample
  /** After the last shape is ready (full GC). */
  readonly memoryAfter: MemorySample
  /** Disk blocks of the store after registering. */
  readonly diskBytes: number
  readonly cpuPressurePercent: number | null
  readonly load: LoadNote
}

export interface ConcurrentResult {
  readonly count: number
  readonly tableRows: number
  readonly snapshotConnections: number
  readonly wallMs: number
  readonly meanResolveMs: number
  readonly meanSnapshotMs: number
  readonly meanFinishMs: number
  readonly cpuUserMs: number
  readonly cpuSystemMs: number
  readonly cpuPressurePercent: number | null
  readonly load: LoadNote
}

export interface RunResult {
  readonly ms: number
  readonly changesPerSec: number
  /** CPU of the walsender that decoded for this run (whole life of the process). */
  readonly walsenderCpuMs: number | null
  /** CPU of the pipeline process from `start` resolving to the workload durable. */
  readonly pipelineCpuMs: number | null
  /** The system-time part of it (added after the first full run; absent there). */
  readonly pipelineSystemCpuMs?: number | null
  /**
   * Minor page faults of the pipeline process in the window: first touches of
   * fresh memory, about 15 µs each on the benchmark VM (its host backs guest
   * memory lazily). Absent in runs before it was added.
   */
  readonly pageFaults?: number | null
  /** `Pipeline.start` (open the store, restore the shapes, connect), not in `ms`. */
  readonly startMs: number | null
  readonly cpuPressurePercent: number | null
  readonly loadavg1: number
}

export interface SetResult {
  readonly set: string
  readonly title: string
  readonly count: number
  readonly indexed: boolean
  readonly matchesPerChange: number
  readonly runs: readonly RunResult[]
  readonly medianChangesPerSec: number
  readonly ratioToCeiling: number
}

export interface PhaseResult {
  readonly id: string
  readonly label: string
  readonly table: string
  readonly perTx: number
  readonly workload: {
    readonly changes: number
    readonly transactions: number
    /** Per repetition: each writes the workload afresh. */
    readonly walBytes: readonly number[]
    readonly generateMs: readonly number[]
  }
  readonly ceiling: { readonly runs: readonly RunResult[]; readonly medianChangesPerSec: number }
  readonly sets: readonly SetResult[]
}

/**
 * Where a keep-up variant's processes ran: `shared`, wherever the scheduler
 * put them on the machine's cores; `separate`, Postgres (every process) and
 * pgbench on one CPU, the pipeline (or, in the control, pg_recvlogical) on another.
 */
export type KeepUpCores = 'shared' | 'separate' | 'services'
/** Every keep-up variant, in the order a run takes them. */
export const KEEPUP_VARIANTS: readonly KeepUpCores[] = ['shared', 'separate', 'services']

/** A process's or thread's scheduler time over the load, as shares of the load's wall time (/proc schedstat). */
export interface SchedShare {
  /** Per cent of the window on a CPU; summed over threads, so above 100 when several ran at once. */
  readonly runPercent: number
  /** Per cent of the window runnable but waiting on a run queue for a CPU; summed over threads. */
  readonly waitPercent: number
}

export interface KeepUpResult {
  /** Absent in runs before the separate-cores variant: shared. */
  readonly cores?: KeepUpCores
  /** The CPU lists (`taskset -c`) of a separate-cores run. */
  readonly cpus?: { readonly postgres: string; readonly pipeline: string } | null
  readonly shapes: number
  readonly restoreMs: number
  readonly clients: number
  readonly seconds: number
  readonly baselineTps: number
  /**
   * The same load with pg_recvlogical alone streaming it (confirming every
   * second): what decoding by itself manages here. Absent in earlier runs.
   */
  readonly decoderAlone?: {
    readonly tps: number
    readonly samples: number
    readonly lagP50: number
    readonly lagP99: number
    readonly lagMax: number
    readonly firstThirdMedian: number
    readonly lastThirdMedian: number
    /** Scheduler time of its walsender and of pg_recvlogical over the load (null off Linux; absent in earlier runs). */
    readonly walsender?: SchedShare | null
    readonly recvlogical?: SchedShare | null
    /** CPU of every Postgres process over the load, per cent of one core. */
    readonly postgresCpuPercent?: number | null
  }
  readonly tps: number
  readonly transactions: number
  readonly walBytesPerSec: number
  readonly samples: number
  readonly sampleMs: number
  readonly lagP50: number
  readonly lagP99: number
  readonly lagMax: number
  readonly firstThirdMedian: number
  readonly lastThirdMedian: number
  readonly firstThirdP99: number
  readonly lastThirdP99: number
  readonly caughtUpMs: number | null
  readonly pipelineCpuPercent: number | null
  readonly walsenderCpuPercent: number | null
  /**
   * Scheduler time over the load of the pipeline process (all threads), of its
   * main thread alone (the event loop: what is left of 100% after running and
   * waiting, it slept) and of its walsender. Null off Linux; absent in earlier runs.
   */
  readonly sched?: {
    readonly pipeline: SchedShare | null
    readonly pipelineMain: SchedShare | null
    readonly walsender: SchedShare | null
  } | null
  /** CPU of every Postgres process over the load (backends, walsender, the rest), per cent of one core. */
  readonly postgresCpuPercent?: number | null
  readonly cpuPressurePercent: number | null
  readonly memoryRestored: MemorySample
  readonly memoryAfter: MemorySample
  readonly load: LoadNote
  /** [ms since the load started, lag in bytes] every sample. */
  readonly series: ReadonlyArray<readonly [number, number]>
}

export interface Report {
  readonly quick: boolean
  readonly partial: boolean
  /** Whether the shape sets were registered by an earlier run and reused (BENCH_FIXTURE). */
  readonly fixture?: boolean
  readonly machine: Machine
  readonly postgres: { readonly version: string; readonly binDir: string; readonly settings: PostgresSettings }
  readonly protoVersion: number
  readonly settings: object
  readonly runSeconds: number
  readonly loads: readonly LoadNote[]
  readonly registrations: readonly RegistrationResult[]
  readonly concurrent: readonly ConcurrentResult[]
  readonly throughput: readonly PhaseResult[]
  /** Keeping up with every process on the shared cores (BENCH_KEEPUP_CORES=shared|both). */
  readonly keepUp: KeepUpResult | null
  /** Keeping up with Postgres and the pipeline on separate CPUs (BENCH_KEEPUP_CORES=separate|both); absent in earlier runs. */
  readonly keepUpSeparate?: KeepUpResult | null
  /** Why the separate-cores variant did not run although asked for (no taskset, one CPU, not Linux). */
  readonly keepUpSeparateSkipped?: string
  /** Keeping up on the shared cores with Postgres and the pipeline in CPU groups of their own (cpu-groups.ts); absent in earlier runs. */
  readonly keepUpServices?: KeepUpResult | null
  /** Why the services variant did not run although asked for (no writable cpu controller, not Linux). */
  readonly keepUpServicesSkipped?: string
}

/** The keep-up variants a report holds, shared cores first. */
export function keepUpVariants(report: Report): KeepUpResult[] {
  return [report.keepUp, report.keepUpSeparate ?? null, report.keepUpServices ?? null].filter((k): k is KeepUpResult => k !== null)
}

export interface TargetCheck {
  readonly target: string
  readonly figure: string
  readonly met: boolean | undefined
}

const MiB = 2 ** 20

function rate(x: number): string {
  if (!Number.isFinite(x)) return '-'
  return x >= 10_000 ? `${(x / 1000).toFixed(1)}k` : x.toFixed(0)
}

function pct(x: number | null | undefined): string {
  return x === null || x === undefined || !Number.isFinite(x) ? '-' : `${(x * 100).toFixed(0)}%`
}

function secs(ms: number | null | undefined): string {
  return ms === null || ms === undefined || !Number.isFinite(ms) ? '-' : ms < 10_000 ? `${(ms / 1000).toFixed(2)} s` : `${(ms / 1000).toFixed(1)} s`
}

function bytes(b: number): string {
  if (!Number.isFinite(b)) return '-'
  if (b >= MiB) return `${(b / MiB).toFixed(1)} MiB`
  if (b >= 1024) return `${(b / 1024).toFixed(0)} KiB`
  return `${b.toFixed(0)} B`
}

export function targetChecks(report: Report): TargetCheck[] {
  const checks: TargetCheck[] = []
  for (const phase of report.throughput) {
    if (phase.table !== 'bench_items') continue
    const indexed = phase.sets.filter((s) => s.indexed && s.matchesPerChange === 1)
    if (indexed.length === 0) continue
    const worst = indexed.reduce((a, b) => (b.ratioToCeiling < a.ratioToCeiling ? b : a))
    checks.push({
      target: `${phase.perTx}-row transactions: at least 50% of the decoding ceiling at every shape count (indexed \`col = const\`)`,
      figure: indexed.map((s) => `${n(s.count)}: ${pct(s.ratioToCeiling)}`).join(', ') + ` (lowest: ${worst.set})`,
      met: indexed.every((s) => s.ratioToCeiling >= 0.5),
    })
  }
  for (const phase of report.throughput) {
    const big = phase.sets.find((s) => s.set === 'eq100k')
    if (big === undefined) continue
    checks.push({
      target: `${phase.perTx}-row transactions: at least 50k changes/s with ${n(big.count)} shapes`,
      figure: `${rate(big.medianChangesPerSec)} changes/s (ceiling ${rate(phase.ceiling.medianChangesPerSec)})`,
      met: big.medianChangesPerSec >= 50_000,
    })
  }
  const reg = report.registrations.find((r) => r.set === 'eq100k')
  if (reg !== undefined) {
    checks.push({
      target: `RSS with ${n(reg.count)} idle shapes under 1 GB`,
      figure: `${bytes(reg.memoryAfter.rss)} (${n((reg.memoryAfter.rss - reg.memoryBefore.rss) / reg.count)} bytes per shape over the empty pipeline)`,
      met: reg.memoryAfter.rss < 1e9,
    })
  }
  for (const k of keepUpVariants(report)) {
    // Bounded means the last third's median lag is about the first third's: half
    // again as much (plus 4 MiB of slack for one slow flush) counts as growing.
    const grows = k.lastThirdMedian > Math.max(1.5 * k.firstThirdMedian, k.firstThirdMedian + 4 * 1024 * 1024)
    checks.push({
      target: `keeps up with a saturating insert load with ${n(k.shapes)} shapes (lag does not grow), ${placementText(k)}`,
      figure: `lag median ${bytes(k.firstThirdMedian)} in the first third, ${bytes(k.lastThirdMedian)} in the last; caught up ${k.caughtUpMs === null ? 'never' : secs(k.caughtUpMs)} after the load`,
      met: !grows && k.caughtUpMs !== null,
    })
  }
  return checks
}

function verdict(met: boolean | undefined): string {
  return met === undefined ? 'not measured' : met ? 'met' : 'missed'
}

export function markdown(report: Report): string {
  const out: string[] = []
  const m = report.machine
  const s = report.settings as Record<string, unknown>
  out.push('# Pipeline benchmark')
  out.push('')
  out.push(
    `Produced by \`npm run bench:pipeline\` (\`pnpm --filter @sluice/bench run bench:pipeline\`, \`bench/pipeline/run.ts\`)${report.quick ? ' in QUICK mode (a smoke run, not results)' : ''}${report.partial ? ' for a subset (ONLY=…)' : ''}${report.fixture === true ? ', on shape sets registered by an earlier run and reused (BENCH_FIXTURE: their registration figures are that run\'s, and each set\'s store holds the changes of the runs before)' : ''} on ${m.date.slice(0, 10)}; the run took ${n(report.runSeconds / 60, 1)} minutes.`,
  )
  out.push('')
  out.push(
    '**Measures:** row changes per second from a replication slot into durable shape logs (the `Pipeline` of `@sluice/server`: pgoutput decoding, transaction assembly, the shape router, change encoding, the file storage engine with group commit), next to Postgres decoding the same WAL with nothing behind it; replication lag under a saturating insert load; the pipeline process\'s memory with 100k shapes; the time to create shapes.',
  )
  out.push(
    '**Does not measure:** HTTP or clients, reads of the logs, initial snapshots of large tables, a Postgres on another machine (here Postgres, the load and the pipeline share 2 cores; the keep-up phase\'s separate-cores variant gives the pipeline one of them to itself), or any other machine: the figures hold for this machine and this run only.',
  )
  out.push('')
  out.push('## Machine and load')
  out.push('')
  out.push('| | |')
  out.push('|---|---|')
  out.push(`| CPU | ${m.nproc} x ${m.cpu} |`)
  out.push(`| memory | ${m.memoryGiB} GiB |`)
  out.push(`| node | ${m.node} |`)
  out.push(`| OS | ${m.os} |`)
  out.push(`| shape logs on | ${m.filesystem} |`)
  out.push(`| Postgres | ${report.postgres.version} (${report.postgres.binDir}) |`)
  out.push(`| date | ${m.date} |`)
  out.push('')
  out.push(
    "The machine is a shared VM: its host and other work on it add load the benchmark does not control, and the load averages also count the benchmark's own processes (pgbench's 8 clients in the keep-up phases). Load averages (1, 5, 15 min) as the run went:",
  )
  out.push('')
  out.push('| point | load average |')
  out.push('|---|---|')
  for (const l of report.loads) out.push(`| ${l.label} (${l.at.slice(11, 19)} UTC) | ${l.loadavg.map((x) => x.toFixed(2)).join(', ')} |`)
  out.push('')
  out.push(
    `Each timed run waited up to ${quietWait(s)} for the machine's CPU pressure to settle, and records the share of its wall time in which some task waited for a CPU (Linux PSI: *CPU pressure* below); on 2 cores the benchmark's own processes (Postgres's walsender and backends, the pipeline, pgbench) raise it too.`,
  )
  out.push('')
  out.push('## Postgres settings')
  out.push('')
  const pg = report.postgres.settings
  out.push(
    `\`fsync=${fmt(pg.fsync)}\`, \`synchronous_commit=${fmt(pg.synchronous_commit)}\`, \`full_page_writes=${fmt(pg.full_page_writes)}\`: **Postgres's own fsync is off**, so its commit rate is bounded by CPU rather than by this VM's disk (the hardest input for a sync engine on the same machine). Sluice's storage engine syncs as in production (group commit: one fdatasync of the journal, with the watermark, per flush, every 10 ms; checkpoints write the logs back and sync them with one syncfs). Also: ${Object.entries(
      pg,
    )
      .filter(([k]) => !['fsync', 'synchronous_commit', 'full_page_writes'].includes(k))
      .map(([k, v]) => `\`${k}=${fmt(v)}\``)
      .join(', ')}.`,
  )
  out.push('')
  out.push('## Method')
  out.push('')
  out.push(...METHOD(report, s))
  out.push('')
  out.push('## Throughput (item 14)')
  out.push('')
  out.push(
    'Median of the repetitions; *vs ceiling* is the median rate over pg_recvlogical\'s median rate on the same WAL. *pipeline CPU/change* is the pipeline process\'s CPU time (user + system, all threads) from streaming start to durable, per change; *page faults/change* its minor page faults in that window per change (first touches of fresh memory, which cost about 15 µs each on this VM). *walsender CPU* is the decoding backend\'s CPU time over the run\'s wall time. *start* is `Pipeline.start` (open the store, restore every shape, connect), not part of the timed run.',
  )
  out.push('')
  for (const phase of report.throughput) {
    const w = phase.workload
    out.push(`### ${phase.label}`)
    out.push('')
    out.push(
      `${n(w.changes)} changes in ${n(w.transactions)} transactions (+1 marker) per repetition, ${w.walBytes.map(bytes).join(', ')} of WAL; Postgres wrote them in ${w.generateMs.map((ms) => secs(ms)).join(', ')} (median ${n((w.transactions / median(w.generateMs)) * 1000)} commits/s, server-side procedure).`,
    )
    out.push('')
    out.push('| shapes | each change hits | changes/s (median) | runs (changes/s) | vs ceiling | shape-log entries/s | pipeline CPU/change | page faults/change | walsender CPU | start | CPU pressure |')
    out.push('|---|--:|--:|---|--:|--:|--:|--:|--:|--:|--:|')
    const c = phase.ceiling
    out.push(
      `| **ceiling**: pg_recvlogical to /dev/null | - | ${rate(c.medianChangesPerSec)} | ${c.runs.map((r) => rate(r.changesPerSec)).join(', ')} | 100% | - | - | - | ${c.runs.map((r) => (r.walsenderCpuMs === null ? '-' : pct(r.walsenderCpuMs / r.ms))).join(', ')} | - | ${c.runs.map((r) => pctRaw(r.cpuPressurePercent)).join(', ')} |`,
    )
    for (const set of phase.sets) {
      const cpuPerChange = median(set.runs.map((r) => ((r.pipelineCpuMs ?? Number.NaN) * 1000) / w.changes))
      const faultsPerChange = median(set.runs.map((r) => (r.pageFaults ?? Number.NaN) / w.changes))
      out.push(
        `| ${set.title}${set.indexed ? '' : ' (not indexed)'} | ${n(set.matchesPerChange)} | ${rate(set.medianChangesPerSec)} | ${set.runs.map((r) => rate(r.changesPerSec)).join(', ')} | ${pct(set.ratioToCeiling)} | ${rate(set.medianChangesPerSec * set.matchesPerChange)} | ${n(cpuPerChange, 1)} µs | ${n(faultsPerChange, 2)} | ${set.runs.map((r) => (r.walsenderCpuMs === null ? '-' : pct(r.walsenderCpuMs / r.ms))).join(', ')} | ${secs(median(set.runs.map((r) => r.startMs ?? Number.NaN)))} | ${set.runs.map((r) => pctRaw(r.cpuPressurePercent)).join(', ')} |`,
      )
    }
    out.push('')
  }
  out.push('## Targets')
  out.push('')
  out.push('| target | figure | verdict |')
  out.push('|---|---|---|')
  for (const t of targetChecks(report)) out.push(`| ${t.target} | ${t.figure} | ${verdict(t.met)} |`)
  out.push('')
  const variants = keepUpVariants(report)
  if (variants.length > 0 || report.keepUpSeparateSkipped !== undefined) {
    out.push('## Keeping up (item 15)')
    out.push('')
    out.push(...keepUpSection(report, variants))
  }
  if (report.registrations.length > 0) {
    out.push('## Memory and shape creation (item 16)')
    out.push('')
    const big = report.registrations.find((r) => r.set === 'eq100k')
    if (big !== undefined) {
      const perRss = (big.memoryAfter.rss - big.memoryBefore.rss) / big.count
      const perHeap = (big.memoryAfter.heapUsed - big.memoryBefore.heapUsed) / big.count
      out.push(
        `With ${n(big.count)} idle shapes the pipeline process holds **${bytes(big.memoryAfter.rss)} RSS** (${bytes(big.memoryAfter.heapUsed)} of JS heap in use), up from ${bytes(big.memoryBefore.rss)} RSS / ${bytes(big.memoryBefore.heapUsed)} heap with the pipeline started and no shapes: **${n(perRss)} bytes of RSS and ${n(perHeap)} bytes of heap per shape** (after a full GC; Electric users report about 600 KB per shape). On disk each shape takes ${n(big.diskBytes / big.count)} bytes (four small files and a directory).`,
      )
      out.push('')
    }
    out.push(
      'Registering each set: a fresh pipeline process, `resolve` then `ready` for every shape with at most `in flight` creations at once, on an empty table (snapshots return no rows). *resolve*, *waiting*, *snapshot* and *finish* are mean times per shape: `resolve()` (catalog query, where-clause compile, publication check); from `resolve` returning to the snapshot starting (waiting for one of the snapshot connections, then the router registration); `createShape` to `finish` (the snapshot transaction on its connection); and `finish` to the log published (the group-commit flush that makes the new log durable).',
    )
    out.push('')
    out.push('| set | shapes | in flight | snapshot connections | wall time | shapes/s | resolve | waiting | snapshot | finish | CPU user+sys | RSS before -> after | heap before -> after | disk | CPU pressure |')
    out.push('|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|---|--:|--:|')
    for (const r of report.registrations) {
      out.push(
        `| ${r.title} | ${n(r.count)} | ${r.concurrency} | ${r.snapshotConnections} | ${secs(r.wallMs)} | ${n(r.shapesPerSec)} | ${n(r.meanResolveMs, 1)} ms | ${n(r.meanReadyMs - r.meanSnapshotMs - r.meanFinishMs, 1)} ms | ${n(r.meanSnapshotMs, 1)} ms | ${n(r.meanFinishMs, 1)} ms | ${secs(r.cpuUserMs + r.cpuSystemMs)} | ${bytes(r.memoryBefore.rss)} -> ${bytes(r.memoryAfter.rss)} | ${bytes(r.memoryBefore.heapUsed)} -> ${bytes(r.memoryAfter.heapUsed)} | ${bytes(r.diskBytes)} | ${pctRaw(r.cpuPressurePercent)} |`,
      )
    }
    out.push('')
  }
  if (report.concurrent.length > 0) {
    out.push('### 1,000 shapes requested at once')
    out.push('')
    out.push(
      'All 1,000 `resolve` calls are made at once (1,000 different `k = const` shapes on a 500-row table, so each snapshot reads 0 or 1 rows), then every `ready` awaited; wall time from the first `resolve` call to the last `ready`. Columns as in the table above (mean per shape); *resolve* includes queueing for the pipeline\'s catalog pool (4 connections), which every `resolve` uses for its catalog query.',
    )
    out.push('')
    out.push('| snapshot connections | shapes | wall time | shapes/s | resolve | snapshot | finish | CPU user+sys | CPU pressure |')
    out.push('|--:|--:|--:|--:|--:|--:|--:|--:|--:|')
    for (const c of report.concurrent) {
      out.push(
        `| ${c.snapshotConnections} | ${n(c.count)} | ${secs(c.wallMs)} | ${n((c.count / c.wallMs) * 1000)} | ${n(c.meanResolveMs, 1)} ms | ${n(c.meanSnapshotMs, 1)} ms | ${n(c.meanFinishMs, 1)} ms | ${secs(c.cpuUserMs + c.cpuSystemMs)} | ${pctRaw(c.cpuPressurePercent)} |`,
      )
    }
    out.push('')
  }
  return out.join('\n')
}

function placementText(k: KeepUpResult): string {
  const cores = k.cores ?? 'shared'
  if (cores === 'services') return 'shared cores, Postgres and the pipeline each in a CPU group of its own'
  return cores === 'shared' ? 'shared cores' : `separate cores (Postgres and pgbench on CPU ${k.cpus?.postgres ?? '?'}, the pipeline on CPU ${k.cpus?.pipeline ?? '?'})`
}

/** A variant's column heading and the JSON field holding it. */
const VARIANT_NAMES: Readonly<Record<KeepUpCores, { readonly heading: string; readonly field: string }>> = {
  shared: { heading: 'shared cores', field: 'keepUp' },
  separate: { heading: 'separate cores', field: 'keepUpSeparate' },
  services: { heading: 'shared cores, CPU groups', field: 'keepUpServices' },
}

function ofCore(x: number | null | undefined): string {
  return x === null || x === undefined || !Number.isFinite(x) ? 'n/a' : `${n(x)}% of one core`
}

/** "running / waiting for a CPU", per cent of the load's wall time; n/a where not measured (not Linux, earlier runs). */
function sched(x: SchedShare | null | undefined): string {
  return x === null || x === undefined ? 'n/a' : `${n(x.runPercent)}% / ${n(x.waitPercent)}%`
}

/** The keep-up section: a column per variant (shared cores, separate cores), each with its own baseline and control. */
function keepUpSection(report: Report, variants: readonly KeepUpResult[]): string[] {
  const out: string[] = []
  const k0 = variants[0]
  if (k0 !== undefined) {
    out.push(
      `pgbench (\`${fmtScript()}\`, \`-M prepared\`, ${k0.clients} clients, 2 threads) inserted single rows into \`bench_items\` for ${k0.seconds} s while a pipeline with ${n(k0.shapes)} shapes \`k100k = const\` (restored from disk) streamed them; every change lands in one shape. The slot's lag, \`pg_current_wal_lsn() - confirmed_flush_lsn\`, was sampled every ${k0.sampleMs} ms from the orchestrator (the pipeline confirms its durable watermark after each flush, so this is WAL written but not yet durable in the shape logs, plus at most one status message in flight).`,
    )
    out.push('')
  }
  const has = (cores: KeepUpCores): boolean => variants.some((k) => (k.cores ?? 'shared') === cores)
  out.push(
    [
      variants.length > 1 ? `${variants.length === 2 ? 'Two' : 'Three'} placements, each with its own baseline (the same pgbench without a pipeline) and control (the same load with pg_recvlogical alone streaming it, to /dev/null, confirming every 1 s).` : 'The baseline is the same pgbench without a pipeline; the control the same load with pg_recvlogical alone streaming it (to /dev/null, confirming every 1 s).',
      has('shared')
        ? `**Shared cores**: every process wherever the scheduler puts it on this machine's ${report.machine.nproc} cores, so the pipeline competes for CPU with a saturated Postgres, its walsender and pgbench. Linux's autogroup scheduling shares the CPUs out by session, and Postgres gives each backend a session of its own: with ${k0?.clients ?? 8} clients the pipeline gets about one share in a dozen.`
        : '',
      has('separate')
        ? '**Separate cores**: Postgres (the postmaster and every process it forks, the walsender included) and pgbench pinned to one CPU, the pipeline (and, in the control, pg_recvlogical) to the other, with `taskset`: as in a deployment, where the sync engine has a machine of its own. The orchestrator, which samples the lag, is not pinned.'
        : '',
      has('services')
        ? "**Shared cores, CPU groups**: both cores shared, with Postgres (every process, the walsender included), pgbench and the orchestrator in one CPU control group and the pipeline (in the control, pg_recvlogical) in another, both with the default weight: as where Postgres and the sync engine run as services on one machine (systemd units, containers), each getting a group of its own. Within its group, Postgres's processes share as before."
        : '',
      '*Running / waiting* are the shares of the load\'s wall time a process (summed over its threads) or one thread spent on a CPU and runnable but queued for one (`/proc/<pid>/task/*/schedstat`); for the pipeline\'s main thread, the rest of 100% it slept (idle or blocked); n/a where not measured (not Linux, earlier runs).',
    ]
      .filter((x) => x !== '')
      .join(' '),
  )
  if (report.keepUpSeparateSkipped !== undefined) out.push('', `The separate-cores variant was not run: ${report.keepUpSeparateSkipped}.`)
  if (report.keepUpServicesSkipped !== undefined) out.push('', `The CPU-groups variant was not run: ${report.keepUpServicesSkipped}.`)
  if (variants.length === 0) return out
  out.push('')
  const row = (label: string, cell: (k: KeepUpResult) => string): void => {
    out.push(`| ${label} | ${variants.map(cell).join(' | ')} |`)
  }
  out.push(`| | ${variants.map((k) => VARIANT_NAMES[k.cores ?? 'shared'].heading).join(' | ')} |`)
  out.push(`|---|${variants.map(() => '---').join('|')}|`)
  row('CPUs', (k) => {
    const cores = k.cores ?? 'shared'
    if (cores === 'separate') return `Postgres + pgbench: ${k.cpus?.postgres ?? '?'}; pipeline: ${k.cpus?.pipeline ?? '?'}`
    return `all ${report.machine.nproc}, shared by every process${cores === 'services' ? '; one group for Postgres + pgbench, one for the pipeline' : ''}`
  })
  row('pipeline start (restore the shapes)', (k) => secs(k.restoreMs))
  row('inserts/s with the pipeline', (k) => `${n(k.tps)} (${n(k.transactions)} in ${k.seconds} s)`)
  row('inserts/s, same load, no pipeline (baseline)', (k) => n(k.baselineTps))
  row('WAL written', (k) => `${bytes(k.walBytesPerSec)}/s`)
  row('lag p50 / p99 / max', (k) => `${bytes(k.lagP50)} / ${bytes(k.lagP99)} / ${bytes(k.lagMax)} (${n(k.samples)} samples)`)
  row('lag median, first third vs last third', (k) => `${bytes(k.firstThirdMedian)} vs ${bytes(k.lastThirdMedian)}`)
  row('lag p99, first third vs last third', (k) => `${bytes(k.firstThirdP99)} vs ${bytes(k.lastThirdP99)}`)
  row('lag in time at the median (lag / WAL rate)', (k) => `${n((k.lagP50 / k.walBytesPerSec) * 1000)} ms`)
  row('caught up after the load stopped', (k) => (k.caughtUpMs === null ? 'not within 300 s' : secs(k.caughtUpMs)))
  row('pipeline process CPU during the load', (k) => ofCore(k.pipelineCpuPercent))
  row('pipeline, all threads: running / waiting for a CPU', (k) => sched(k.sched?.pipeline))
  row('pipeline main thread: running / waiting for a CPU', (k) => sched(k.sched?.pipelineMain))
  row("its walsender's CPU", (k) => ofCore(k.walsenderCpuPercent))
  row('its walsender: running / waiting for a CPU', (k) => sched(k.sched?.walsender))
  row('all Postgres processes, CPU', (k) => ofCore(k.postgresCpuPercent))
  row('CPU pressure during the load', (k) => pctRaw(k.cpuPressurePercent))
  row('control, pg_recvlogical alone: inserts/s', (k) => (k.decoderAlone === undefined ? 'n/a' : n(k.decoderAlone.tps)))
  row('control: lag p50 / p99 / max', (k) => (k.decoderAlone === undefined ? 'n/a' : `${bytes(k.decoderAlone.lagP50)} / ${bytes(k.decoderAlone.lagP99)} / ${bytes(k.decoderAlone.lagMax)}`))
  row('control: lag median, first third vs last third', (k) => (k.decoderAlone === undefined ? 'n/a' : `${bytes(k.decoderAlone.firstThirdMedian)} vs ${bytes(k.decoderAlone.lastThirdMedian)}`))
  row('control: walsender running / waiting', (k) => sched(k.decoderAlone?.walsender))
  row('control: pg_recvlogical running / waiting', (k) => sched(k.decoderAlone?.recvlogical))
  row('control: all Postgres processes, CPU', (k) => ofCore(k.decoderAlone?.postgresCpuPercent))
  row(`RSS / JS heap / ArrayBuffers after restoring the shapes`, (k) => `${bytes(k.memoryRestored.rss)} / ${bytes(k.memoryRestored.heapUsed)} / ${bytes(k.memoryRestored.arrayBuffers)}`)
  row('RSS / JS heap / ArrayBuffers after the load (full GC)', (k) => `${bytes(k.memoryAfter.rss)} / ${bytes(k.memoryAfter.heapUsed)} / ${bytes(k.memoryAfter.arrayBuffers)}`)
  out.push('')
  out.push(`The lag series (every sample: ms since the load started, bytes) is in the JSON: ${variants.map((k) => `\`${VARIANT_NAMES[k.cores ?? 'shared'].field}.series\``).join(', ')}.`)
  out.push('')
  return out
}

/** The run's wait for a quiet machine (recorded in its settings; runs from before that used the default, 20 s). */
function quietWait(settings: Record<string, unknown>): string {
  const ms = typeof settings['quietWaitMs'] === 'number' ? settings['quietWaitMs'] : 20_000
  return `${(ms / 1000).toFixed(0)} s`
}

function fmt(v: unknown): string {
  return typeof v === 'boolean' ? (v ? 'on' : 'off') : String(v)
}

function fmtScript(): string {
  return "SELECT bench_insert(nextval('bench_load_seq'))"
}

function pctRaw(x: number | null): string {
  return x === null || !Number.isFinite(x) ? '-' : `${x.toFixed(0)}%`
}

function median(values: readonly number[]): number {
  const v = values.filter(Number.isFinite).sort((a, b) => a - b)
  if (v.length === 0) return Number.NaN
  const mid = (v.length - 1) / 2
  return (v[Math.floor(mid)]! + v[Math.ceil(mid)]!) / 2
}

function METHOD(report: Report, s: Record<string, unknown>): string[] {
  const reps = String(s.reps)
  return [
    `- **Processes.** The orchestrator (\`run.ts\`) starts a throwaway Postgres ${report.postgres.version} and runs each measurement's pipeline in a process of its own (\`worker.ts\`: one \`Pipeline\` and nothing else, driven over stdin/stdout, running the compiled packages, \`dist/\`, as users do, unless BENCH_SOURCE=1; set up as the \`sluice\` command sets up its process: \`configureYoungGc\`, which on two cores or fewer turns V8's parallel scavenges off), pg_recvlogical and pgbench as further processes. Everything runs on the same ${report.machine.nproc} cores${report.keepUpSeparate ? ', except in the keep-up phase\'s separate-cores variant' : ''}.`,
    '- **Tables and shapes.** `bench_items(id, k1, k1k, k10k, k100k, title, payload, updated_at)` with `k1 = 0`, `k1k = id % 1000`, `k10k = id % 10000`, `k100k = id % 100000` and a title token `TOK0000..TOK0999` (`id % 1000`). The shape sets: 1 shape `k1 = 0`; 1k shapes `k1k = 0..999`; 10k `k10k = …`; 100k `k100k = …` (each change lands in exactly one shape of a set; the router finds it through its hash index); 1k `title ILIKE \'%tok0042%\'`-style shapes (exactly one match per change, but no index: every pattern is evaluated for every change); and, on `bench_overlap(id, owner, title, payload, updated_at)`, 1k overlapping shapes `owner = \'x\' AND id > k` for k = 0..999: all rows have owner x and ids above 999, so **every change lands in all 1,000 shapes** (indexed on `owner = \'x\'`, then `id > k` evaluated per shape). Change lines are ~330 bytes of JSON (full rows, `replica=default`).',
    `- **Registering.** Each set is registered once, by a fresh pipeline on an empty table (snapshots return no rows); every later run of that set restarts a pipeline on the store it left behind, which keeps the changes of earlier runs (copying a 100k-shape store before each run took many minutes on this shared disk). Each run has a new slot, created after the store's previous run with nothing for its shapes in between; since \`Pipeline.start\` invalidates every shape of a store its slot is ahead of (missed changes), the worker first advances the store's watermark to the new slot's position (open, advance, flush, close: untimed).`,
    `- **Workload.** ${n(Number(s.changes))} row changes on bench_items (${n(Number(s.overlapChanges))} on bench_overlap, where each change makes 1,000 shape-log entries), in groups of ten: 7 inserts, 2 updates (payload and timestamp, so rows stay in their shapes), 1 delete; committed one change per transaction, or 100 per transaction. Written server-side by a procedure (\`CALL bench_workload\`, COMMIT inside the loop), then one marker transaction whose \`pg_current_wal_insert_lsn()\` is the end every replay waits for: every workload commit lies below it and the marker's commit above.`,
    `- **Same WAL for everyone.** Each of the ${reps} repetitions creates one slot per contender (pg_recvlogical and every shape set), all at the same WAL position, then writes the workload afresh (same procedure and sizes, new ids); every contender then replays exactly that WAL from its own slot. The contenders' order rotates each repetition (ceiling, then the sets; then shifted by one) so drift in outside load falls on all.`,
    `- **The pipeline run.** A new process starts \`Pipeline.start\` on the copied store with the run's slot (default options: 10 ms flush interval, protocol ${report.protoVersion} with streaming, 4 snapshot connections). The clock starts when \`Pipeline.start\` resolves (the store is open, the shapes are restored and routed, the walsender streams) and stops at the first flush whose durable watermark reaches the marker: everything is routed, written to the shape logs, fdatasync'ed and the watermark published. Changes/s = workload changes / that time. Nothing else runs in the window (memory is sampled, with its forced GCs, only in the keep-up and registration steps).`,
    `- **The ceiling.** \`pg_recvlogical --start --endpos=<marker> -o proto_version=${report.protoVersion}${report.protoVersion >= 2 ? ' -o streaming=on' : ''} -o publication_names=sluice_publication -f /dev/null\` on its own slot: the same pgoutput stream with nothing behind it. Timed from spawn to exit (connection setup included, a few ms). It stops on the first message past the marker's position, the marker's commit, so it has decoded as much as the pipeline has.`,
    `- **Repetitions.** ${reps} per contender and phase, each on its own freshly written WAL; the tables give the median and every run.`,
    '- **Keeping up.** See its section. **Memory.** `process.memoryUsage()` in the pipeline process after two forced GCs (`--expose-gc`).',
    '- tinybench is not used here: every measurement is one multi-second run of several processes, timed once from outside the measured work, not a micro-operation to repeat in a loop.',
  ]
}

/** `node --import tsx pipeline/report.ts results/pipeline.json`: renders the markdown again from a run's JSON (same data, current wording). */
if (process.argv[1] !== undefined && import.meta.url.endsWith(process.argv[1].split('/').pop()!)) {
  const json = process.argv[2]
  if (json === undefined || !json.endsWith('.json')) {
    console.error('usage: report.ts <results/pipeline.json>')
    process.exit(2)
  }
  const report = JSON.parse(readFileSync(json, 'utf8')) as Report
  writeFileSync(json.replace(/\.json$/, '.md'), `${markdown(report)}\n`)
  console.log(`wrote ${json.replace(/\.json$/, '.md')}`)
}

export function writeReport(report: Report, basePath: string): void {
  writeFileSync(`${basePath}.json`, `${JSON.stringify(report, null, 2)}\n`)
  writeFileSync(`${basePath}.md`, `${markdown(report)}\n`)
}
