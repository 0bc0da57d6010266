/**
 * The pipeline process of the benchmark: one `Pipeline` and nothing else, so
 * its CPU time, RSS and heap are the pipeline's own. The orchestrator
 * (`run.ts`) drives it with JSON lines on stdin; each command is answered with
 * one JSON line on stdout (`{"id":…,"ok":true,"result":…}` or `"ok":false`).
 *
 * Commands:
 * - `start {connectionString, storageDir, slotName, snapshotConnections?, targetLsn?, adoptLsn?, sampleMemory?}`:
 *   `Pipeline.start` (opens the store, restores its shapes, starts streaming).
 *   With `adoptLsn` (the run's new slot's position), the store's watermark is
 *   first advanced to it (untimed; see `start`).
 *   With `targetLsn`, the first flush whose durable watermark reaches it is
 *   timed from the moment `start` resolved (see `waitDurable`).
 * - `register {set, count?, concurrency}`: resolves the set's shapes, at most
 *   `concurrency` creations in flight, and waits until every one is ready.
 * - `waitDurable {}`: resolves once the watermark reached `targetLsn`.
 * - `memory {}`: RSS and heap after a full GC.
 * - `stopProfile {}`: ends the CPU profile `start` began (the keep-up run's window: from `start` resolving to here).
 * - `heapSnapshot {path}`: writes a V8 heap snapshot (for working out what a shape costs).
 * - `stop {}`: `pipeline.stop()`; the process exits after answering.
 */
import { writeFileSync } from 'node:fs'
import { Session } from 'node:inspector'
import { createInterface } from 'node:readline'
import { writeHeapSnapshot } from 'node:v8'
import { PerformanceObserver, constants as perfConstants, performance } from 'node:perf_hooks'
import type { Pipeline as PipelineType } from './server.js'
import { Pipeline, configureYoungGc } from './server.js'
import { SHAPE_SETS, shapeParams } from './workload.js'
import { openFileLogStore } from '@sluice/storage'
import { join } from 'node:path'

interface Request {
  readonly id: number
  readonly cmd: string
  readonly args: Record<string, unknown>
}

// The process is set up as the `sluice` command sets up its own (young-gc.ts: on two cores, no parallel scavenges).
configureYoungGc()

let pipeline: PipelineType | undefined
let startedAt = 0
let targetLsn: bigint | undefined
let reachedAt: number | undefined
let reachedWaiters: Array<() => void> = []
let flushes = 0

function send(message: object): void {
  process.stdout.write(`${JSON.stringify(message, (_k, v: unknown) => (typeof v === 'bigint' ? v.toString() : v))}\n`)
}

export interface MemorySample {
  readonly rss: number
  readonly heapUsed: number
  readonly heapTotal: number
  readonly external: number
  readonly arrayBuffers: number
}

function memory(): MemorySample {
  // --expose-gc: two passes, so weak references and finalizers of the first are collected too.
  const gc = (globalThis as { gc?: () => void }).gc
  gc?.()
  gc?.()
  const m = process.memoryUsage()
  return { rss: m.rss, heapUsed: m.heapUsed, heapTotal: m.heapTotal, external: m.external, arrayBuffers: m.arrayBuffers }
}

