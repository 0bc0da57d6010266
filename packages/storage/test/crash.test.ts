/**
 * Crash tests (real processes, real files, SIGKILL).
 *
 * Each lane owns a store directory. A child writer (fixtures/crash-writer.ts)
 * opens it, recovers it, and appends the deterministic workload of
 * fixtures/workload.ts from where the durable watermark says the logs end
 * (replaying, as a replication client would from its slot); the parent kills it
 * with SIGKILL after a random delay, so kills land during appends, fsyncs,
 * watermark publishes, snapshot creations, deletions and recovery itself. After
 * every kill the parent checks the directory, alternately through a read-only
 * store (the crashed files as they are) and through a writer open (recovery,
 * which cuts the files back; then the on-disk byte tables are decoded and
 * compared too):
 *
 *   - the watermark file is valid, never moved back, and covers at least the
 *     last `durable <lsn>` the child printed;
 *   - every log holds exactly the expected entries of every transaction up to
 *     the watermark, byte for byte (SIGKILL loses nothing written, so nothing
 *     covered is missing and nothing beyond is visible): never a torn
 *     transaction, never a stray entry;
 *   - chunk boundaries sit where the threshold rule puts them (a walk from -1
 *     following nextOffset compares every range with the expected chunk);
 *   - a shape exists once a transaction after its creation is durable, and is
 *     gone once a transaction after its deletion is; one caught mid-snapshot is
 *     either absent or complete;
 *   - queued shapes (fixtures/workload.ts), built as the server builds shapes,
 *     with the queued transactions (by then below the watermark the other logs
 *     advanced) drained into the writer after `finish`, some in parts with
 *     pauses, and live ones appended during the finishing window: after any
 *     kill such a shape is absent or holds its snapshot and every transaction
 *     up to the watermark since it registered, and nothing is quarantined;
 *   - the next child resumes exactly at that watermark, with the same heads,
 *     replays without duplicating, and appends on; a final clean run per
 *     directory appends a fixed number of transactions and closes.
 *
 * Children journal into 16 KiB segments with a 24 KiB tail budget, so
 * checkpoints (sync the logs of closed segments, delete them) run every few
 * flushes, some of them of segments sealed early for the budget, and kills
 * land in them (counted); every kill leaves a journal that the next open replays, so kills
 * during `open` land in replay.
 *
 * Children also rewrite the heads file every few milliseconds, so the opens
 * after most kills (the next child's, the parent's writer open) take most
 * logs from a heads file written while the logs moved on, and some kills land
 * while one is written.
 *
 * Odd lanes run their children on fixtures/volatile-fs.ts, where writes reach
 * the files only when synced, so a kill there also loses every unsynced page
 * (a power cut) rather than none; every check above must hold under both.
 *
 * While the children run, a read-only store in this process follows the same
 * directory across kills and recoveries (`verifyRange` with the watermark
 * bracket of each read): a reader never sees anything unpublished or torn.
 * It sometimes pauses between `get` and the read, so a log is deleted under
 * it: the writer never writes a deleted log's tail back, and such a read must
 * answer `shape_deleted`, never a view that lacks what the watermark covers.
 *
 * Default: 50 kill points (2 lanes). SOAK=1: 500. CRASH_KILLS, CRASH_LANES,
 * CRASH_PREWARM, CRASH_SEED override; CRASH_DEBUG=1 prints per-kill timings.
 */
import { shapeDir } from '../src/file/shape-dirs.js'
import { storedIds } from './fixtures/log-dirs.js'
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, statSync } from 'node:fs'
import { parseSegment } from '../src/file/journal-format.js'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { formatOffset } from '@sluice/protocol'
import { afterAll, describe, expect, it } from 'vitest'
import type { ShapeLog } from '../src/index.js'
import { openFileLogStore, openReadOnlyLogStore, readSpans, readSpansAsync } from '../src/index.js'
import { checkLogFiles, readStoreWatermark, readWatermarkFile } from './fixtures/files.js'
import type { Child } from './fixtures/proc.js'
import { sleep, spawnFixture } from './fixtures/proc.js'
import type { CrashChildConfig } from './fixtures/crash-writer.js'
import type { Schedule } from './fixtures/workload.js'
import { ExpectedLog, FIXED_ENTRY_BYTES, kOf, observe, parseMeta, rng, specOf, specsUpTo, verifyRange, walkLog } from './fixtures/workload.js'

