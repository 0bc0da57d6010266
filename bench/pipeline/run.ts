/**
 * bench:pipeline: the sync pipeline (slot -> router -> durable shape logs) on
 * a real Postgres, in separate processes: this orchestrator, the pipeline
 * (`worker.ts`, one process per measurement), Postgres, pg_recvlogical (the
 * decoding ceiling) and pgbench (the insert load).
 *
 * Measures (issue items 14-16):
 * - throughput: row changes per second from the slot into durable shape logs
 *   with 1, 1k, 10k and 100k `col = const` shapes, 1k overlapping shapes and
 *   1k ILIKE shapes, for transactions of 1 and of 100 rows, next to
 *   pg_recvlogical decoding the same WAL from a slot created at the same point;
 * - keeping up: replication lag under a saturating pgbench insert load with
 *   100k shapes, with every process on the same cores and with Postgres and
 *   the pipeline on separate CPUs, and what the scheduler gave each;
 * - memory: RSS and heap of the pipeline process before and after registering
 *   100k shapes; the time to create 1,000 shapes at once on a 500-row table.
 * Does not measure: HTTP, clients, reads of the logs, initial snapshots of big
 * tables, other machines.
 *
 * Usage: `pnpm --filter @sluice/bench run bench:pipeline` (from the root:
 * `npm run bench:pipeline`). QUICK=1: a smoke run with small counts
 * (results/pipeline.quick.*). BENCH_DIR: where the shape logs go (default: the
 * OS temp dir). ONLY=throughput,keepup,concurrent: a subset (results/pipeline.partial.*);
 * SETS=eq1,eq100k and BENCH_TX=100 narrow the throughput phases further.
 * BENCH_KEEPUP_CORES=shared,separate,services (default all three, in that
 * order; `both` is shared,separate): keeping up with every process on the
 * shared cores, with Postgres and the pipeline on separate CPUs, or on the
 * shared cores with Postgres and the pipeline in CPU groups of their own.
 */