async function start(args: Record<string, unknown>): Promise<object> {
  if (pipeline !== undefined) throw new Error('already started')
  const before = memory()
  // Started before Pipeline.start so that starting the profiler costs the timed window nothing; samples outside the window are dropped by the summary.
  if (typeof args.profilePath === 'string') await startProfile(args.profilePath)
  const t0 = performance.now()
  targetLsn = typeof args.targetLsn === 'string' ? BigInt(args.targetLsn) : undefined
  if (typeof args.adoptLsn === 'string') {
    // The benchmark reuses a set's store with each run's new slot, created after
    // the store's last run with nothing for its shapes in between. A real restart
    // with a slot ahead of the store means missed changes, and Pipeline.start
    // invalidates every shape; here the store is first declared up to date.
    // Where Pipeline.start keeps its store.
    const store = await openFileLogStore({ dir: join(String(args.storageDir), 'logs') })
    store.advance(BigInt(args.adoptLsn))
    await store.flush()
    await store.close()
  }
  pipeline = await Pipeline.start({
    connectionString: String(args.connectionString),
    storageDir: String(args.storageDir),
    slotName: String(args.slotName),
    ...(typeof args.snapshotConnections === 'number' ? { snapshotConnections: args.snapshotConnections } : {}),
    ...(typeof args.flushIntervalMs === 'number' ? { flushIntervalMs: args.flushIntervalMs } : {}),
    ...(process.env.BENCH_TAIL_BUDGET ? { tailBudgetBytes: Number(process.env.BENCH_TAIL_BUDGET) } : {}),
    logger: {
      info: () => {},
      warn: (data, message) => process.stderr.write(`warn: ${message} ${safeJson(data)}\n`),
      error: (data, message) => process.stderr.write(`error: ${message} ${safeJson(data)}\n`),
    },
  })
  // Sampled only when asked, and before the clock starts: two forced full GCs of a 100k-shape heap take
  // about 2 s, during which the stream (already running) waits. The throughput runs used to sample here
  // after the clock started, which charged those seconds to every timed window (worst at 100k shapes).
  const restored = args.sampleMemory === true ? memory() : undefined
  await startHeapSampling()
  startedAt = performance.now()
  windowStartUs = monotonicUs()
  const p = pipeline
  instrumentStore(p)
  watchStore(p)
  p.store.onFlush((result) => {
    flushes++
    if (reachedAt === undefined && targetLsn !== undefined && result.durableLsn >= targetLsn) {
      reachedAt = performance.now()
      windowEndUs = monotonicUs()
      // With --trace-gc*, V8 stamps each collection with ms since the isolate started; performance.now() counts from
      // the process's start, a few ms earlier, which is close enough to pick a window's collections.
      if (TRACE_GC) process.stderr.write(`bench window: ${startedAt.toFixed(0)} -> ${reachedAt.toFixed(0)} ms\n`)
      for (const w of reachedWaiters) w()
      reachedWaiters = []
    }
    // As the pipeline's own listeners: an HTTP server asks for `advanced` only while clients wait.
  }, { advanced: false })
  return {
    startMs: startedAt - t0,
    shapes: p.shapes.size,
    memoryBefore: before,
    memory: restored,
    cpu: process.cpuUsage(),
    pageFaults: process.resourceUsage().minorPageFault,
  }
}

async function register(args: Record<string, unknown>): Promise<object> {
  const p = need()
  const set = SHAPE_SETS[String(args.set)]
  if (set === undefined) throw new Error(`unknown shape set ${String(args.set)}`)
  const count = typeof args.count === 'number' ? args.count : set.count
  const concurrency = typeof args.concurrency === 'number' ? args.concurrency : count
  if (typeof args.profilePath === 'string') {
    await startProfile(args.profilePath)
    await startHeapSampling()
  }
  windowStartUs = monotonicUs()
  const before = memory()
  creation.count = 0
  creation.snapshotMs = 0
  creation.finishMs = 0
  const cpu0 = process.cpuUsage()
  const t0 = performance.now()
  let firstResolved: number | undefined
  let lastReady = 0
  let created = 0
  let next = 0
  // Summed over creations: time in resolve() (catalog, compile, publication) and from then to ready (snapshot, durable log).
  let resolveMs = 0
  let readyMs = 0
  const progressEvery = Math.max(1, Math.floor(count / 10))
  const worker = async (): Promise<void> => {
    while (next < count) {
      const i = next++
      const r0 = performance.now()
      const resolved = await p.shapes.resolve(shapeParams(set, i))
      const r1 = performance.now()
      firstResolved ??= r1
      resolveMs += r1 - r0
      if (resolved.created) created++
      await p.shapes.ready(resolved.handle)
      lastReady = performance.now()
      readyMs += lastReady - r1
      if ((i + 1) % progressEvery === 0) send({ event: 'progress', set: set.id, done: i + 1, ms: lastReady - t0 })
    }
  }
  await Promise.all(Array.from({ length: Math.min(concurrency, count) }, worker))
  const cpu = process.cpuUsage(cpu0)
  await stopProfile()
  // Everything the snapshots wrote is durable once `ready` resolves; flush once more for the watermark.
  await p.store.flush()
  return {
    set: set.id,
    count,
    created,
    concurrency,
    wallMs: lastReady - t0,
    firstResolveMs: (firstResolved ?? t0) - t0,
    meanResolveMs: resolveMs / count,
    meanReadyMs: readyMs / count,
    meanSnapshotMs: creation.snapshotMs / Math.max(1, creation.count),
    meanFinishMs: creation.finishMs / Math.max(1, creation.count),
    cpuUserMs: cpu.user / 1000,
    cpuSystemMs: cpu.system / 1000,
    memoryBefore: before,
    memoryAfter: memory(),
  }
}

/**
 * Where a shape's creation spends its time, seen from the store: from
 * `createShape` (the snapshot's connection is held, its transaction about to
 * start) to `finish` (the rows are written) is the snapshot; from `finish` to
 * its resolution, the flush that makes the new log durable and publishes it.
 * Wraps the store's methods on this instance only; costs two clock reads per shape.
 */