const SOAK = process.env.SOAK === '1'
const KILLS = Number(process.env.CRASH_KILLS ?? (SOAK ? 500 : 50))
const LANES = Number(process.env.CRASH_LANES ?? 2)
/** Children started ahead of use. */
const PREWARM = Number(process.env.CRASH_PREWARM ?? 3)
/** Kill points per directory before a lane starts over in a fresh one (keeps re-verification linear). */
const EPOCH = 50
const SEED = Number(process.env.CRASH_SEED ?? Math.floor(Math.random() * 2 ** 31))
const CHUNK_BYTES = 20 * FIXED_ENTRY_BYTES // 2560: s0 and s2 fill chunks to exactly the threshold
const FLUSH_INTERVAL_MS = 3
const FINAL_TXS = 30
// A few flushes per segment, so children checkpoint (and get killed checkpointing) often.
const JOURNAL_SEGMENT_BYTES = 16 * 1024
// Tails past half of it seal the current segment early (Journal.seal): kills land in those checkpoints too.
const TAIL_BUDGET_BYTES = 24 * 1024
// Heads files written many times per child (heads-snapshots.ts).
const HEADS_INTERVAL_MS = 15
const SCHEDULE: Schedule = { statics: 3, dynEvery: 25, dynLife: 70, touchPct: 45, queuedEvery: 30, queuedLag: 5, queuedLife: 40 }

interface Stats {
  kills: number
  byPhase: Record<string, number>
  /** Distinct transactions found durable and byte-exact (per directory, summed). */
  transactions: number
  /** Entries compared, counting every re-verification. */
  entriesChecked: number
  bytesChecked: number
  verifications: { readonly: number; writer: number }
  snapshotKills: { absent: number; complete: number }
  /** Kills between a queued shape's finish() and its resolution. */
  finishingKills: { absent: number; complete: number }
  liveReads: number
  /** Follower reads of a log the writer deleted after the follower's `get` (answered `shape_deleted`). */
  deletedReads: number
  childRuns: number
  /** Kills while a journal checkpoint was due or running (segment closed, not yet deleted). */
  checkpointKills: number
  /** Logs the parent's writer opens took from a heads file a killed child left, and logs they opened in all. */
  fromHeads: number
  writerOpened: number
}

const stats: Stats = {
  kills: 0,
  byPhase: {},
  transactions: 0,
  entriesChecked: 0,
  bytesChecked: 0,
  verifications: { readonly: 0, writer: 0 },
  snapshotKills: { absent: 0, complete: 0 },
  finishingKills: { absent: 0, complete: 0 },
  fromHeads: 0,
  writerOpened: 0,
  liveReads: 0,
  deletedReads: 0,
  childRuns: 0,
  checkpointKills: 0,
}

const dirs: string[] = []
afterAll(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true })
})

class Lane {
  readonly dir: string
  private readonly exps = new Map<string, ExpectedLog>()
  /** Watermark found by the last verification. */
  lastW = 0n
  /** Ids whose deletion a child announced (deletion is immediate, not bound to the watermark). */
  readonly deletions = new Set<string>()
  /** What is happening to the directory right now (for diagnostics). */
  activity = 'idle'

  constructor(
    readonly name: string,
    /** Children lose unsynced writes when killed. */
    readonly volatile: boolean,
  ) {
    this.dir = mkdtempSync(join(tmpdir(), `sluice-crash-${name}-`))
    dirs.push(this.dir)
  }

  exp(id: string): ExpectedLog {
    let e = this.exps.get(id)
    if (!e) {
      const spec = specOf(SCHEDULE, id)
      if (!spec) throw new Error(`${this.name}: unexpected shape directory ${id}`)
      e = new ExpectedLog(SCHEDULE, spec, CHUNK_BYTES)
      this.exps.set(id, e)
    }
    return e
  }

  /** Starts a pre-started child on this lane's directory. */
  go(child: Child, seed: number, stopAfter?: number): void {
    const config: CrashChildConfig = {
      dir: this.dir,
      chunkBytes: CHUNK_BYTES,
      flushIntervalMs: FLUSH_INTERVAL_MS,
      schedule: SCHEDULE,
      seed,
      volatile: this.volatile,
      journalSegmentBytes: JOURNAL_SEGMENT_BYTES,
      tailBudgetBytes: TAIL_BUDGET_BYTES,
      headsIntervalMs: HEADS_INTERVAL_MS,
      ...(stopAfter === undefined ? {} : { stopAfter }),
    }
    child.send(`go ${JSON.stringify(config)}`)
  }

