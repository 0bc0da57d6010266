/**
 * Crash safety of the whole pipeline (issue item 13): real processes, SIGKILL.
 *
 * The pipeline runs in a child process (fixtures/pipeline-child.ts) on one
 * storage directory; the random workload of workload.ts runs from this process
 * and never stops for a kill. The parent SIGKILLs the child at moments chosen
 * to land in different phases, and starts a new one on the same directory:
 *
 *   routing        a random moment of steady routing
 *   flush          inside a group commit (the child holds one fdatasync 25 ms)
 *   snapshot       while new shapes take their snapshot
 *   stream-data    while Postgres streams a large open transaction into the spill buffer
 *   stream-commit  while a large committed transaction is routed batch by batch
 *   startup        while the next child recovers the store, restores shapes and connects
 *   backlog        while a child catches up on what was committed while none ran
 *
 * After every restart the restored shapes are checked at once: every shape
 * that was ready is there, one killed during its snapshot is absent or
 * complete (absent ones are requested again). Every few kills, and after the
 * last one, the writers pause, the child catches up and flushes, and a
 * read-only store in this process reads what is new in every log: structure
 * (no offset twice, one last:true per transaction, ...), strict replay equal
 * to Postgres row for row, each log still starting with exactly the bytes it
 * held at the previous check (a full re-read), and
 * each shape checked at every transaction against its table's history (the
 * mirror shapes of oracle.pg.test.ts, made before the first kill), so a change
 * lost or doubled by a restart shows even if a later one hides it.
 * At the end the slot must release WAL: once idle, confirmed_flush_lsn reaches
 * the current WAL position and stays there after more writes.
 *
 * Default: 21 rounds (3 per phase; 'startup' and 'backlog' rounds kill twice,
 * so 27 kill points). SOAK=1: 210 rounds (270 kill points). CRASH_KILLS,
 * CRASH_SEED, CRASH_CHECK_EVERY, CRASH_PHASES (a comma list) override;
 * CRASH_DEBUG=1 prints timings.
 */