const creation = { count: 0, snapshotMs: 0, finishMs: 0 }

function instrumentStore(p: PipelineType): void {
  const store = p.store as unknown as { createShape: (id: string, options?: object) => { finish: (end: Uint8Array) => Promise<unknown> } }
  const createShape = store.createShape.bind(store)
  store.createShape = (id, options) => {
    const created = performance.now()
    const writer = createShape(id, options)
    const finish = writer.finish.bind(writer)
    writer.finish = (end) => {
      const finishing = performance.now()
      creation.snapshotMs += finishing - created
      return finish(end).then((log) => {
        creation.count++
        creation.finishMs += performance.now() - finishing
        return log
      })
    }
    return writer
  }
}

/**
 * BENCH_STORE_STATS=<ms>: every <ms>, one line on stderr with the store's
 * journal segments, the running (or last) checkpoint's progress and phase
 * times, the tail arena's size and the durable watermark (how write-behind and checkpoints keep up under load),
 * and since the last line the event loop's busy share and the garbage
 * collector's pauses (count and ms, young generation and full).
 */
function watchStore(p: PipelineType): void {
  const every = Number(process.env.BENCH_STORE_STATS ?? 0)
  if (!(every > 0)) return
  const store = p.store
  const t0 = performance.now()
  const gc = { minor: 0, minorMs: 0, major: 0, majorMs: 0 }
  const observer = new PerformanceObserver((list) => {
    for (const e of list.getEntries()) {
      const kind = ((e as unknown as { detail?: { kind?: number } }).detail)?.kind
      if (kind === perfConstants.NODE_PERFORMANCE_GC_MINOR) {
        gc.minor++
        gc.minorMs += e.duration
      } else {
        gc.major++
        gc.majorMs += e.duration
      }
    }
  })
  observer.observe({ entryTypes: ['gc'] })
  let elu = performance.eventLoopUtilization()
  const timer = setInterval(() => {
    const loop = performance.eventLoopUtilization(elu)
    elu = performance.eventLoopUtilization()
    const mem = process.memoryUsage()
    const stats = store.stats()
    const c = stats.checkpoint
    process.stderr.write(
      `store: ${JSON.stringify({
        s: Math.round((performance.now() - t0) / 100) / 10,
        segments: stats.journalSegments,
        checkpoint: { ...c, writeBackMs: Math.round(c.writeBackMs), syncMs: Math.round(c.syncMs), totalMs: Math.round(c.totalMs) },
        tailMiB: Math.round(stats.tailBytes / 2 ** 20),
        arenaMiB: Math.round(stats.tailMemoryBytes / 2 ** 20),
        held: stats.underPressure,
        holds: stats.pressures,
        paused: p.replication.pauseReasons,
        arrayBuffersMiB: Math.round(mem.arrayBuffers / 2 ** 20),
        heapMiB: Math.round(mem.heapUsed / 2 ** 20),
        durable: store.durableLsn.toString(16),
        loopBusy: Math.round(loop.utilization * 100),
        gc: { minor: gc.minor, minorMs: Math.round(gc.minorMs), major: gc.major, majorMs: Math.round(gc.majorMs) },
      })}\n`,
    )
    Object.assign(gc, { minor: 0, minorMs: 0, major: 0, majorMs: 0 })
  }, every)
  timer.unref()
}

/**
 * A CPU profile of exactly the timed window (from `start` resolving to the
 * workload durable), taken in-process through the inspector, 200 µs sampling.
 */
let profiler: { session: Session; path: string; sampling?: boolean } | undefined
/**
 * BENCH_HEAP_PROF with BENCH_CPU_PROF: a sampled allocation profile of the
 * window too (<name>.heapprofile). `all`: every allocation (what makes the
 * young generation fill); `promoted`: only what outlived a scavenge (what
 * full collections of the old generation then have to find).
 */
const HEAP_PROF = process.env.BENCH_HEAP_PROF === 'all' || process.env.BENCH_HEAP_PROF === 'promoted'
let windowStartUs = 0
/**
 * Where a throughput run's window ended (the workload durable), if it has: the profile is
 * stopped later, after `memory()`'s two forced full collections (~1.7 s at 100k shapes),
 * which are not the pipeline's work and must not be summarised as its GC time.
 */
let windowEndUs: number | undefined
const TRACE_GC = process.execArgv.some((a) => a.startsWith('--trace-gc'))

/** The clock V8 stamps profile samples with (CLOCK_MONOTONIC, µs). */
function monotonicUs(): number {
  return Number(process.hrtime.bigint() / 1000n)
}