  /** Full check of the directory. `writer`: open for writing (recovery) and check the raw files too. */
  async verify(mode: 'readonly' | 'writer', printedW: bigint): Promise<bigint> {
    const tStart = Date.now()
    if (!existsSync(join(this.dir, 'watermark'))) {
      // Killed during the very first open, before the initial watermark was published.
      expect(this.lastW, `${this.name}: watermark file vanished`).toBe(0n)
      expect(existsSync(join(this.dir, 'shapes')) ? storedIds(this.dir) : []).toEqual([])
      return 0n
    }
    // The journal carries the watermark; the file moves at checkpoints.
    const w = readStoreWatermark(this.dir)
    expect(w, `${this.name}: store watermark below the last printed durable watermark`).toBeGreaterThanOrEqual(printedW)
    expect(w, `${this.name}: watermark moved back`).toBeGreaterThanOrEqual(this.lastW)
    const k = kOf(w)
    expect(readdirSync(join(this.dir, 'quarantine')), `${this.name}: a log was quarantined`).toEqual([])

    const ro = openReadOnlyLogStore({ dir: this.dir })
    let present: string[]
    try {
      // A follower goes by the writer's notice (watermark.live, written after each
      // flush's group is durable) and the file: never past the store's watermark,
      // and after a plain SIGKILL (page cache kept) at least what the child printed.
      const seen = ro.durableLsn
      expect(seen, `${this.name}: follower ahead of the store`).toBeLessThanOrEqual(w)
      expect(seen, `${this.name}: follower behind the watermark file`).toBeGreaterThanOrEqual(readWatermarkFile(this.dir))
      if (!this.volatile) expect(seen, `${this.name}: follower behind the printed watermark`).toBeGreaterThanOrEqual(printedW)
      present = ro.ids().sort()
      this.checkExistence(present, k)
      for (const id of present) {
        const log = ro.get(id)
        expect(log, `${this.name}: ${id} listed but not opened`).toBeDefined()
        this.checkLog(log!, id, seen)
      }
    } finally {
      await ro.close()
    }
    stats.verifications.readonly++
    const tRo = Date.now()

    if (mode === 'writer') {
      this.activity = 'parent writer open (recovery)'
      const ws = await openFileLogStore({ dir: this.dir, chunkBytes: CHUNK_BYTES, flushIntervalMs: 1000 })
      stats.fromHeads += ws.cleanOpened
      stats.writerOpened += ws.size
      try {
        expect(ws.quarantined).toEqual([])
        expect(ws.durableLsn).toBe(w)
        expect(ws.ids().sort()).toEqual(present)
        for (const id of present) {
          this.checkLog(ws.get(id)!, id, w)
          const exp = this.exp(id)
          checkLogFiles(shapeDir(this.dir, id), exp, exp.count(w))
        }
        expect(readdirSync(join(this.dir, 'tmp')), 'unfinished snapshots are dropped on open').toEqual([])
      } finally {
        await ws.close()
        this.activity = 'parent writer closed'
      }
      stats.verifications.writer++
    }
    if (process.env.CRASH_DEBUG) console.log(`${this.name} verify: read-only ${tRo - tStart} ms, writer ${Date.now() - tRo} ms`)
    if (k > kOf(this.lastW)) stats.transactions += k - kOf(this.lastW)
    this.lastW = w
    return w
  }

  private checkLog(log: ShapeLog, id: string, w: bigint): void {
    const exp = this.exp(id)
    const meta = parseMeta(log.meta)
    expect(meta).toEqual({ id, createAt: exp.spec.createAt })
    const walk = walkLog(log, exp, w)
    stats.entriesChecked += walk.entries
    stats.bytesChecked += walk.bytes
  }

  /**
   * Queued shapes a child was still building or finishing when it died, until a
   * later child prints that it snapped them (one killed while opening never does).
   * A child that restarts past a queued shape's finishAt calls `finish` late,
   * while it appends createAt, so the watermark can cover createAt before the
   * rename: such a shape may be missing (its creation never finished).
   */
  private readonly unfinished = new Set<string>()

  /** The last child's output, for failure messages. */
  private tail: readonly string[] = []

  private debugState(): string {
    const list = (d: string): string => (existsSync(join(this.dir, d)) ? readdirSync(join(this.dir, d)).join(',') : '-')
    return `file ${readWatermarkFile(this.dir)}, tmp [${list('tmp')}], trash [${list('trash')}], journal [${list('journal')}] ${journalDump(this.dir)}, tail: ${this.tail.slice(-12).join(' | ')}`
  }