import { cpSync, existsSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { dirname, join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { fileURLToPath } from 'node:url'
import { openReadOnlyLogStore, shapeDir } from '@sluice/storage'
import { useTempDir, usePostgres } from '@sluice/test-utils'
import pg from 'pg'
import { afterEach, beforeAll, describe, expect, it } from 'vitest'
import { type TableInfo, loadTable, whereColumns } from '../../src/shapes/table-catalog.js'
import { compileWhere } from '../../src/where/index.js'
import { FollowedShape, commitMarker, firstDifference, shapeParams } from './harness.js'
import { PipelineChild } from './pipeline-child-process.js'
import { type LogLine, MirrorLog, ShapeHistoryCheck, readLog } from './log-replay.js'
import {
  BOOL_COLUMNS,
  Rng,
  SCHEMA_SQL,
  type ShapeSpec,
  TABLES,
  Writers,
  describeSpec,
  randomShape,
  seedFromEnv,
  seedSql,
  specOptions,
  specQuery,
} from './workload.js'

const SOAK = process.env.SOAK === '1'
const PHASES = ['routing', 'flush', 'snapshot', 'stream-data', 'stream-commit', 'startup', 'backlog'] as const
type Phase = (typeof PHASES)[number]
const KILLS = Number(process.env.CRASH_KILLS ?? (SOAK ? 210 : 21))
const SEED = seedFromEnv('CRASH_SEED')
const CHECK_EVERY = Number(process.env.CRASH_CHECK_EVERY ?? (SOAK ? 10 : 7))
const INITIAL_SHAPES = 8
const SPARES = 2
const SEED_ROWS = 1200
const DEBUG = process.env.CRASH_DEBUG === '1'
/** CRASH_PHASES=snapshot,flush runs only those kinds of rounds. */
const ONLY_PHASES = process.env.CRASH_PHASES?.split(',')

const HERE = dirname(fileURLToPath(import.meta.url))
const FIXTURE = join(HERE, 'fixtures', 'pipeline-child.ts')
const SERVER_DIR = join(HERE, '..', '..')

/** Every child line but progress, and every kill, for a post-mortem (see dumpFailure). */
const transcript: string[] = []

const cluster = usePostgres()
const dirs = useTempDir('crash')
const children = new Set<PipelineChild>()
const clients: pg.Client[] = []

// Registered after useTempDir's hooks, so it runs before they remove the store directory.
afterEach(async () => {
  for (const c of children) await c.proc.kill('SIGKILL')
  children.clear()
  for (const c of clients.splice(0)) await c.end().catch(() => {})
})

beforeAll(async () => {
  await cluster.query(SCHEMA_SQL)
  await cluster.query(seedSql(new Rng(SEED ^ 0x5eed), SEED_ROWS))
})

/** A pipeline child of this test: its lines go to the transcript, and afterEach kills it. */
class Child extends PipelineChild {
  constructor(onLine: (line: string, child: Child) => void) {
    super(FIXTURE, SERVER_DIR, onLine as (line: string, child: PipelineChild) => void, { transcript, registry: children })
  }
}

interface ShapeRecord {
  readonly tag: string
  readonly spec: ShapeSpec
  handle: string | undefined
  /** The child said `ready`, or a restart found the shape: it must exist from now on. */
  durable: boolean
}

/** A shape as the checks follow it (by handle: two requests for one definition are one shape). */
interface TrackedShape {
  readonly spec: ShapeSpec
  /** Its log read so far (from the first check that saw it): structure, strict replay, bytes. */
  readonly followed: FollowedShape
  /** Checks the log at every transaction against its table's mirror (undefined for the mirrors). */
  readonly history: ShapeHistoryCheck | undefined
}

describe('crash safety of the pipeline', () => {
  it(
    'loses and duplicates nothing across SIGKILLs in every phase, and releases WAL afterwards',
    async () => {
      const rng = new Rng(SEED)
      const started = Date.now()
      const storageDir = await dirs.make('store')
      console.log(`crash: seed ${SEED} (CRASH_SEED=${SEED}), ${KILLS} kill points, check every ${CHECK_EVERY}`)
      const config = {
        connectionString: cluster.url,
        storageDir,
        options: {
          chunkBytes: 8 * 1024,
          flushIntervalMs: 5,
          memoryBudgetBytes: 256 * 1024,
          maxTransactionBytes: 16 * 1024,
          snapshotConnections: 2,
          replicationSettings: { logical_decoding_work_mem: '64kB' },
          // The checks read each log under its handle and require it to keep every byte it held; compaction
          // replaces logs, and has a crash test of its own (compaction-crash.pg.test.ts).
          compactRatio: 0,
        },
      }
      const stats = {
        kills: 0,
        byPhase: Object.fromEntries(PHASES.map((p) => [p, 0])) as Record<Phase, number>,
        /** Shapes of 'snapshot' kills caught before `ready`: found absent or complete after the restart. */
        snapshot: { absent: 0, complete: 0, readyBeforeKill: 0 },
        /** Any shape not ready at a kill (also those requested again after a restart and killed again). */
        interrupted: { absent: 0, complete: 0 },
        /** A stream phase's kill came after the marker it waited for. */
        streamMarkers: { data: 0, commit: 0, committedBeforeKill: 0 },
        flushMarkers: 0,
        finishMarkers: 0,
        /** Snapshot kills right as a new log's directory appeared. */
        renameKills: 0,
        checks: 0,
        rowsCompared: 0,
        shapeChecks: 0,
        historyTransactions: 0,
        restarts: 0,
        restartMs: [] as number[],
        largeTransactions: 0,
        warnings: new Map<string, number>(),
      }
      const problems: string[] = []
      const records = new Map<string, ShapeRecord>()
      const mirrors = new Map<string, { handle: string; log: MirrorLog }>()
      const tracked = new Map<string, TrackedShape>()
      const tables = new Map<string, Promise<TableInfo | undefined>>()
      const matcher = async (spec: ShapeSpec): Promise<(row: Record<string, string | null>) => boolean> => {
        if (spec.where === undefined) return () => true
        let info = tables.get(spec.table)
        if (info === undefined) {
          info = loadTable(cluster, { schema: 'public', name: spec.table })
          tables.set(spec.table, info)
        }
        const where = await compileWhere(spec.where, { columns: whereColumns((await info)!), params: spec.params ?? [] })
        return (row) => where.matches(row)
      }
      let tagCounter = 0

      const onLine = (line: string): void => {
        if (line.startsWith('created ')) {
          const [, tag, handle] = line.split(' ')
          const record = records.get(tag!)
          if (record !== undefined) record.handle = handle
        } else if (line.startsWith('ready ')) {
          const [, tag, handle] = line.split(' ')
          const record = records.get(tag!)
          if (record !== undefined && record.handle === handle) record.durable = true
        } else if (line.startsWith('shape-failed ')) {
          problems.push(line)
        } else if (line.startsWith('fatal')) {
          problems.push(line)
        } else if (line.startsWith('log error')) {
          problems.push(line)
        } else if (line.startsWith('log warn')) {
          const message = line.slice('log warn '.length).split(' {')[0]!
          stats.warnings.set(message, (stats.warnings.get(message) ?? 0) + 1)
          if (!message.startsWith('replication disconnected')) problems.push(line)
        }
      }

      /** Children started ahead of time: loading the sources takes a while on a busy machine. */
      const spares: Child[] = []
      const spawn = (): Child => new Child(onLine)
      /** Starts a child on the store; resolves when its `go` is sent. */
      const launch = async (): Promise<Child> => {
        const child = spares.shift() ?? spawn()
        while (spares.length < SPARES) spares.push(spawn())
        await child.waitFor((l) => l === 'loaded')
        child.send(`go ${JSON.stringify(config)}`)
        return child
      }

      const request = (child: Child, spec: ShapeSpec, tag?: string): ShapeRecord => {
        const record: ShapeRecord = { tag: tag ?? `s${++tagCounter}`, spec, handle: undefined, durable: false }
        records.set(record.tag, record)
        child.send(`shape ${record.tag} ${JSON.stringify(shapeParams('public', spec.table, specOptions(spec)))}`)
        return record
      }

      /** After a (re)start: what the restored shapes must be. */
      const onStarted = async (child: Child, from: number): Promise<void> => {
        const { line } = await child.waitFor((l) => l.startsWith('started '), { from })
        const restored = JSON.parse(line.slice('started '.length)) as { handles: string[] }
        const present = new Set(restored.handles)
        const known = new Set<string>()
        for (const record of [...records.values()]) {
          if (record.handle !== undefined) known.add(record.handle)
          if (record.durable) {
            if (record.handle === undefined || !present.has(record.handle)) {
              throw new Error(`seed ${SEED}: shape ${record.handle} (${describeSpec(record.spec)}) was ready but is gone after a restart\n${child.describe()}`)
            }
            continue
          }
          // Caught before `ready`: absent, or complete (then it is checked like the rest from now on).
          if (record.handle !== undefined && present.has(record.handle)) {
            record.durable = true
            stats.interrupted.complete++
          } else {
            records.delete(record.tag)
            stats.interrupted.absent++
            // A client would ask again: the same definition gets a new shape (or the restored one, if its `created` was lost).
            request(child, record.spec)
          }
        }
        for (const handle of present) {
          if (!known.has(handle)) {
            // Only a shape whose `created` line the kill swallowed; its re-request above names it.
            const named = await waitForNaming(child, handle)
            if (!named) throw new Error(`seed ${SEED}: an unknown shape ${handle} was restored\n${child.describe()}`)
          }
        }
      }

      const waitForNaming = async (child: Child, handle: string): Promise<boolean> => {
        const deadline = Date.now() + 10_000
        while (Date.now() < deadline) {
          if ([...records.values()].some((r) => r.handle === handle)) return true
          await sleep(20)
          if (!child.alive) return false
        }
        return false
      }

      /** Pause, catch up, compare every shape through a read-only store. */
      const check = async (child: Child, writers: Writers, label: string): Promise<void> => {
        await writers.pause()
        try {
          // Shapes still building finish first: a check covers every shape the child knows.
          for (const record of records.values()) {
            if (!record.durable) await child.waitFor((l) => l.startsWith(`ready ${record.tag} `) || l.startsWith(`shape-failed ${record.tag} `))
            if (!record.durable) throw new Error(`seed ${SEED}: shape ${describeSpec(record.spec)} failed\n${child.describe()}`)
          }
          const lsn = await commitMarker(cluster)
          const tag = `c${stats.checks}`
          const from = child.lines.length
          child.send(`sync ${tag} ${lsn}`)
          await child.waitFor((l) => l.startsWith(`synced ${tag} `), { from, timeoutMs: 120_000 })
          const ro = openReadOnlyLogStore({ dir: join(storageDir, 'logs') })
          try {
            expect(ro.durableLsn >= lsn, 'the watermark covers the marker').toBe(true)
            const ids = new Set(ro.ids())
            const expectedIds = new Set([...records.values()].map((r) => r.handle!))
            expect([...ids].sort(), `${label}: the store holds exactly the shapes the child made`).toEqual([...expectedIds].sort())
            // Once per shape (two requests for one definition share it), mirrors first: the other shapes are
            // checked against the histories they hold.
            const mirrorHandles = new Set([...mirrors.values()].map((m) => m.handle))
            for (const record of records.values()) {
              if (tracked.has(record.handle!)) continue
              const isMirror = mirrorHandles.has(record.handle!)
              tracked.set(record.handle!, {
                spec: record.spec,
                followed: new FollowedShape({ schema: 'public', ...specQuery(record.spec) }, BOOL_COLUMNS),
                history: isMirror
                  ? undefined
                  : new ShapeHistoryCheck(mirrors.get(record.spec.table)!.log, {
                      matches: await matcher(record.spec),
                      columns: record.spec.columns,
                      bools: BOOL_COLUMNS,
                      label: `against the history of ${record.spec.table}`,
                    }),
              })
            }
            const ordered = [...tracked].sort(([a], [b]) => Number(mirrorHandles.has(b)) - Number(mirrorHandles.has(a)))
            for (const [handle, shape] of ordered) {
              const what = `seed ${SEED}, ${label}, shape ${handle} (${describeSpec(shape.spec)})`
              const log = ro.get(handle)
              if (log === undefined) throw new Error(`${what}: no log`)
              try {
                const { fresh, actual, expected } = await shape.followed.step(log, cluster)
                const difference = firstDifference(actual, expected)
                if (difference !== undefined) throw new Error(`the log does not replay to Postgres's rows: ${difference}`)
                shape.followed.follower.verifyPrefix(log)
                if (shape.history === undefined) mirrors.get(shape.spec.table)!.log.update(fresh)
                else {
                  const before = shape.history.transactionsChecked
                  shape.history.advance(fresh)
                  stats.historyTransactions += shape.history.transactionsChecked - before
                }
                stats.rowsCompared += expected.size
                stats.shapeChecks++
              } catch (error) {
                throw new Error(`${what}: ${error instanceof Error ? error.message : String(error)}${dumpFailure(storageDir, handle, readLog(log))}`, { cause: error })
              }
            }
          } finally {
            await ro.close()
          }
          // Every shape has passed these transactions, and shapes requested from now on snapshot after them.
          for (const { log } of mirrors.values()) log.compact()
          stats.checks++
        } finally {
          writers.resume()
        }
      }

      /** Runs one large transaction on its own connection: committed, or left open for the caller. */
      const big = await cluster.connect()
      clients.push(big)
      await big.query(`SET deadlock_timeout = '50ms'; SET lock_timeout = '5s'`)
      const bigRng = rng.fork()

      // Paced so a child can keep up on a small machine; backlogs still build up while no child runs.
      const writers = new Writers({ connectionString: cluster.url, writers: 2, rng: rng.fork(), firstItemId: SEED_ROWS + 1, maxItems: SEED_ROWS * 2, thinkMs: 35 })
      let child = await launch()
      await onStarted(child, 0)
      // One shape per table with every row, column and old value, made before anything is written: the
      // tables' complete histories, which every other shape is checked against at every transaction.
      const mirrorRecords = TABLES.map((table) => request(child, { table, replica: 'full' }))
      for (const r of mirrorRecords) await child.waitFor((l) => l.startsWith(`ready ${r.tag} `))
      for (const r of mirrorRecords) mirrors.set(r.spec.table, { handle: r.handle!, log: new MirrorLog(BOOL_COLUMNS) })
      const shapeRng = rng.fork()
      for (let i = 0; i < INITIAL_SHAPES; i++) request(child, randomShape(shapeRng))
      await writers.start()
      try {
        await check(child, writers, 'initial check')

        const schedule: Phase[] = []
        const phases = PHASES.filter((p) => ONLY_PHASES === undefined || ONLY_PHASES.includes(p))
        while (schedule.length < KILLS) {
          const round = [...phases]
          for (let i = round.length - 1; i > 0; i--) {
            const j = rng.int(0, i)
            ;[round[i], round[j]] = [round[j]!, round[i]!]
          }
          schedule.push(...round)
        }
        schedule.length = KILLS

        const restart = async (): Promise<void> => {
          const t0 = Date.now()
          child = await launch()
          const t1 = Date.now()
          await onStarted(child, 0)
          stats.restarts++
          stats.restartMs.push(Date.now() - t0)
          if (DEBUG) console.log(`crash: restart: launch ${t1 - t0} ms, start ${Date.now() - t1} ms`)
        }
        const kill = async (phase: Phase): Promise<void> => {
          await child.kill()
          stats.kills++
          stats.byPhase[phase]++
        }

        for (let k = 0; k < schedule.length; k++) {
          const phase = schedule[k]!
          if (writers.failure !== undefined) throw writers.failure
          const from = child.lines.length
          switch (phase) {
            case 'routing': {
              await sleep(rng.int(30, 600))
              await kill(phase)
              await restart()
              break
            }
            case 'flush': {
              await sleep(rng.int(0, 100))
              child.send('arm-flush')
              await child.waitFor((l) => l === 'in-flush', { from, timeoutMs: 10_000 })
              stats.flushMarkers++
              await sleep(rng.int(0, 20))
              await kill(phase)
              await restart()
              break
            }
            case 'snapshot': {
              const made = Array.from({ length: rng.int(1, 3) }, () => request(child, randomShape(shapeRng)))
              await Promise.all(made.map((r) => child.waitFor((l) => l.startsWith(`created ${r.tag} `) || l.startsWith(`shape-failed ${r.tag} `), { from })))
              if (rng.chance(0.5)) {
                // Aimed at the end of a snapshot: between finish() and the flushes that make the log durable.
                const handles = new Set(made.map((r) => r.handle))
                const seen = await child.waitFor((l) => l.startsWith('finishing ') && handles.has(l.slice('finishing '.length)), { from, timeoutMs: 20_000 }).then(
                  (m) => m.line.slice('finishing '.length),
                  () => undefined,
                )
                if (seen !== undefined) stats.finishMarkers++
                if (seen !== undefined && rng.chance(0.5)) {
                  // The moment its directory is renamed into place: complete on disk, but never reported ready.
                  const dir = shapeDir(join(storageDir, 'logs'), seen)
                  const deadline = Date.now() + 5000
                  while (!existsSync(dir) && Date.now() < deadline) await sleep(1)
                  if (existsSync(dir)) stats.renameKills++
                } else {
                  await sleep(rng.int(0, 100))
                }
              } else {
                await sleep(rng.int(0, 400))
              }
              await kill(phase)
              const caught = made.filter((r) => !r.durable)
              stats.snapshot.readyBeforeKill += made.length - caught.length
              await restart()
              for (const r of caught) {
                if (records.get(r.tag) === r && r.durable) stats.snapshot.complete++
                else stats.snapshot.absent++
              }
              break
            }
            case 'stream-data': {
              const { statements } = writers.largeTransaction(bigRng)
              await big.query('BEGIN')
              let open = true
              try {
                for (const sql of statements) await big.query(sql)
              } catch {
                await big.query('ROLLBACK').catch(() => {})
                open = false
              }
              const seen = await child.waitFor((l) => l.startsWith('stream-data '), { from, timeoutMs: 5000 }).then(
                () => true,
                () => false,
              )
              if (seen) stats.streamMarkers.data++
              await sleep(rng.int(0, 40))
              await kill(phase)
              // The transaction ends while no pipeline runs: the next one gets it from the slot.
              if (open) {
                if (rng.chance(0.75)) {
                  await big.query('COMMIT')
                  stats.largeTransactions++
                } else await big.query('ROLLBACK')
              }
              await restart()
              break
            }
            case 'stream-commit': {
              const { statements } = writers.largeTransaction(bigRng)
              try {
                await big.query(['BEGIN', ...statements, 'COMMIT'].join(';\n'))
                stats.largeTransactions++
              } catch {
                await big.query('ROLLBACK').catch(() => {})
              }
              const seen = await child.waitFor((l) => l.startsWith('stream-commit '), { from, timeoutMs: 5000 }).then(
                () => true,
                () => false,
              )
              if (seen) stats.streamMarkers.commit++
              await sleep(rng.int(0, 30))
              if (child.lines.slice(from).some((l) => l.startsWith('stream-committed '))) stats.streamMarkers.committedBeforeKill++
              await kill(phase)
              await restart()
              break
            }
            case 'startup': {
              // Kill the running child, then kill the next one while it starts.
              await sleep(rng.int(30, 300))
              await kill('routing')
              child = await launch()
              await sleep(rng.int(0, 500))
              await kill(phase)
              await restart()
              break
            }
            case 'backlog': {
              await sleep(rng.int(30, 300))
              await kill('routing')
              await sleep(rng.int(500, 1500))
              child = await launch()
              await onStarted(child, 0)
              await sleep(rng.int(0, 300))
              await kill(phase)
              await restart()
              break
            }
          }
          if (DEBUG) console.log(`crash: round ${k} ${phase} done at ${Date.now() - started} ms (${writers.stats.committed} committed)`)
          if ((k + 1) % CHECK_EVERY === 0 && k + 1 < schedule.length) {
            await check(child, writers, `check after kill ${stats.kills}`)
            if (DEBUG) {
              const { rows } = await cluster.query(
                `SELECT pg_current_wal_lsn()::text AS now, restart_lsn::text, confirmed_flush_lsn::text, catalog_xmin::text,
                        pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)::int8 AS restart_lag FROM pg_replication_slots`,
              )
              console.log(`crash: check done at ${Date.now() - started} ms; slot ${JSON.stringify(rows[0])}`)
            }
          }
        }
        // A last stretch of work on the final child, then the final check.
        await sleep(500)
      } finally {
        await writers.stop()
      }
      await check(child, writers, 'final check')

      // The slot's retained WAL is released once the pipeline is idle.
      const lag = async (): Promise<{ confirmed: number; restart: number }> => {
        const { rows } = await cluster.query<{ confirmed: string; restart: string }>(
          `SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn)::text AS confirmed,
                  pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)::text AS restart
             FROM pg_replication_slots WHERE slot_name = 'sluice_slot'`,
        )
        return { confirmed: Number(rows[0]!.confirmed), restart: Number(rows[0]!.restart) }
      }
      const idleUntilReleased = async (): Promise<{ ms: number; lag: { confirmed: number; restart: number } }> => {
        const t0 = Date.now()
        for (;;) {
          const l = await lag()
          if (l.confirmed <= 0) return { ms: Date.now() - t0, lag: l }
          if (Date.now() - t0 > 30_000) throw new Error(`seed ${SEED}: confirmed_flush_lsn still ${l.confirmed} bytes behind after 30 s idle`)
          await sleep(100)
        }
      }
      const first = await idleUntilReleased()
      // More work, then idle again: still released, and it stays so.
      const more = new Writers({ connectionString: cluster.url, writers: 2, rng: rng.fork(), firstItemId: 900_000_000, large: false })
      await more.start()
      await sleep(1000)
      await more.stop()
      const second = await idleUntilReleased()
      // Idle is not silent: Postgres's own housekeeping (autovacuum after the writers, a timed checkpoint)
      // writes WAL no shape subscribes to, and the pipeline confirms such WAL within its idle promise
      // interval (250 ms) plus a flush. So the claim is that every lag seen clears again quickly, not that
      // none is ever seen (129,784 bytes were, once, on a loaded machine).
      let relagged = 0
      let slowestRelease = 0
      for (let i = 0; i < 10; i++) {
        await sleep(100)
        if ((await lag()).confirmed <= 0) continue
        relagged++
        slowestRelease = Math.max(slowestRelease, (await idleUntilReleased()).ms)
      }
      expect(slowestRelease, 'WAL written while idle is confirmed within 2 s').toBeLessThan(2000)

      // What retains WAL is restart_lsn; it moves at the next running-xacts record, which a checkpoint writes.
      await cluster.query('CHECKPOINT')
      const t0 = Date.now()
      let retained = await lag()
      while (retained.restart > 64 * 1024 || retained.confirmed > 0) {
        if (Date.now() - t0 > 30_000) throw new Error(`seed ${SEED}: the slot still retains ${retained.restart} bytes of WAL 30 s after a checkpoint (confirmed lag ${retained.confirmed})`)
        await sleep(100)
        retained = await lag()
      }
      const restartReleasedMs = Date.now() - t0

      const stopFrom = child.lines.length
      child.send('stop')
      await child.waitFor((l) => l === 'stopped', { from: stopFrom })
      expect((await child.proc.exited).code).toBe(0)
      children.delete(child)
      for (const spare of spares) await spare.proc.kill('SIGKILL')

      const s = writers.stats
      const restartMs = [...stats.restartMs].sort((a, b) => a - b)
      console.log(
        `crash: done in ${((Date.now() - started) / 1000).toFixed(1)} s, seed ${SEED}: ${stats.kills} kill points ${JSON.stringify(stats.byPhase)}; ` +
          `markers seen before the kill: ${stats.flushMarkers} in-flush, ${stats.finishMarkers} finishing (${stats.renameKills} right at the rename), ${stats.streamMarkers.data} stream-data, ${stats.streamMarkers.commit} stream-commit ` +
          `(${stats.streamMarkers.committedBeforeKill} of those had finished routing); snapshot kills: ${stats.snapshot.absent} shapes absent after restart, ` +
          `${stats.snapshot.complete} complete, ${stats.snapshot.readyBeforeKill} ready before the kill (all kills: ${stats.interrupted.absent} absent, ` +
          `${stats.interrupted.complete} complete); ${stats.restarts} restarts ` +
          `(median ${restartMs[Math.floor(restartMs.length / 2)]} ms, max ${restartMs[restartMs.length - 1]} ms); ` +
          `workload: ${s.committed} committed (${s.large} large + ${stats.largeTransactions} large from the kill phases), ${s.rolledBack} rolled back, ` +
          `${s.conflicts} conflicts, ${s.changes} row changes; ${records.size} shapes, ${stats.checks} checks, ${stats.shapeChecks} shape checks, ` +
          `${stats.rowsCompared} rows compared, ${stats.historyTransactions} (shape, transaction) pairs checked against the mirrors; confirmed_flush_lsn at the WAL position ${first.ms} ms and ${second.ms} ms after going idle (then ${relagged} of 10 samples saw housekeeping WAL, confirmed within ${slowestRelease} ms); ` +
          `restart_lsn ${retained.restart} bytes behind ${restartReleasedMs} ms after a checkpoint; ` +
          `warnings ${JSON.stringify(Object.fromEntries(stats.warnings))}`,
      )
      expect(problems, 'errors reported by the children').toEqual([])
      // 'startup' and 'backlog' rounds first kill a running child (counted under 'routing').
      expect(stats.kills).toBe(KILLS + stats.byPhase.startup + stats.byPhase.backlog)
      for (const phase of ONLY_PHASES ?? PHASES) expect(stats.byPhase[phase as Phase], `kills in phase ${phase}`).toBeGreaterThan(0)
    },
    SOAK ? 7_200_000 : 300_000,
  )
})


/** With CRASH_DEBUG=1: the failing log's lines and the child processes' outputs, kept for a post-mortem. */
function dumpFailure(storageDir: string, handle: string, lines: readonly LogLine[]): string {
  if (!DEBUG) return ''
  const file = join(tmpdir(), `sluice-crash-failure-${handle}-${Date.now()}.jsonl`)
  writeFileSync(file, lines.map((l) => JSON.stringify(l)).join('\n'))
  writeFileSync(`${file}.transcript`, transcript.join('\n'))
  const copy = join(tmpdir(), `sluice-crash-store-${Date.now()}`)
  cpSync(storageDir, copy, { recursive: true })
  return `\n(lines in ${file}; store copied to ${copy})`
}
