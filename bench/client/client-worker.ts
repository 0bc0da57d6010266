/**
 * One client measurement, in a fresh Node process of its own (run with
 * --expose-gc), so the peak memory it reports is that client's: the process
 * imports only the client it measures, when told to.
 *
 * Commands (JSON lines, `http/json-lines.ts`):
 * - `load {client}`: imports `@sluice/client` (ours) or `@electric-sql/client` (official).
 * - `sync {url, table, rows}`: the timed sync: from creating the stream and
 *   Shape to the first up-to-date with `rows` rows in the Map. Peak RSS is the
 *   kernel's high-water mark (`VmHWM`, reset at the start), peak heapUsed is
 *   sampled every 20 ms (a long synchronous task can hide a peak from it);
 *   then retained memory after a forced GC with the Shape still alive.
 * - `liveOpen {url, table, where, rows, blocks, rowsPerTx}`: syncs a Shape (untimed) and
 *   subscribes to it; `liveMeasure {fromSeq}` starts the live window;
 *   `liveFinish {endSeq, timeoutMs}` waits for transaction `endSeq - 1` to show
 *   and returns the lag samples' statistics, CPU time and peak memory of the window.
 * - `digest`: sha256 over the Shape's rows sorted by key (every value, bigints
 *   as text) and over `id:seq:stamp_ns` lines sorted by id (compared with Postgres).
 */
import { createHash } from 'node:crypto'
import { serveCommands } from '../http/json-lines.js'
import { quantile } from '../pipeline/stats.js'
import { MemorySampler, cpuMs, gc, memory, peakRss, resetPeakRss } from './process-memory.js'
import { blockOf } from './schema.js'
import { type Opener, type OpenShape, type ShapeClient, loadOpener, rowsDigest } from './shape-opener.js'

/** Transactions past the newest one found that each notification still checks (commits of the writer's connections may land out of order). */
const LOOKAHEAD = 256

let open: Opener | undefined
let clientName: ShapeClient | undefined

async function load(args: Record<string, unknown>): Promise<Record<string, unknown>> {
  clientName = args.client as ShapeClient
  open = await loadOpener(clientName)
  gc()
  return { memory: memory() }
}

// ---- sync ----

let current: OpenShape | undefined

async function sync(args: Record<string, unknown>): Promise<Record<string, unknown>> {
  if (open === undefined) throw new Error('load a client first')
  const rows = Number(args.rows)
  gc()
  const before = memory()
  const hwmReset = resetPeakRss()
  const sampler = new MemorySampler().start()
  const cpu0 = process.cpuUsage()
  const t0 = performance.now()
  const shape = open(String(args.url), String(args.table), undefined)
  await shape.ready()
  const size = shape.value().size
  const ms = performance.now() - t0
  const cpu = cpuMs(cpu0)
  sampler.stop()
  const peak = peakRss()
  current = shape
  gc()
  const retained = memory()
  if (size !== rows) throw new Error(`${clientName}: ${size} rows at the first up-to-date, expected ${rows}`)
  return {
    ms,
    rows: size,
    ...cpu,
    before,
    peakRss: hwmReset ? peak : null,
    peakRssSampled: sampler.peakRssSampled,
    peakHeapUsed: sampler.peakHeapUsed,
    samples: sampler.samples,
    retained,
  }
}

// ---- live ----

interface LiveState {
  readonly shape: OpenShape
  readonly blocks: number
  readonly rowsPerTx: number
  /** The row key of each id (ids 1..rows), from the synced Map. */
  readonly keyById: string[]
  measuring: boolean
  /** The oldest transaction not yet seen in the Shape. */
  next: number
  readonly seen: Set<number>
  readonly lagsMs: number[]
  /** Transactions whose rows were already overwritten by a later one when first looked at (lag unknown). */
  overtaken: number
  notifications: number
  sampler?: MemorySampler
  cpu0?: NodeJS.CpuUsage
  t0?: number
  drained?: () => void
  endSeq: number
  fromSeq: number
}

let live: LiveState | undefined

async function liveOpen(args: Record<string, unknown>): Promise<Record<string, unknown>> {
  if (open === undefined) throw new Error('load a client first')
  const rows = Number(args.rows)
  const t0 = performance.now()
  const shape = open(String(args.url), String(args.table), args.where === undefined ? undefined : String(args.where))
  await shape.ready()
  const ms = performance.now() - t0
  const value = shape.value()
  if (value.size !== rows) throw new Error(`${clientName}: ${value.size} rows at the first up-to-date, expected ${rows}`)
  const keyById: string[] = []
  for (const [key, row] of value) keyById[Number(row.id)] = key
  const state: LiveState = {
    shape,
    blocks: Number(args.blocks),
    rowsPerTx: Number(args.rowsPerTx),
    keyById,
    measuring: false,
    next: 0,
    seen: new Set(),
    lagsMs: [],
    overtaken: 0,
    notifications: 0,
    endSeq: Number.POSITIVE_INFINITY,
    fromSeq: 0,
  }
  live = state
  shape.subscribe(() => probe(state))
  return { syncMs: ms, rows: value.size }
}