  /** Which shapes must, may, or must not exist for watermark transaction k. */
  private checkExistence(present: string[], k: number): void {
    for (const id of present) {
      const spec = specOf(SCHEDULE, id)
      expect(spec, `${this.name}: unknown shape ${id}`).toBeDefined()
      // Its deletion ran before transaction deleteAt was appended, let alone made durable.
      expect(k < spec!.deleteAt, `${this.name}: ${id} still exists at durable transaction ${k} (deleted before ${spec!.deleteAt})`).toBe(true)
    }
    for (const spec of specsUpTo(SCHEDULE, k)) {
      // Created (and awaited) before transaction createAt was appended; only an announced deletion removes it.
      if (spec.createAt <= k && k < spec.deleteAt && !this.deletions.has(spec.id) && !this.unfinished.has(spec.id)) {
        expect(present, `${this.name}: ${spec.id} missing at durable transaction ${k} (${this.debugState()})`).toContain(spec.id)
      }
    }
  }

  /** What the child printed: its resume point and heads, its last durable watermark, and where it died. */
  analyse(child: Child, expectResume: number): { printedW: bigint; phase: string; snapshots: string[]; finishing: string[] } {
    const lines = child.lines
    this.tail = lines
    const error = lines.find((l) => l.startsWith('error'))
    expect(error, `${this.name}: child reported ${error}\n${child.stderr()}`).toBeUndefined()
    let printedW = 0n
    let phase = 'startup'
    // Queued shapes are built while the loop goes on, so several can be in flight.
    const snapshots = new Set<string>()
    const finishing = new Set<string>()
    let deleting: string | undefined
    let ready = false
    let checkpointing = false
    for (const line of lines) {
      const [word, a, b, c] = line.split(' ')
      if (word === 'checkpoint-start') checkpointing = true
      else if (word === 'checkpoint-end') checkpointing = false
      else if (word === 'durable') printedW = BigInt(a!)
      else if (word === 'phase') phase = a!
      else if (word === 'snap') snapshots.add(a!)
      else if (word === 'finish') finishing.add(a!)
      else if (word === 'snapped') {
        this.unfinished.delete(a!)
        snapshots.delete(a!)
        finishing.delete(a!)
      } else if (word === 'deleting') {
        deleting = a
        this.deletions.add(a!)
      } else if (word === 'deleted') deleting = undefined
      else if (word === 'ready') ready = true
      else if (word === 'resume') expect(Number(a), `${this.name}: child resumed elsewhere than the watermark`).toBe(expectResume)
      else if (word === 'head') {
        const exp = this.exp(a!)
        const p = exp.count(this.lastW)
        expect(`${a} ${b} ${c}`).toBe(`${a} ${p > 0 ? formatOffset(exp.offset(p - 1)) : '-1'} ${p}`)
      }
    }
    let where = phase
    if (!ready) where = phase === 'open' ? 'recovery' : 'startup'
    else if (finishing.size > 0) where = 'finish-queued'
    else if (snapshots.size > 0) where = 'snapshot'
    else if (deleting) where = 'delete'
    else if (phase === 'published') where = 'publish'
    if (checkpointing) stats.checkpointKills++
    for (const id of [...snapshots, ...finishing]) this.unfinished.add(id)
    return { printedW, phase: where, snapshots: [...snapshots], finishing: [...finishing] }
  }
}