import { spawnSync } from 'node:child_process'
import { existsSync, mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs'
if (process.env.BENCH_CPU_PROF !== undefined) mkdirSync(process.env.BENCH_CPU_PROF, { recursive: true })
import { loadavg, tmpdir } from 'node:os'
import { dirname, join } from 'node:path'
import { performance } from 'node:perf_hooks'
import { fileURLToPath } from 'node:url'
import type { PostgresCluster } from '@sluice/test-utils'
import { SystemMeter, waitForQuiet } from '../storage/measure.js'
import { machineInfo } from '../storage/report.js'
import {
  BENCH_PG_SETTINGS,
  createSlot,
  currentLsn,
  dropSlot,
  generateWorkload,
  pgbench,
  postmasterPid,
  preparePgbench,
  recvlogical,
  startBenchPostgres,
  streamRecvlogical,
  walsenderPid,
} from './pg.js'
import type { GeneratedWorkload } from './pg.js'
import { BENCH_SOURCE, PipelineWorker, type SchedTimes, cpusAllowed, processCpuMs, runTimed, schedStat, setTreeCpus, treeCpuMs, twoCpus } from './proc.js'
import { summariseDir } from './profile-summary.js'
import { type CpuGroups, cpuGroups, dropGroups, joinGroup, joinGroupTree } from './cpu-groups.js'
import { KEEPUP_VARIANTS, type Report, writeReport } from './report.js'
import type { ConcurrentResult, KeepUpCores, KeepUpResult, LoadNote, MemorySample, PhaseResult, RegistrationResult, RunResult, SchedShare } from './report.js'
import { CpuWatch, median, quantile } from './stats.js'
import { ITEMS, OVERLAP, SHAPE_SETS, type ShapeSet } from './workload.js'
import { loadNote, log, runSeconds } from './run-log.js'

const QUICK = process.env.QUICK === '1'
const ONLY = new Set((process.env.ONLY ?? 'throughput,keepup,concurrent').split(',').map((s) => s.trim()))
/** BENCH_KEEPUP_CORES: the keep-up variants to run, in the order of KEEPUP_VARIANTS. */
const KEEPUP_CORES = parseKeepUpCores(process.env.BENCH_KEEPUP_CORES ?? 'all')
/**
 * BENCH_FIXTURE=<dir>: keep the Postgres cluster and the registered shape sets
 * there, and on a later run reuse every set registered before (its
 * registration figures are the earlier run's). Registering 100k shapes takes
 * a quarter of an hour; this is for trying changes to the pipeline, and
 * makes the report partial.
 */
const FIXTURE = process.env.BENCH_FIXTURE
const PARTIAL =
  FIXTURE !== undefined ||
  process.env.ONLY !== undefined ||
  process.env.SETS !== undefined ||
  process.env.BENCH_REPS !== undefined ||
  process.env.BENCH_NODE_ARGS !== undefined ||
  process.env.BENCH_TX !== undefined ||
  process.env.BENCH_KEEPUP_SECONDS !== undefined ||
  process.env.BENCH_TAIL_BUDGET !== undefined ||
  KEEPUP_CORES.length < KEEPUP_VARIANTS.length
/** Longest wait for outside CPU load to settle before each timed run. */
const QUIET_WAIT_MS = Number(process.env.BENCH_QUIET_WAIT_MS ?? (QUICK ? 0 : 20_000))

function parseKeepUpCores(value: string): readonly KeepUpCores[] {
  if (value === 'all') return KEEPUP_VARIANTS
  const asked = value === 'both' ? ['shared', 'separate'] : value.split(',').map((v) => v.trim())
  const unknown = asked.filter((v) => !(KEEPUP_VARIANTS as readonly string[]).includes(v))
  if (unknown.length > 0) throw new Error(`BENCH_KEEPUP_CORES=${value}: expected all, both, or a list of ${KEEPUP_VARIANTS.join(', ')}`)
  return KEEPUP_VARIANTS.filter((v) => asked.includes(v))
}

interface Settings {
  /** BENCH_REPS overrides (e.g. 1 for a profiling run). */
  readonly reps: number
  readonly changes: number
  /** Changes of the ILIKE and overlap phases: each costs the pipeline 1,000 evaluations or 1,000 entries. */
  readonly ilikeChanges: number
  readonly overlapChanges: number
  readonly txSizes: readonly number[]
  /** Shapes per set (QUICK shrinks the big ones). */
  readonly counts: Readonly<Record<string, number>>
  /** Creations in flight while registering a set. */
  readonly registerConcurrency: number
  readonly concurrentShapes: number
  readonly concurrentConnections: readonly number[]
  readonly keepUpSeconds: number
  readonly baselineSeconds: number
  readonly pgbenchClients: number
  readonly sampleMs: number
}

const BASE_SETTINGS: Settings = QUICK
  ? {
      reps: 2,
      changes: 20_000,
      ilikeChanges: 2_000,
      overlapChanges: 200,
      txSizes: [1, 100],
      counts: { eq1: 1, eq1k: 1_000, eq10k: 2_000, eq100k: 3_000, ilike1k: 1_000, overlap1k: 1_000 },
      registerConcurrency: 64,
      concurrentShapes: 1_000,
      concurrentConnections: [4],
      keepUpSeconds: 8,
      baselineSeconds: 4,
      pgbenchClients: 8,
      sampleMs: 100,
    }
  : {
      reps: 3,
      changes: 200_000,
      ilikeChanges: 20_000,
      overlapChanges: 1_000,
      txSizes: [1, 100],
      counts: { eq1: 1, eq1k: 1_000, eq10k: 10_000, eq100k: 100_000, ilike1k: 1_000, overlap1k: 1_000 },
      registerConcurrency: 64,
      concurrentShapes: 1_000,
      concurrentConnections: [4, 16],
      // Long enough to see past warm-up: a fresh process first faults in its tail memory (a cycle of
      // checkpoints), so 45 s mostly measured that; whether lag stops growing shows over minutes.
      keepUpSeconds: 120,
      baselineSeconds: 15,
      pgbenchClients: 8,
      sampleMs: 100,
    }

/** BENCH_TX=100 (or 1): only that transaction size's throughput phases (partial results). */
const TX_SIZES = process.env.BENCH_TX === undefined ? undefined : process.env.BENCH_TX.split(',').map(Number)
const SETTINGS: Settings = {
  ...BASE_SETTINGS,
  ...(process.env.BENCH_REPS === undefined ? {} : { reps: Number(process.env.BENCH_REPS) }),
  // A longer load shows whether the lag stays bounded over several checkpoint cycles (partial results).
  ...(process.env.BENCH_KEEPUP_SECONDS === undefined ? {} : { keepUpSeconds: Number(process.env.BENCH_KEEPUP_SECONDS) }),
  ...(TX_SIZES === undefined ? {} : { txSizes: BASE_SETTINGS.txSizes.filter((t) => TX_SIZES.includes(t)) }),
}

/** Throughput sets per phase group, in the order registered; SETS=eq1,eq100k runs a subset (partial results). */
const ONLY_SETS = process.env.SETS === undefined ? undefined : new Set(process.env.SETS.split(',').map((s) => s.trim()))
const pick = (sets: readonly string[]): string[] => sets.filter((s) => ONLY_SETS === undefined || ONLY_SETS.has(s))
const MAIN_SETS = pick(['eq1', 'eq1k', 'eq10k', 'eq100k'])
const ILIKE_SETS = pick(['ilike1k'])
const OVERLAP_SETS = pick(['overlap1k'])
/** BENCH_CPU_PROF=<dir>: each timed pipeline run writes a V8 CPU profile of its timed window there. */
const CPU_PROF = process.env.BENCH_CPU_PROF
/** BENCH_HEAP_SNAPSHOT=<dir>: a V8 heap snapshot of each registering pipeline once its shapes are ready (what a shape costs). */
const HEAP_SNAPSHOT_DIR = process.env.BENCH_HEAP_SNAPSHOT
if (HEAP_SNAPSHOT_DIR !== undefined) mkdirSync(HEAP_SNAPSHOT_DIR, { recursive: true })
const PROTO_VERSION = 2
/** Ids of one repetition's workload start this far after the previous one's. */
const REP_ID_STRIDE = 1_000_000

const here = dirname(fileURLToPath(import.meta.url))
const resultsDir = join(here, '..', 'results')

function uptime(): string {
  return loadavg()
    .map((l) => l.toFixed(2))
    .join(', ')
}

async function sh(cmd: string, args: readonly string[]): Promise<number> {
  const r = await runTimed(cmd, args)
  if (r.code !== 0) throw new Error(`${cmd} ${args.join(' ')} failed: ${r.stderr}`)
  return r.ms
}

async function diskBytes(dir: string): Promise<number> {
  const r = await runTimed('du', ['-s', '--block-size=1', dir])
  return Number(r.stdout.split(/\s/)[0])
}

function setOf(id: string): ShapeSet {
  return SHAPE_SETS[id]!
}

function countOf(id: string): number {
  return SETTINGS.counts[id] ?? setOf(id).count
}

async function startWorker(label: string, cpus?: string): Promise<PipelineWorker> {
  return PipelineWorker.spawn({ label, cpus }, (event) => {
    if (event.event === 'progress') log(`  ${String(event.set)}: ${String(event.done)} shapes ready after ${(Number(event.ms) / 1000).toFixed(1)} s`)
  })
}

// ---- registration (and memory) ----

async function registerSet(cluster: PostgresCluster, root: string, id: string): Promise<RegistrationResult> {
  const set = setOf(id)
  const count = countOf(id)
  const dir = join(root, 'reg', id)
  const slot = `reg_${id}`
  const saved = join(dir, 'registration.json')
  if (FIXTURE !== undefined && existsSync(saved)) {
    log(`reusing ${id} as registered before in ${dir}`)
    return JSON.parse(readFileSync(saved, 'utf8')) as RegistrationResult
  }
  log(`registering ${count} shapes of ${id} (${set.title}), ${SETTINGS.registerConcurrency} creations in flight`)
  const worker = await startWorker(`pipeline:${id}`)
  try {
    const started = await worker.call<{ memory: MemorySample; memoryBefore: MemorySample; startMs: number }>('start', {
      connectionString: cluster.url,
      storageDir: dir,
      slotName: slot,
    })
    const meter = new SystemMeter()
    const load = loadNote(`register ${id}`)
    const r = await worker.call<Record<string, number> & { memoryBefore: MemorySample; memoryAfter: MemorySample }>('register', {
      set: id,
      count,
      concurrency: SETTINGS.registerConcurrency,
      ...(CPU_PROF === undefined ? {} : { profilePath: join(CPU_PROF, `register_${id}.cpuprofile`) }),
    })
    if (HEAP_SNAPSHOT_DIR !== undefined) {
      const path = join(HEAP_SNAPSHOT_DIR, `register_${id}.heapsnapshot`)
      await worker.call('heapSnapshot', { path })
      log(`  heap snapshot of ${id}'s pipeline after registering: ${path}`)
    }
    await worker.stop()
    await dropSlot(cluster, slot)
    const disk = await diskBytes(join(dir, 'logs'))
    const result: RegistrationResult = {
      set: id,
      title: set.title,
      count,
      concurrency: SETTINGS.registerConcurrency,
      snapshotConnections: 4,
      wallMs: r.wallMs!,
      shapesPerSec: (count / r.wallMs!) * 1000,
      meanResolveMs: r.meanResolveMs!,
      meanReadyMs: r.meanReadyMs!,
      meanSnapshotMs: r.meanSnapshotMs!,
      meanFinishMs: r.meanFinishMs!,
      cpuUserMs: r.cpuUserMs!,
      cpuSystemMs: r.cpuSystemMs!,
      processStart: started.memoryBefore,
      memoryBefore: r.memoryBefore,
      memoryAfter: r.memoryAfter,
      diskBytes: disk,
      cpuPressurePercent: meter.cpuPressurePercent() ?? null,
      load,
    }
    if (FIXTURE !== undefined) writeFileSync(saved, JSON.stringify(result))
    log(
      `  ${id}: ${count} shapes in ${(result.wallMs / 1000).toFixed(1)} s (${result.shapesPerSec.toFixed(0)}/s); RSS ${mib(r.memoryBefore.rss)} -> ${mib(r.memoryAfter.rss)} MiB, heap ${mib(r.memoryBefore.heapUsed)} -> ${mib(r.memoryAfter.heapUsed)} MiB`,
    )
    return result
  } finally {
    await worker.kill()
  }
}

function mib(bytes: number): string {
  return (bytes / 2 ** 20).toFixed(1)
}

/** 1,000 shapes requested at once on the 500-row table; wall time from the first resolve to the last ready. */
async function concurrentCreation(cluster: PostgresCluster, root: string, connections: number): Promise<ConcurrentResult> {
  const id = 'small1k'
  const dir = join(root, 'concurrent', String(connections))
  const slot = `conc_${connections}`
  const worker = await startWorker(`pipeline:conc${connections}`)
  try {
    await waitForQuiet(QUIET_WAIT_MS)
    await worker.call('start', { connectionString: cluster.url, storageDir: dir, slotName: slot, snapshotConnections: connections })
    const meter = new SystemMeter()
    const r = await worker.call<Record<string, number>>('register', { set: id, count: SETTINGS.concurrentShapes, concurrency: SETTINGS.concurrentShapes })
    const result: ConcurrentResult = {
      count: SETTINGS.concurrentShapes,
      tableRows: 500,
      snapshotConnections: connections,
      wallMs: r.wallMs!,
      meanResolveMs: r.meanResolveMs!,
      meanSnapshotMs: r.meanSnapshotMs!,
      meanFinishMs: r.meanFinishMs!,
      cpuUserMs: r.cpuUserMs!,
      cpuSystemMs: r.cpuSystemMs!,
      cpuPressurePercent: meter.cpuPressurePercent() ?? null,
      load: loadNote(`concurrent ${connections}`),
    }
    log(`  1,000 concurrent creations, ${connections} snapshot connections: ${(result.wallMs / 1000).toFixed(2)} s`)
    await worker.stop()
    await dropSlot(cluster, slot)
    await sh('rm', ['-rf', dir])
    return result
  } finally {
    await worker.kill()
  }
}

// ---- throughput ----

interface Phase {
  readonly id: string
  readonly table: string
  readonly perTx: number
  readonly changes: number
  readonly startId: number
  readonly markerId: number
  readonly sets: readonly string[]
}

function phases(): Phase[] {
  const out: Phase[] = []
  let marker = -1
  // Fresh ids for every phase (all above 999, so the overlap shapes' \`id > k\` holds).
  let nextStart = 1_000_000
  for (const [name, table, sets, changes] of [
    ['items', ITEMS, MAIN_SETS, SETTINGS.changes],
    ['ilike', ITEMS, ILIKE_SETS, SETTINGS.ilikeChanges],
    ['overlap', OVERLAP, OVERLAP_SETS, SETTINGS.overlapChanges],
  ] as const) {
    if (sets.length === 0) continue
    for (const perTx of SETTINGS.txSizes) {
      out.push({
        id: `${name}-tx${perTx}`,
        table,
        perTx,
        changes,
        startId: nextStart,
        markerId: marker,
        sets,
      })
      nextStart += 10 * REP_ID_STRIDE
      marker -= 10
    }
  }
  return out
}

/** Runs pg_recvlogical to the end of the workload, timing it and its walsender's CPU. */
async function ceilingRun(cluster: PostgresCluster, slot: string, workload: GeneratedWorkload): Promise<RunResult> {
  await waitForQuiet(QUIET_WAIT_MS)
  const meter = new SystemMeter()
  let pid: number | undefined
  let looking = true
  const finder = (async () => {
    while (looking && pid === undefined) {
      pid = await walsenderPid(cluster, slot).catch(() => undefined)
      if (pid === undefined) await new Promise((r) => setTimeout(r, 10))
    }
  })()
  const watch = new CpuWatch(() => (pid === undefined ? undefined : processCpuMs(pid))).start()
  const r = await recvlogical(cluster, slot, workload.endLsn, PROTO_VERSION)
  looking = false
  await finder
  const walsenderCpuMs = watch.stop(true)
  return {
    ms: r.ms,
    changesPerSec: (workload.changes / r.ms) * 1000,
    walsenderCpuMs: walsenderCpuMs ?? null,
    pipelineCpuMs: null,
    startMs: null,
    cpuPressurePercent: meter.cpuPressurePercent() ?? null,
    loadavg1: loadavg()[0]!,
  }
}

/**
 * Starts a pipeline on the set's store (kept from run to run: the shapes as
 * registered plus the changes of earlier runs) with the run's own slot, and
 * times it to the workload's end.
 */
async function pipelineRun(cluster: PostgresCluster, root: string, set: string, slot: string, slotLsn: bigint, workload: GeneratedWorkload): Promise<RunResult> {
  const dir = join(root, 'reg', set)
  const worker = await startWorker(`pipeline:${set}`)
  try {
    await waitForQuiet(QUIET_WAIT_MS)
    const meter = new SystemMeter()
    const started = await worker.call<{ startMs: number; shapes: number; cpu: { user: number; system: number }; pageFaults: number }>('start', {
      connectionString: cluster.url,
      storageDir: dir,
      slotName: slot,
      adoptLsn: slotLsn.toString(),
      targetLsn: workload.endLsn.toString(),
      ...(CPU_PROF === undefined ? {} : { profilePath: join(CPU_PROF, `${slot}.cpuprofile`) }),
    })
    const pid = await walsenderPid(cluster, slot)
    const cpu0 = pid === undefined ? undefined : processCpuMs(pid)
    const done = await worker.call<{ ms: number; cpu: { user: number; system: number }; pageFaults: number }>('waitDurable')
    const cpu1 = pid === undefined ? undefined : processCpuMs(pid)
    const pressure = meter.cpuPressurePercent() ?? null
    if (started.shapes !== countOf(set)) throw new Error(`${set}: restored ${started.shapes} shapes, expected ${countOf(set)}`)
    await worker.stop()
    return {
      ms: done.ms,
      changesPerSec: (workload.changes / done.ms) * 1000,
      walsenderCpuMs: cpu0 === undefined || cpu1 === undefined ? null : cpu1,
      pipelineCpuMs: (done.cpu.user + done.cpu.system - started.cpu.user - started.cpu.system) / 1000,
      pipelineSystemCpuMs: (done.cpu.system - started.cpu.system) / 1000,
      pageFaults: done.pageFaults - started.pageFaults,
      startMs: started.startMs,
      cpuPressurePercent: pressure,
      loadavg1: loadavg()[0]!,
    }
  } finally {
    await worker.kill()
    await dropSlot(cluster, slot)
  }
}

async function throughputPhase(cluster: PostgresCluster, root: string, phase: Phase): Promise<PhaseResult> {
  log(`phase ${phase.id}: ${phase.changes} changes into ${phase.table}, ${phase.perTx} per transaction, ${SETTINGS.reps} repetitions`)
  const ceiling: RunResult[] = []
  const workloads: GeneratedWorkload[] = []
  const runs = new Map<string, RunResult[]>(phase.sets.map((s) => [s, []]))
  const contenders = ['ceiling', ...phase.sets]
  const tag = phase.id.replace('-', '_')
  for (let rep = 0; rep < SETTINGS.reps; rep++) {
    // One slot per contender, all created before this repetition's workload: each replays exactly the same WAL.
    const ceilingSlot = `c_${tag}_${rep}`
    const startLsn = await createSlot(cluster, ceilingSlot)
    const slots = new Map<string, string>()
    const slotLsns = new Map<string, bigint>()
    for (const set of phase.sets) {
      slots.set(set, `p_${tag}_${set}_${rep}`)
      slotLsns.set(set, await createSlot(cluster, slots.get(set)!))
    }
    const workload = await generateWorkload(cluster, {
      table: phase.table,
      startId: phase.startId + rep * REP_ID_STRIDE,
      changes: phase.changes,
      perTx: phase.perTx,
      markerId: phase.markerId - rep,
      startLsn,
    })
    workloads.push(workload)
    log(
      `  rep ${rep + 1} workload: ${workload.transactions} transactions in ${(workload.ms / 1000).toFixed(1)} s (${((workload.transactions / workload.ms) * 1000).toFixed(0)} commits/s), ${mib(workload.walBytes)} MiB of WAL`,
    )
    // The order rotates, so drift in outside load falls on every contender alike.
    const order = contenders.map((_, i) => contenders[(i + rep) % contenders.length]!)
    for (const who of order) {
      if (who === 'ceiling') {
        const r = await ceilingRun(cluster, ceilingSlot, workload)
        await dropSlot(cluster, ceilingSlot)
        ceiling.push(r)
        log(`  rep ${rep + 1} pg_recvlogical: ${(r.ms / 1000).toFixed(2)} s, ${r.changesPerSec.toFixed(0)} changes/s (load ${r.loadavg1.toFixed(2)})`)
      } else {
        const r = await pipelineRun(cluster, root, who, slots.get(who)!, slotLsns.get(who)!, workload)
        runs.get(who)!.push(r)
        log(
          `  rep ${rep + 1} ${who}: ${(r.ms / 1000).toFixed(2)} s, ${r.changesPerSec.toFixed(0)} changes/s, pipeline CPU ${((r.pipelineCpuMs ?? 0) / 1000).toFixed(1)} s (system ${((r.pipelineSystemCpuMs ?? 0) / 1000).toFixed(1)} s; ${r.pageFaults ?? '-'} page faults; start ${((r.startMs ?? 0) / 1000).toFixed(1)} s, load ${r.loadavg1.toFixed(2)})`,
        )
      }
    }
  }
  const ceilingMedian = median(ceiling.map((r) => r.changesPerSec))
  return {
    id: phase.id,
    label: `${phase.id.startsWith('ilike') ? 'ILIKE phase: ' : ''}${phase.table}, ${phase.perTx} row${phase.perTx > 1 ? 's' : ''} per transaction`,
    table: phase.table,
    perTx: phase.perTx,
    workload: {
      changes: phase.changes,
      transactions: workloads[0]!.transactions,
      walBytes: workloads.map((w) => w.walBytes),
      generateMs: workloads.map((w) => w.ms),
    },
    ceiling: { runs: ceiling, medianChangesPerSec: ceilingMedian },
    sets: phase.sets.map((id) => {
      const set = setOf(id)
      const rs = runs.get(id)!
      const med = median(rs.map((r) => r.changesPerSec))
      return {
        set: id,
        title: set.title,
        count: countOf(id),
        indexed: set.indexed,
        matchesPerChange: set.id === 'overlap1k' ? countOf(id) : set.matchesPerChange,
        runs: rs,
        medianChangesPerSec: med,
        ratioToCeiling: med / ceilingMedian,
      }
    }),
  }
}

// ---- keeping up ----

interface LagSample {
  readonly t: number
  readonly lag: number
  readonly wal: string
}

/** The slot's lag (`pg_current_wal_lsn() - confirmed_flush_lsn`) every SETTINGS.sampleMs until stopped. */
function sampleLag(cluster: PostgresCluster, slot: string): { readonly t0: number; stop(): Promise<LagSample[]> } {
  const samples: LagSample[] = []
  const t0 = performance.now()
  let sampling = true
  const loop = (async () => {
    while (sampling) {
      const next = performance.now() + SETTINGS.sampleMs
      const { rows } = await cluster.query<{ lag: string; wal: string }>(
        'SELECT (pg_current_wal_lsn() - confirmed_flush_lsn)::bigint::text AS lag, pg_current_wal_lsn()::text AS wal FROM pg_replication_slots WHERE slot_name = $1',
        [slot],
      )
      samples.push({ t: performance.now() - t0, lag: Number(rows[0]!.lag), wal: rows[0]!.wal })
      const wait = next - performance.now()
      if (wait > 0) await new Promise((r) => setTimeout(r, wait))
    }
  })()
  return {
    t0,
    async stop() {
      sampling = false
      await loop
      return samples
    },
  }
}

/**
 * Where a keep-up variant's processes may run (`taskset -c` lists); undefined:
 * wherever the scheduler puts them. `postgres` holds the cluster (every
 * process, pinned by `keepUpOnSeparateCores`) and pgbench; `client` whoever streams
 * the slot: the pipeline, or pg_recvlogical in the control. `groups`: the
 * CPU groups of the services variant (the caller has put Postgres and the
 * orchestrator, so pgbench too, in `db`); the client joins `sync`.
 */
interface Placement {
  readonly cores: KeepUpCores
  readonly postgres?: string
  readonly client?: string
  readonly groups?: CpuGroups
}

/** Names of a variant's slots, profile and worker: the shared variant keeps the names of runs before there were two. */
function variantName(base: string, placement: Placement): string {
  return placement.cores === 'shared' ? base : `${base}_${placement.cores}`
}

function describe(placement: Placement): string {
  if (placement.cores === 'services') return 'shared cores, Postgres and pgbench in one CPU group, the streaming client in another'
  return placement.cores === 'shared' ? 'shared cores' : `separate cores: Postgres and pgbench on CPU ${placement.postgres}, the streaming client on CPU ${placement.client}`
}

/** Scheduler times at one moment; each undefined where unreadable (not Linux, process gone). */
interface SchedReading {
  readonly pipeline?: SchedTimes | undefined
  readonly pipelineMain?: SchedTimes | undefined
  readonly walsender?: SchedTimes | undefined
  readonly recvlogical?: SchedTimes | undefined
  readonly postgresCpuMs: number | undefined
}

function readSched(pids: { pipeline?: number; walsender?: number | undefined; recvlogical?: number; postmaster: number }): SchedReading {
  return {
    pipeline: pids.pipeline === undefined ? undefined : schedStat(pids.pipeline),
    pipelineMain: pids.pipeline === undefined ? undefined : schedStat(pids.pipeline, pids.pipeline),
    walsender: pids.walsender === undefined ? undefined : schedStat(pids.walsender),
    recvlogical: pids.recvlogical === undefined ? undefined : schedStat(pids.recvlogical),
    postgresCpuMs: treeCpuMs(pids.postmaster),
  }
}

/** Per cent of `windowMs` spent running and waiting for a CPU between two readings. */
function schedShare(before: SchedTimes | undefined, after: SchedTimes | undefined, windowMs: number): SchedShare | null {
  if (before === undefined || after === undefined) return null
  const nsPerPercent = windowMs * 1e4
  return { runPercent: (after.runNs - before.runNs) / nsPerPercent, waitPercent: (after.waitNs - before.waitNs) / nsPerPercent }
}

function cpuPercent(before: number | undefined, after: number | undefined, windowMs: number): number | null {
  return before === undefined || after === undefined ? null : ((after - before) / windowMs) * 100
}

function fmtSched(label: string, s: SchedShare | null | undefined): string {
  return s === null || s === undefined ? `${label} n/a` : `${label} ${s.runPercent.toFixed(0)}% running, ${s.waitPercent.toFixed(0)}% waiting for a CPU`
}

/** Polls for the walsender of a slot a client is connecting to (a few seconds at most). */
async function awaitWalsender(cluster: PostgresCluster, slot: string): Promise<number | undefined> {
  for (let i = 0; i < WALSENDER_WAIT_POLLS; i++) {
    const pid = await walsenderPid(cluster, slot)
    if (pid !== undefined) return pid
    await new Promise((r) => setTimeout(r, 100))
  }
  return undefined
}

/** 5 s in 100 ms polls: pg_recvlogical connects in a few ms on an idle machine. */
const WALSENDER_WAIT_POLLS = 50

/**
 * The control for keeping up: the same load with Postgres's own decoder alone
 * streaming it (pg_recvlogical to /dev/null, confirming every second), so the
 * pipeline's lag can be read against what decoding by itself manages on this
 * machine while the load saturates it.
 */
async function keepUpDecoderAlone(cluster: PostgresCluster, script: string, threads: number, placement: Placement): Promise<NonNullable<KeepUpResult['decoderAlone']>> {
  const slot = variantName('keepup_decoder', placement)
  await createSlot(cluster, slot)
  try {
    await waitForQuiet(QUIET_WAIT_MS)
    const stream = streamRecvlogical(cluster, slot, PROTO_VERSION, 1, placement.client)
    if (placement.groups !== undefined) joinGroup(stream.pid, placement.groups.sync)
    const wsPid = await awaitWalsender(cluster, slot)
    const pids = { walsender: wsPid, recvlogical: stream.pid, postmaster: postmasterPid(cluster) }
    const sched0 = readSched(pids)
    const sampler = sampleLag(cluster, slot)
    const load = await pgbench(cluster, script, { clients: SETTINGS.pgbenchClients, threads, seconds: SETTINGS.keepUpSeconds, cpus: placement.postgres })
    const loadEnd = performance.now() - sampler.t0
    const sched1 = readSched(pids)
    const samples = await sampler.stop()
    await stream.stop()
    const lags = samples.filter((x) => x.t <= loadEnd).map((x) => x.lag)
    const third = Math.floor(lags.length / 3)
    const result = {
      tps: load.tps,
      samples: lags.length,
      lagP50: quantile(lags, 0.5),
      lagP99: quantile(lags, 0.99),
      lagMax: Math.max(...lags),
      firstThirdMedian: median(lags.slice(0, third)),
      lastThirdMedian: median(lags.slice(lags.length - third)),
      walsender: schedShare(sched0.walsender, sched1.walsender, loadEnd),
      recvlogical: schedShare(sched0.recvlogical, sched1.recvlogical, loadEnd),
      postgresCpuPercent: cpuPercent(sched0.postgresCpuMs, sched1.postgresCpuMs, loadEnd),
    }
    log(
      `  decoder alone (pg_recvlogical): ${load.tps.toFixed(0)} inserts/s, lag p50 ${mib(result.lagP50)} MiB, max ${mib(result.lagMax)} MiB, first third ${mib(result.firstThirdMedian)} -> last third ${mib(result.lastThirdMedian)} MiB; ${fmtSched('walsender', result.walsender)}; ${fmtSched('pg_recvlogical', result.recvlogical)}`,
    )
    return result
  } finally {
    await dropSlot(cluster, slot)
  }
}

/**
 * One keep-up variant: the baseline insert rate, the control, then the
 * pipeline on the 100k-shape store under the same load, each placed on the
 * CPUs `placement` gives (the caller has pinned Postgres itself).
 */
async function keepUp(cluster: PostgresCluster, root: string, script: string, placement: Placement): Promise<KeepUpResult> {
  const threads = 2
  const pgCpus = placement.postgres
  log(`keeping up (${describe(placement)}): baseline pgbench without a pipeline, ${SETTINGS.pgbenchClients} clients, ${SETTINGS.baselineSeconds} s`)
  await waitForQuiet(QUIET_WAIT_MS)
  const baseline = await pgbench(cluster, script, { clients: SETTINGS.pgbenchClients, threads, seconds: SETTINGS.baselineSeconds, cpus: pgCpus })
  log(`  baseline: ${baseline.tps.toFixed(0)} inserts/s`)
  const decoder = await keepUpDecoderAlone(cluster, script, threads, placement)

  const set = 'eq100k'
  const slot = variantName('keepup', placement)
  const dir = join(root, 'reg', set)
  // The store is the one the previous variant (or registration) left: a new slot and adoptLsn restart it there.
  const slotLsn = await createSlot(cluster, slot)
  const worker = await startWorker(`pipeline:${slot}`, placement.client)
  if (placement.groups !== undefined) joinGroup(worker.pid, placement.groups.sync)
  try {
    const started = await worker.call<{ startMs: number; shapes: number; memory: MemorySample; memoryBefore: MemorySample }>('start', {
      connectionString: cluster.url,
      storageDir: dir,
      slotName: slot,
      sampleMemory: true,
      adoptLsn: slotLsn.toString(),
      ...(CPU_PROF === undefined ? {} : { profilePath: join(CPU_PROF, `${slot}.cpuprofile`) }),
    })
    log(`  pipeline restored ${started.shapes} shapes in ${(started.startMs / 1000).toFixed(1)} s, RSS ${mib(started.memory.rss)} MiB`)
    await waitForQuiet(QUIET_WAIT_MS)
    const wsPid = await walsenderPid(cluster, slot)
    const pids = { pipeline: worker.pid, walsender: wsPid, postmaster: postmasterPid(cluster) }
    const ws0 = wsPid === undefined ? undefined : processCpuMs(wsPid)
    const cpu0 = processCpuMs(worker.pid)
    const sched0 = readSched(pids)
    const sampler = sampleLag(cluster, slot)
    const t0 = sampler.t0
    const meter = new SystemMeter()
    const load = await pgbench(cluster, script, { clients: SETTINGS.pgbenchClients, threads, seconds: SETTINGS.keepUpSeconds, cpus: pgCpus })
    const loadEnd = performance.now() - t0
    const pressure = meter.cpuPressurePercent() ?? null
    const cpuLoad = processCpuMs(worker.pid)
    const wsLoad = wsPid === undefined ? undefined : processCpuMs(wsPid)
    const sched1 = readSched(pids)
    const endWal = await currentLsn(cluster)
    log(`  under load: ${load.tps.toFixed(0)} inserts/s; waiting for the pipeline to catch up`)
    // Caught up: the slot confirmed everything written up to the end of the load.
    let caughtUpMs: number | undefined
    const deadline = performance.now() + 300_000
    while (performance.now() < deadline) {
      const { rows } = await cluster.query<{ behind: boolean }>('SELECT confirmed_flush_lsn < $2::pg_lsn AS behind FROM pg_replication_slots WHERE slot_name = $1', [
        slot,
        formatLsn(endWal),
      ])
      if (rows[0]?.behind === false) {
        caughtUpMs = performance.now() - t0 - loadEnd
        break
      }
      await new Promise((r) => setTimeout(r, 20))
    }
    const samples = await sampler.stop()
    const during = samples.filter((s) => s.t <= loadEnd)
    const lags = during.map((s) => s.lag)
    const third = Math.floor(during.length / 3)
    const first = lags.slice(0, third)
    const last = lags.slice(lags.length - third)
    const walBytes = Number(parseLsn(during[during.length - 1]!.wal) - parseLsn(during[0]!.wal))
    const walSeconds = (during[during.length - 1]!.t - during[0]!.t) / 1000
    if (CPU_PROF !== undefined) await worker.call('stopProfile')
    const memory = await worker.call<{ memory: MemorySample }>('memory')
    await worker.stop()
    const sched = {
      pipeline: schedShare(sched0.pipeline, sched1.pipeline, loadEnd),
      pipelineMain: schedShare(sched0.pipelineMain, sched1.pipelineMain, loadEnd),
      walsender: schedShare(sched0.walsender, sched1.walsender, loadEnd),
    }
    const result: KeepUpResult = {
      cores: placement.cores,
      cpus: placement.postgres === undefined || placement.client === undefined ? null : { postgres: placement.postgres, pipeline: placement.client },
      shapes: started.shapes,
      restoreMs: started.startMs,
      clients: SETTINGS.pgbenchClients,
      seconds: SETTINGS.keepUpSeconds,
      baselineTps: baseline.tps,
      decoderAlone: decoder,
      tps: load.tps,
      transactions: load.transactions,
      walBytesPerSec: walBytes / walSeconds,
      samples: lags.length,
      sampleMs: SETTINGS.sampleMs,
      lagP50: quantile(lags, 0.5),
      lagP99: quantile(lags, 0.99),
      lagMax: Math.max(...lags),
      firstThirdMedian: median(first),
      lastThirdMedian: median(last),
      firstThirdP99: quantile(first, 0.99),
      lastThirdP99: quantile(last, 0.99),
      caughtUpMs: caughtUpMs ?? null,
      pipelineCpuPercent: cpuPercent(cpu0, cpuLoad, loadEnd),
      walsenderCpuPercent: cpuPercent(ws0, wsLoad, loadEnd),
      sched: Object.values(sched).every((x) => x === null) ? null : sched,
      postgresCpuPercent: cpuPercent(sched0.postgresCpuMs, sched1.postgresCpuMs, loadEnd),
      cpuPressurePercent: pressure,
      memoryRestored: started.memory,
      memoryAfter: memory.memory,
      load: loadNote(`keep-up (${placement.cores} cores)`),
      series: samples.map((s) => [Math.round(s.t), s.lag] as [number, number]),
    }
    log(
      `  lag p50 ${kib(result.lagP50)} KiB, p99 ${kib(result.lagP99)} KiB, max ${kib(result.lagMax)} KiB; first third median ${kib(result.firstThirdMedian)} KiB, last third ${kib(result.lastThirdMedian)} KiB; caught up ${caughtUpMs === undefined ? 'never' : `${caughtUpMs.toFixed(0)} ms`} after the load`,
    )
    log(
      `  during the load: pipeline CPU ${result.pipelineCpuPercent?.toFixed(0) ?? 'n/a'}%; ${fmtSched('pipeline threads', sched.pipeline)}; ${fmtSched('its main thread', sched.pipelineMain)}; ${fmtSched('walsender', sched.walsender)}; Postgres CPU ${result.postgresCpuPercent?.toFixed(0) ?? 'n/a'}%`,
    )
    return result
  } finally {
    await worker.kill()
    await dropSlot(cluster, slot).catch(() => {})
  }
}

/**
 * Keeping up with the sync engine on a core of its own, as where it runs on
 * its own machine: Postgres (the postmaster and every process it has forked or
 * will fork) and pgbench on `cpus[0]`, the pipeline and the control's
 * pg_recvlogical on `cpus[1]`. Postgres gets its old affinity back afterwards:
 * later phases reuse the cluster.
 */
async function keepUpOnSeparateCores(cluster: PostgresCluster, root: string, script: string, cpus: readonly [number, number]): Promise<KeepUpResult> {
  const postmaster = postmasterPid(cluster)
  const original = cpusAllowed(postmaster)
  if (original === undefined) throw new Error(`cannot read the postmaster's (${postmaster}) CPU affinity`)
  await setTreeCpus(postmaster, String(cpus[0]))
  try {
    return await keepUp(cluster, root, script, { cores: 'separate', postgres: String(cpus[0]), client: String(cpus[1]) })
  } finally {
    await setTreeCpus(postmaster, original)
    log(`  Postgres back on CPUs ${original}`)
  }
}

/**
 * Keeping up on the shared cores with Postgres and the sync engine each in a
 * CPU group of its own with the same weight, as where both run as services on
 * one machine (cpu-groups.ts): Postgres (the postmaster first, so every
 * process it forks from then on follows), the orchestrator (so pgbench, which
 * it starts) in one; the pipeline, or pg_recvlogical in the control, in the
 * other. Everything goes back afterwards: later phases reuse the cluster.
 */
async function keepUpInGroups(cluster: PostgresCluster, root: string, script: string, groups: CpuGroups): Promise<KeepUpResult> {
  joinGroupTree(postmasterPid(cluster), groups.db)
  joinGroup(process.pid, groups.db)
  try {
    return await keepUp(cluster, root, script, { cores: 'services', groups })
  } finally {
    const left = dropGroups(groups)
    log(`  Postgres and the orchestrator back in ${groups.home}${left.length > 0 ? `; could not remove ${left.join(', ')}` : ''}`)
  }
}

function kib(bytes: number): string {
  return (bytes / 1024).toFixed(0)
}

function formatLsn(lsn: bigint): string {
  return `${(lsn >> 32n).toString(16).toUpperCase()}/${(lsn & 0xffffffffn).toString(16).toUpperCase()}`
}

function parseLsn(text: string): bigint {
  const [hi, lo] = text.split('/')
  return (BigInt(`0x${hi}`) << 32n) | BigInt(`0x${lo}`)
}

// ---- main ----

/** Builds @sluice/server and what it depends on, so the workers run the compiled code users run. */
function buildPackages(): void {
  const root = fileURLToPath(new URL('../..', import.meta.url))
  log('building @sluice/server and its dependencies (dist/)')
  for (const pkg of ['protocol', 'storage', 'server']) {
    const r = spawnSync(process.execPath, [join(root, 'node_modules/typescript/bin/tsc'), '-p', join(root, 'packages', pkg, 'tsconfig.build.json')], { stdio: 'inherit' })
    if (r.status !== 0) throw new Error(`building packages/${pkg} failed (exit ${r.status})`)
  }
}

async function main(): Promise<void> {
  const base = process.env.BENCH_DIR ?? tmpdir()
  mkdirSync(base, { recursive: true })
  const root = FIXTURE ?? mkdtempSync(join(base, 'sluice-pipeline-bench-'))
  // Taken now: its date is when the run started.
  const machine = machineInfo(root)
  // The cluster's OS user (postgres, under root) reaches its data through it.
  if (FIXTURE !== undefined) mkdirSync(FIXTURE, { recursive: true, mode: 0o755 })
  if (!BENCH_SOURCE) buildPackages()
  const loadBefore = loadNote('start')
  log(`pipeline benchmark${QUICK ? ' (QUICK)' : ''}; data in ${root}; load average ${uptime()}`)
  const cluster = await startBenchPostgres(FIXTURE === undefined ? undefined : join(root, 'pg'))
  log(`Postgres ${cluster.version} (${cluster.binDir}) on port ${cluster.port}`)
  const registrations: RegistrationResult[] = []
  const concurrent: ConcurrentResult[] = []
  const throughput: PhaseResult[] = []
  let keepUpResult: KeepUpResult | undefined
  let keepUpSeparate: KeepUpResult | undefined
  let keepUpSeparateSkipped: string | undefined
  let keepUpServices: KeepUpResult | undefined
  let keepUpServicesSkipped: string | undefined
  const loads: LoadNote[] = [loadBefore]
  try {
    const needed = new Set<string>()
    if (ONLY.has('throughput')) for (const s of [...MAIN_SETS, ...ILIKE_SETS, ...OVERLAP_SETS]) needed.add(s)
    if (ONLY.has('keepup')) needed.add('eq100k')
    // Memory of 100k idle shapes comes from registering them, so eq100k is registered unless SETS leaves it out.
    if (ONLY_SETS === undefined || ONLY_SETS.has('eq100k')) needed.add('eq100k')
    for (const id of ['eq1', 'eq1k', 'eq10k', 'eq100k', 'ilike1k', 'overlap1k'].filter((s) => needed.has(s))) {
      registrations.push(await registerSet(cluster, root, id))
      loads.push(loadNote(`after registering ${id}`))
    }
    if (ONLY.has('concurrent')) {
      for (const connections of SETTINGS.concurrentConnections) concurrent.push(await concurrentCreation(cluster, root, connections))
    }
    if (ONLY.has('throughput')) {
      for (const phase of phases()) {
        throughput.push(await throughputPhase(cluster, root, phase))
        loads.push(loadNote(`after ${phase.id}`))
      }
    }
    if (ONLY.has('keepup')) {
      const script = await preparePgbench(cluster, root)
      if (KEEPUP_CORES.includes('shared')) {
        keepUpResult = await keepUp(cluster, root, script, { cores: 'shared' })
        loads.push(loadNote('after keep-up'))
      }
      if (KEEPUP_CORES.includes('separate')) {
        const two = twoCpus()
        if ('reason' in two) {
          keepUpSeparateSkipped = two.reason
          log(`keeping up on separate cores: skipped, ${two.reason}`)
        } else {
          keepUpSeparate = await keepUpOnSeparateCores(cluster, root, script, two.cpus)
          loads.push(loadNote('after keep-up on separate cores'))
        }
      }
      if (KEEPUP_CORES.includes('services')) {
        const groups = cpuGroups()
        if ('reason' in groups) {
          keepUpServicesSkipped = groups.reason
          log(`keeping up with Postgres and the pipeline in CPU groups: skipped, ${groups.reason}`)
        } else {
          keepUpServices = await keepUpInGroups(cluster, root, script, groups)
          loads.push(loadNote('after keep-up in CPU groups'))
        }
      }
    }
  } finally {
    await cluster.stop()
  }
  loads.push(loadNote('end'))
  const report: Report = {
    quick: QUICK,
    partial: PARTIAL,
    fixture: FIXTURE !== undefined,
    machine,
    postgres: { version: cluster.version, binDir: cluster.binDir, settings: BENCH_PG_SETTINGS },
    protoVersion: PROTO_VERSION,
    settings: { ...SETTINGS, keepUpCores: KEEPUP_CORES, quietWaitMs: QUIET_WAIT_MS },
    runSeconds: runSeconds(),
    loads,
    registrations,
    concurrent,
    throughput,
    keepUp: keepUpResult ?? null,
    keepUpSeparate: keepUpSeparate ?? null,
    ...(keepUpSeparateSkipped === undefined ? {} : { keepUpSeparateSkipped }),
    keepUpServices: keepUpServices ?? null,
    ...(keepUpServicesSkipped === undefined ? {} : { keepUpServicesSkipped }),
  }
  const name = QUICK ? 'pipeline.quick' : PARTIAL ? 'pipeline.partial' : 'pipeline'
  mkdirSync(resultsDir, { recursive: true })
  writeReport(report, join(resultsDir, name))
  log(`wrote results/${name}.md and results/${name}.json (${report.runSeconds.toFixed(0)} s); ${FIXTURE === undefined ? 'removing' : 'keeping'} ${root}`)
  if (CPU_PROF !== undefined) {
    summariseDir(CPU_PROF)
    log(`CPU profiles summarised in ${join(CPU_PROF, 'summary.md')}`)
  }
  if (FIXTURE === undefined) await sh('rm', ['-rf', root]).catch(() => {})
}

await main()
// Pools and child pipes must not hold the process open.
process.exit(0)