/**
 * At each notification: which of the next transactions do the rows now show?
 * Transaction `s` shows when the first row of its block carries `seq = s`; its
 * lag is now minus the stamp the writer put in that row.
 */
function probe(state: LiveState): void {
  state.notifications++
  if (!state.measuring) return
  const now = process.hrtime.bigint()
  const value = state.shape.value()
  // The window reaches LOOKAHEAD past the newest transaction found, so a notification that
  // brings many transactions at once (a lagging server) is read to its end.
  let limit = state.next + LOOKAHEAD
  for (let s = state.next; s < limit && s < state.endSeq; s++) {
    if (state.seen.has(s)) continue
    const row = value.get(state.keyById[blockOf(s, state.blocks, state.rowsPerTx).first]!)
    if (row === undefined) continue
    const seq = Number(row.seq)
    if (seq === s) {
      state.lagsMs.push(Number(now - BigInt(row.stamp_ns as bigint | string)) / 1e6)
      state.seen.add(s)
      limit = s + LOOKAHEAD
    } else if (seq > s) {
      state.overtaken++
      state.seen.add(s)
      limit = s + LOOKAHEAD
    }
  }
  while (state.seen.delete(state.next)) state.next++
  if (state.next >= state.endSeq) state.drained?.()
}

async function liveMeasure(args: Record<string, unknown>): Promise<Record<string, unknown>> {
  const state = live
  if (state === undefined) throw new Error('no live shape')
  gc()
  const before = memory()
  const hwmReset = resetPeakRss()
  state.next = Number(args.fromSeq)
  state.fromSeq = state.next
  state.sampler = new MemorySampler().start()
  state.cpu0 = process.cpuUsage()
  state.t0 = performance.now()
  state.measuring = true
  return { before, hwmReset }
}

async function liveFinish(args: Record<string, unknown>): Promise<Record<string, unknown>> {
  const state = live
  if (state === undefined || state.cpu0 === undefined || state.sampler === undefined) throw new Error('not measuring')
  state.endSeq = Number(args.endSeq)
  probe(state)
  if (state.next < state.endSeq) {
    await new Promise<void>((resolve) => {
      const timer = setTimeout(resolve, Number(args.timeoutMs))
      state.drained = () => {
        clearTimeout(timer)
        resolve()
      }
    })
  }
  const wallMs = performance.now() - state.t0!
  const cpu = cpuMs(state.cpu0)
  state.sampler.stop()
  const peak = peakRss()
  state.measuring = false
  const lags = state.lagsMs
  return {
    transactions: state.endSeq - state.fromSeq,
    seen: lags.length,
    overtaken: state.overtaken,
    missing: Math.max(0, state.endSeq - state.next),
    notifications: state.notifications,
    lagP50Ms: quantile(lags, 0.5),
    lagP95Ms: quantile(lags, 0.95),
    lagP99Ms: quantile(lags, 0.99),
    lagMaxMs: lags.length === 0 ? Number.NaN : Math.max(...lags),
    lagMeanMs: lags.length === 0 ? Number.NaN : lags.reduce((a, b) => a + b, 0) / lags.length,
    wallMs,
    ...cpu,
    peakRss: peak,
    peakRssSampled: state.sampler.peakRssSampled,
    peakHeapUsed: state.sampler.peakHeapUsed,
  }
}

// ---- digests ----

function digest(): Record<string, unknown> {
  const shape = live?.shape ?? current
  if (shape === undefined) throw new Error('no shape')
  const value = shape.value()
  const seqHash = createHash('sha256')
  const ids = [...value.values()].map((row) => [BigInt(row.id as bigint), String(row.seq), String(row.stamp_ns)] as const)
  ids.sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0))
  for (const [id, seq, stamp] of ids) seqHash.update(`${id}:${seq}:${stamp}\n`)
  return { rows: value.size, rowsSha256: rowsDigest(value, createHash('sha256')), seqSha256: seqHash.digest('hex') }
}

async function stop(): Promise<null> {
  await (live?.shape ?? current)?.stop()
  return null
}

serveCommands({ load, sync, liveOpen, liveMeasure, liveFinish, digest, stop })