/** Reads the lane's directory through one long-lived read-only store while children write and crash. */
function followReadOnly(lane: Lane, rand: () => number): { stop(): Promise<void>; check(): void } {
  let running = true
  let failure: unknown
  const loop = (async () => {
    let ro: ReturnType<typeof openReadOnlyLogStore> | undefined
    while (running) {
      await sleep(4)
      try {
        ro ??= openReadOnlyLogStore({ dir: lane.dir })
      } catch {
        continue // no watermark file yet
      }
      const ids = ro.ids()
      if (ids.length === 0) continue
      const id = ids[Math.floor(rand() * ids.length)]!
      const log = ro.get(id)
      if (!log) continue // deleted meanwhile
      // Time for the writer to delete it, as a request that waits does.
      if (rand() < 0.25) await sleep(Math.floor(rand() * 20))
      const exp = lane.exp(id)
      const dLow = ro.durableLsn
      const after = exp.randomOffset(rand, exp.count(dLow))
      let read
      try {
        read = log.read(after)
      } catch (err) {
        if (ro.get(id) === undefined) {
          stats.deletedReads++
          continue // deleted between get and read
        }
        const size = (f: string): number | string => {
          try {
            return statSync(join(shapeDir(lane.dir, id), f)).size
          } catch (e) {
            return String(e)
          }
        }
        let head: unknown
        try {
          head = log.head()
        } catch (e) {
          head = String(e)
        }
        throw new Error(
          `${lane.name} read-only follower: read(${formatOffset(after)}) of ${id} threw ${String(err)}; lane activity ${lane.activity}; ` +
            `watermark ${dLow} -> ${ro.durableLsn} (file ${readWatermarkFile(lane.dir)}); head now ${JSON.stringify(head, (_k, v: unknown) => (typeof v === 'bigint' ? String(v) : v))}; ` +
            `expected count ${exp.count(dLow)}; files log.dat ${size('log.dat')} entries.idx ${size('entries.idx')} (${(Number(size('entries.idx')) - 16) / 32} records) chunks.idx ${size('chunks.idx')}`,
          { cause: err },
        )
      }
      const dHigh = ro.durableLsn
      let bytes: Buffer
      try {
        bytes = rand() < 0.5 ? readSpans(read) : await readSpansAsync(read)
      } finally {
        read.release()
      }
      const problem = verifyRange(exp, after, observe(read, bytes), dLow, dHigh)
      if (problem) throw new Error(`${lane.name} read-only follower: ${problem}`)
      stats.liveReads++
    }
    await ro?.close()
  })().catch((err: unknown) => {
    failure = err
  })
  return {
    async stop() {
      running = false
      await loop
      if (failure !== undefined) throw failure
    },
    /** Throws the follower's failure, if any, so the lane stops at once. */
    check() {
      if (failure !== undefined) throw failure
    },
  }
}

/**
 * Children start ahead of use (tsx startup costs most of a second here), each
 * waiting for `go <config>`: a pool shared by the lanes.
 */
class Pool {
  private readonly warm: Child[] = []
  constructor(private readonly depth: number) {
    for (let i = 0; i < depth; i++) this.warm.push(this.spawn())
  }
  private spawn(): Child {
    stats.childRuns++
    return spawnFixture('crash-writer.ts', [])
  }
  async take(): Promise<Child> {
    const child = this.warm.shift() ?? this.spawn()
    this.warm.push(this.spawn())
    await child.waitFor((l) => l === 'loaded', { timeoutMs: 60_000 })
    return child
  }
  async close(): Promise<void> {
    await Promise.all(this.warm.splice(0).map((c) => c.kill()))
  }
}

async function runLane(name: string, kills: number, seed: number, pool: Pool, volatile: boolean): Promise<void> {
  const rand = rng(seed)
  let lane = new Lane(`${name}.0`, volatile)
  let epoch = 0
  let follower = followReadOnly(lane, rng(seed ^ 0x5555))
  try {
    for (let n = 0; n < kills; n++) {
      if (n > 0 && n % EPOCH === 0) {
        await finalRun(lane, pool, rand)
        await follower.stop()
        lane = new Lane(`${name}.${++epoch}`, volatile)
        follower = followReadOnly(lane, rng(seed ^ epoch))
      }
      const t0 = Date.now()
      const child = await pool.take()
      const t1 = Date.now()
      const resumeAt = kOf(lane.lastW)
      lane.go(child, Math.floor(rand() * 2 ** 31))
      lane.activity = `child ${child.pid} running`
      const aim = rand()
      if (aim < 0.1) {
        await child.waitFor((l) => l === 'phase open')
        await sleep(Math.floor(rand() * 4))
      } else if (aim < 0.3) {
        // Into a queued shape's finishing window: the drain, the finishing flush, the first live appends.
        const ready = await child.waitFor((l) => l === 'ready')
        const found = await child.waitFor((l) => l.startsWith('finish '), { from: ready, timeoutMs: 3000 }).then(
          () => true,
          () => false,
        )
        if (found) await sleep(Math.floor(rand() * 40))
      } else {
        await child.waitFor((l) => l === 'ready')
        await sleep(20 + Math.floor(rand() * 280))
      }
      const t2 = Date.now()
      const exit = await child.kill('SIGKILL')
      if (exit.signal !== 'SIGKILL') {
        throw new Error(`${lane.name}: child exited by itself (${JSON.stringify(exit)})\n${child.lines.slice(-20).join('\n')}\n${child.stderr()}`)
      }
      stats.kills++
      lane.activity = `child ${child.pid} killed`
      const { printedW, phase, snapshots, finishing } = lane.analyse(child, resumeAt)
      stats.byPhase[phase] = (stats.byPhase[phase] ?? 0) + 1
      await lane.verify(n % 2 === 1 ? 'writer' : 'readonly', printedW)
      for (const id of snapshots) {
        // Killed between createShape and finish resolving: absent, or (walked above) complete.
        const exists = storedIds(lane.dir).includes(id)
        const counts = finishing.includes(id) ? stats.finishingKills : stats.snapshotKills
        if (exists) counts.complete++
        else counts.absent++
      }
      follower.check()
      if (process.env.CRASH_DEBUG) {
        console.log(`${lane.name} #${n}: wait ${t1 - t0} ms, run ${t2 - t1} ms, check ${Date.now() - t2} ms, died in ${phase}, k ${kOf(lane.lastW)}`)
      }
    }
    await finalRun(lane, pool, rand)
  } finally {
    await follower.stop()
  }
}