function post<T = unknown>(session: Session, method: string, params?: object): Promise<T> {
  return new Promise((resolve, reject) => session.post(method, params ?? {}, (err, result) => (err ? reject(err) : resolve(result as T))))
}

async function startProfile(path: string): Promise<void> {
  const session = new Session()
  session.connect()
  await post(session, 'Profiler.enable')
  await post(session, 'Profiler.setSamplingInterval', { interval: 200 })
  await post(session, 'Profiler.start')
  profiler = { session, path }
  windowEndUs = undefined
}

/** Allocation sampling covers the window only: what restoring the shapes allocated is not the pipeline's steady state. */
async function startHeapSampling(): Promise<void> {
  if (profiler === undefined || !HEAP_PROF) return
  profiler.sampling = true
  await post(profiler.session, 'HeapProfiler.enable')
  await post(profiler.session, 'HeapProfiler.startSampling', {
    samplingInterval: 4096,
    includeObjectsCollectedByMajorGC: true,
    includeObjectsCollectedByMinorGC: process.env.BENCH_HEAP_PROF === 'all',
  })
}

async function stopProfile(): Promise<void> {
  if (profiler === undefined) return
  const { session, path, sampling } = profiler
  profiler = undefined
  const endUs = windowEndUs ?? monotonicUs()
  windowEndUs = undefined
  const { profile } = await post<{ profile: object }>(session, 'Profiler.stop')
  writeFileSync(path, JSON.stringify({ ...profile, sluiceWindow: [windowStartUs, endUs] }))
  if (sampling === true) {
    // `promoted`: a young collection first, so the garbage allocated since the last one is not counted as survivors.
    if (process.env.BENCH_HEAP_PROF === 'promoted') (globalThis as { gc?: (o: object) => void }).gc?.({ type: 'minor' })
    const { profile: heap } = await post<{ profile: object }>(session, 'HeapProfiler.stopSampling')
    writeFileSync(path.replace(/\.cpuprofile$/, '.heapprofile'), JSON.stringify(heap))
  }
  session.disconnect()
}

async function waitDurable(): Promise<object> {
  const p = need()
  const result = await reached(p)
  await stopProfile()
  return result
}

function reached(p: PipelineType): Promise<object> {
  const done = (): object => ({
    ms: reachedAt! - startedAt,
    durableLsn: p.store.durableLsn,
    transactionsRouted: p.router.transactionsRouted,
    flushes,
    cpu: process.cpuUsage(),
    // Read before memory()'s forced collections, which touch pages of their own.
    pageFaults: process.resourceUsage().minorPageFault,
    memory: memory(),
  })
  if (targetLsn === undefined) return Promise.reject(new Error('start had no targetLsn'))
  if (reachedAt !== undefined) return Promise.resolve(done())
  return new Promise((resolve) => reachedWaiters.push(() => resolve(done())))
}

function need(): PipelineType {
  if (pipeline === undefined) throw new Error('not started')
  return pipeline
}

function safeJson(data: unknown): string {
  try {
    return JSON.stringify(data, (_k, v: unknown) => (v instanceof Error ? `${v.name}: ${v.message}` : typeof v === 'bigint' ? v.toString() : v))
  } catch {
    return String(data)
  }
}

async function handle(req: Request): Promise<void> {
  try {
    let result: object
    switch (req.cmd) {
      case 'start':
        result = await start(req.args)
        break
      case 'register':
        result = await register(req.args)
        break
      case 'waitDurable':
        result = await waitDurable()
        break
      case 'stopProfile':
        await stopProfile()
        result = {}
        break
      case 'heapSnapshot':
        result = { path: writeHeapSnapshot(String(req.args.path)) }
        break
      case 'memory':
        result = { memory: memory(), shapes: pipeline?.shapes.size ?? 0, cpu: process.cpuUsage() }
        break
      case 'stop': {
        const t0 = performance.now()
        await pipeline?.stop()
        send({ id: req.id, ok: true, result: { stopMs: performance.now() - t0 } })
        process.exit(0)
      }
      default:
        throw new Error(`unknown command ${req.cmd}`)
    }
    send({ id: req.id, ok: true, result })
  } catch (error) {
    send({ id: req.id, ok: false, error: error instanceof Error ? `${error.name}: ${error.message}` : String(error) })
  }
}

const lines = createInterface({ input: process.stdin })
lines.on('line', (line) => {
  if (line.trim() === '') return
  void handle(JSON.parse(line) as Request)
})
// The orchestrator going away takes this process with it.
lines.on('close', () => {
  void (pipeline?.stop() ?? Promise.resolve()).finally(() => process.exit(0))
})
send({ event: 'ready', pid: process.pid })