/** A clean run: appends FINAL_TXS transactions after recovery, closes, exits 0; then a writer check. */
async function finalRun(lane: Lane, pool: Pool, rand: () => number): Promise<void> {
  const child = await pool.take()
  const resumeAt = kOf(lane.lastW)
  lane.go(child, Math.floor(rand() * 2 ** 31), FINAL_TXS)
  lane.activity = `final child ${child.pid} running`
  const exit = await child.closed
  expect(exit, `${lane.name}: final run\n${child.lines.slice(-20).join('\n')}\n${child.stderr()}`).toEqual({ code: 0, signal: null })
  const { printedW } = lane.analyse(child, resumeAt)
  expect(child.lines.at(-1)).toBe(`done ${resumeAt + FINAL_TXS}`)
  const w = await lane.verify('writer', printedW)
  expect(kOf(w), `${lane.name}: the clean run made its transactions durable`).toBe(resumeAt + FINAL_TXS)
}

describe('crash recovery under SIGKILL', () => {
  it(`keeps every log a byte-exact, untorn prefix covering the watermark across ${KILLS} kill points`, { timeout: Math.max(180_000, KILLS * 5_000) }, async () => {
    const started = Date.now()
    const perLane = Math.ceil(KILLS / LANES)
    const pool = new Pool(PREWARM)
    try {
      await Promise.all(Array.from({ length: LANES }, (_, i) => runLane(`lane${i}`, perLane, (SEED + i * 7919) >>> 0, pool, i % 2 === 1)))
    } catch (err) {
      // The seed, so that a failure seen once (a timing of a loaded host) can be run again.
      console.log(`crash test failed with seed ${SEED} (CRASH_SEED=${SEED}); lanes' activity: ${stats.kills} kills, ${stats.liveReads} live read-only reads, ${stats.deletedReads} of a log deleted meanwhile`)
      throw err
    } finally {
      await pool.close()
    }
    const seconds = ((Date.now() - started) / 1000).toFixed(1)
    console.log(
      `crash test: ${stats.kills} kill points, ${stats.transactions} transactions verified ` +
        `(${stats.entriesChecked} entries / ${(stats.bytesChecked / 1e6).toFixed(1)} MB compared over ` +
        `${stats.verifications.readonly} read-only + ${stats.verifications.writer} writer checks), ` +
        `kills by phase ${JSON.stringify(stats.byPhase)}, mid-snapshot kills ${JSON.stringify(stats.snapshotKills)}, ` +
        `kills while a queued shape finished ${JSON.stringify(stats.finishingKills)}, ` +
        `${stats.checkpointKills} kills during a journal checkpoint, ` +
        `${stats.fromHeads} of ${stats.writerOpened} logs of the writer checks opened from a heads file, ` +
        `${stats.liveReads} live read-only reads (and ${stats.deletedReads} of a log deleted meanwhile), ${stats.childRuns} child processes, seed ${SEED}, ${seconds} s`,
    )
    expect(stats.kills).toBeGreaterThanOrEqual(KILLS)
    expect(stats.transactions).toBeGreaterThan(0)
  })
})

function journalDump(root: string): string {
  const dir = join(root, 'journal')
  const out: string[] = []
  for (const name of existsSync(dir) ? readdirSync(dir) : []) {
    const buf = readFileSync(join(dir, name))
    for (const g of parseSegment(buf, Number(name.slice(0, 8))).groups) out.push(`${g.sequence}:${g.watermark?.lsn ?? '-'}:${g.records.map((r) => `${r.type}${r.id}`).join('/')}`)
  }
  return out.join(' ')
}
