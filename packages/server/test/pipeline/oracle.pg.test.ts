/**
 * Consistency oracle for the whole pipeline (issue item 12).
 *
 * Several writer connections run a random workload (workload.ts) on three
 * tables while shapes with random definitions are created: where clauses of
 * every kind the router indexes or evaluates, with and without params, column
 * subsets, replica full. The pipeline runs with a 64 kB
 * logical_decoding_work_mem (Postgres streams the large transactions), a 16 kB
 * maxTransactionBytes (the assembler spills the medium ones) and a 256 kB
 * memory budget (queues of shapes waiting for their snapshot spill).
 *
 * At each checkpoint the writers pause, the pipeline catches up, and every
 * shape's log is read from -1 the way the HTTP layer reads it and checked:
 *   - structure: snapshot rows, one snapshot-end, then strictly increasing
 *     offsets, each transaction contiguous with exactly one last:true, key
 *     changes as delete+insert at op/op+1, ranges ending at their last line;
 *   - replayed strictly (no update/delete of a row it does not hold, no insert
 *     of one it holds), it equals `SELECT ... WHERE` in Postgres row for row;
 *   - it starts with exactly the bytes it had at the previous checkpoint (logs
 *     are append-only; each checkpoint reads only what is new, then re-reads
 *     the whole log for this check);
 *   - and at EVERY transaction, not only at checkpoints: one shape per table
 *     with every row, column and old value (a "mirror", made before anything
 *     is written) holds the table's whole history; each shape's snapshot must
 *     equal the mirror as of that snapshot (xmin/xmax/xip of its snapshot-end),
 *     and after each later transaction every row it touched must be in the
 *     shape exactly when it matches the where clause, with the mirror's values
 *     (ShapeHistoryCheck in log-replay.ts). A change lost and later
 *     overwritten, or a transaction on both sides of a snapshot, shows there.
 * Then the writers resume.
 *
 * Default: 30 shapes, 3 checkpoints, ~3000 transactions. SOAK=1: 150 shapes,
 * 10 checkpoints, ~30000 transactions. ORACLE_SEED, ORACLE_SHAPES,
 * ORACLE_CHECKPOINTS, ORACLE_TXNS, ORACLE_WRITERS override.
 */
import { useTempDir, usePostgres } from '@sluice/test-utils'
import { setTimeout as sleep } from 'node:timers/promises'
import { afterEach, beforeAll, describe, expect, it } from 'vitest'
import type { Pipeline } from '../../src/pipeline.js'
import { loadTable, whereColumns } from '../../src/shapes/table-catalog.js'
import { compileWhere } from '../../src/where/index.js'
import { FollowedShape, caughtUp, firstDifference, shapeParams, startPipeline } from './harness.js'
import { MirrorLog, ShapeHistoryCheck } from './log-replay.js'
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
const SEED = seedFromEnv('ORACLE_SEED')
const SHAPES = Number(process.env.ORACLE_SHAPES ?? (SOAK ? 150 : 30))
const CHECKPOINTS = Number(process.env.ORACLE_CHECKPOINTS ?? (SOAK ? 10 : 3))
const TXNS = Number(process.env.ORACLE_TXNS ?? (SOAK ? 30_000 : 3000))
const WRITERS = Number(process.env.ORACLE_WRITERS ?? 4)
const SEED_ROWS = 1500

const cluster = usePostgres()
const dirs = useTempDir('oracle')
let pipeline: Pipeline | undefined

beforeAll(async () => {
  await cluster.query(SCHEMA_SQL)
  await cluster.query(seedSql(new Rng(SEED ^ 0x5eed), SEED_ROWS))
})

// Registered after useTempDir's hooks, so it runs before they remove the store directory.
afterEach(async () => {
  await pipeline?.stop()
  pipeline = undefined
})

interface Tracked {
  readonly handle: string
  readonly spec: ShapeSpec
  /** Its log read so far: structure, strict replay, bytes for the append-only check. */
  readonly followed: FollowedShape
  /** Checks the log at every transaction against its table's mirror (undefined for the mirrors). */
  history: ShapeHistoryCheck | undefined
}

describe('consistency oracle', () => {
  it('generates only where clauses that Sluice compiles and Postgres runs', async () => {
    // The generator must never drift into clauses that are refused: the oracle would stop at the first one.
    const rng = new Rng(SEED)
    const tables = new Map<string, Awaited<ReturnType<typeof loadTable>>>()
    const seen = new Set<string>()
    for (let i = 0; i < 3000; i++) {
      const spec = randomShape(rng)
      if (spec.where === undefined) continue
      const key = `${spec.table} ${spec.where} ${JSON.stringify(spec.params ?? [])}`
      if (seen.has(key)) continue
      seen.add(key)
      if (!tables.has(spec.table)) tables.set(spec.table, await loadTable(cluster, { schema: 'public', name: spec.table }))
      const info = tables.get(spec.table)!
      await expect(compileWhere(spec.where, { columns: whereColumns(info!), params: spec.params ?? [] }), describeSpec(spec)).resolves.toBeDefined()
      await cluster.query(`SELECT count(*) FROM ${spec.table} WHERE ${spec.where}`, spec.params ?? [])
    }
    expect(seen.size).toBeGreaterThan(100)
  })

  it(
    'keeps every shape log equal to Postgres under a random concurrent workload, with shapes created while it runs',
    async () => {
      const rng = new Rng(SEED)
      const started = Date.now()
      console.log(`oracle: seed ${SEED} (ORACLE_SEED=${SEED} reproduces the mix), ${SHAPES} shapes, ${CHECKPOINTS} checkpoints, ~${TXNS} transactions, ${WRITERS} writers`)
      const problems: string[] = []
      const logger = {
        info: () => {},
        warn: (data: object, message: string) => problems.push(`warn: ${message} ${safeJson(data)}`),
        error: (data: object, message: string) => problems.push(`error: ${message} ${safeJson(data)}`),
      }
      const p = await startPipeline(cluster, await dirs.make('store'), {
        memoryBudgetBytes: 256 * 1024,
        maxTransactionBytes: 16 * 1024,
        replicationSettings: { logical_decoding_work_mem: '64kB' },
        chunkBytes: 8 * 1024,
        snapshotConnections: 2,
        logger,
      })
      pipeline = p
      // Observation only: count the transactions that reached the router through the streaming path.
      let streamedCommits = 0
      const onBufferedTransaction = p.router.onBufferedTransaction.bind(p.router)
      p.router.onBufferedTransaction = (transaction) => {
        streamedCommits++
        return onBufferedTransaction(transaction)
      }

      const writers = new Writers({ connectionString: cluster.url, writers: WRITERS, rng: rng.fork(), firstItemId: SEED_ROWS + 1, maxItems: SEED_ROWS * 2 })
      const shapes = new Map<string, Tracked>()
      const pendingReady: Array<Promise<Error | undefined>> = []
      const counts = { historyTransactions: 0, rowsCompared: 0, shapeChecks: 0, logChanges: 0, snapshotRows: 0, maxShapeRows: 0, duplicatesResolved: 0 }
      const shapeRng = rng.fork()

      /** Resolves a random definition; true when it made a new shape. */
      const createShape = async (): Promise<boolean> => {
        // Now and then ask again for a definition that already exists: same handle, no new shape.
        const again = shapes.size > 0 && shapeRng.chance(0.1)
        const spec = again ? shapeRng.pick([...shapes.values()]).spec : randomShape(shapeRng)
        let resolved
        try {
          resolved = await p.shapes.resolve(shapeParams('public', spec.table, specOptions(spec)))
        } catch (error) {
          throw new Error(`seed ${SEED}: resolving ${describeSpec(spec)} failed: ${String(error)}`, { cause: error })
        }
        if (!resolved.created) {
          counts.duplicatesResolved++
          expect(shapes.has(resolved.handle), `an existing handle for ${describeSpec(spec)}`).toBe(true)
          return false
        }
        const where = resolved.where
        const history = new ShapeHistoryCheck(mirrors.get(spec.table)!.log, {
          matches: where === undefined ? () => true : (row) => where.matches(row),
          columns: spec.columns,
          bools: BOOL_COLUMNS,
          label: `seed ${SEED}, shape ${resolved.handle} (${describeSpec(spec)}) against the history of ${spec.table}`,
        })
        shapes.set(resolved.handle, { handle: resolved.handle, spec, followed: followed(spec), history })
        // Settles to an error (never rejects), so a failure before the checkpoint is not an unhandled rejection.
        pendingReady.push(
          p.shapes.ready(resolved.handle).then(
            () => undefined,
            (error: unknown) => new Error(`seed ${SEED}: shape ${describeSpec(spec)} never became ready: ${String(error)}`, { cause: error }),
          ),
        )
        return true
      }

      // One shape per table with every row, column and old value, made before anything is written: the
      // tables' complete histories, which every other shape is checked against at every transaction.
      const mirrors = new Map<string, { handle: string; log: MirrorLog }>()
      for (const table of TABLES) {
        const spec: ShapeSpec = { table, replica: 'full' }
        const resolved = await p.shapes.resolve(shapeParams('public', table, specOptions(spec)))
        await p.shapes.ready(resolved.handle)
        mirrors.set(table, { handle: resolved.handle, log: new MirrorLog(BOOL_COLUMNS) })
        shapes.set(resolved.handle, { handle: resolved.handle, spec, followed: followed(spec), history: undefined })
      }

      await writers.start()
      try {
        const perCheckpoint = Math.ceil(TXNS / CHECKPOINTS)
        let created = 0
        for (let cp = 1; cp <= CHECKPOINTS; cp++) {
          const phaseStart = writers.stats.committed + writers.stats.rolledBack + writers.stats.conflicts
          const target = phaseStart + perCheckpoint
          const quota = Math.round((SHAPES * cp) / CHECKPOINTS)
          // Spread this phase's shapes over its first 80% of transactions.
          const span = Math.max(1, quota - created)
          let nextAt = phaseStart
          for (;;) {
            const done = writers.stats.committed + writers.stats.rolledBack + writers.stats.conflicts
            if (writers.failure !== undefined) throw writers.failure
            if (created < quota && done >= nextAt) {
              if (await createShape()) created++
              nextAt = done + Math.floor((perCheckpoint * 0.8) / span) * shapeRng.next() * 2
              continue
            }
            if (done >= target && created >= quota) break
            await sleep(10)
          }
          // Checkpoint: nothing is written while the logs are compared with Postgres.
          const pausedAt = Date.now()
          await writers.pause()
          for (const failure of await Promise.all(pendingReady)) if (failure !== undefined) throw failure
          await caughtUp(p, cluster, 120_000)
          // Mirrors first: the other shapes are checked against the histories they hold.
          const order = [...shapes.values()].sort((a, b) => Number(b.history === undefined) - Number(a.history === undefined))
          for (const shape of order) {
            expect(p.shapes.status(shape.handle), describeSpec(shape.spec)).toBe('active')
            const log = p.shapes.log(shape.handle)
            expect(log, `log of ${describeSpec(shape.spec)}`).toBeDefined()
            const label = `seed ${SEED}, checkpoint ${cp}, shape ${shape.handle} (${describeSpec(shape.spec)})`
            try {
              const { fresh, actual, expected } = await shape.followed.step(log!, cluster)
              const difference = firstDifference(actual, expected)
              if (difference !== undefined) throw new Error(`the log does not replay to Postgres's rows: ${difference}`)
              shape.followed.follower.verifyPrefix(log!)
              if (shape.history === undefined) mirrors.get(shape.spec.table)!.log.update(fresh)
              else {
                const before = shape.history.transactionsChecked
                shape.history.advance(fresh)
                counts.historyTransactions += shape.history.transactionsChecked - before
              }
              counts.rowsCompared += expected.size
              counts.shapeChecks++
              counts.maxShapeRows = Math.max(counts.maxShapeRows, expected.size)
            } catch (error) {
              throw new Error(`${label}: ${error instanceof Error ? error.message : String(error)}`, { cause: error })
            }
            if (cp === CHECKPOINTS) {
              counts.logChanges += shape.followed.counts.changes
              counts.snapshotRows += shape.followed.counts.snapshotRows
            }
          }
          // Every shape has passed these transactions, and shapes made from now on snapshot after them.
          for (const { log } of mirrors.values()) log.compact()
          const s = writers.stats
          console.log(
            `oracle: checkpoint ${cp}/${CHECKPOINTS}: ${shapes.size} shapes equal to Postgres; ${s.committed} committed, ${s.rolledBack} rolled back, ` +
              `${s.conflicts} conflicts, ${s.large} large; routed ${p.router.transactionsRouted} (${streamedCommits} via the streaming path); ` +
              `checked in ${Date.now() - pausedAt} ms`,
          )
          writers.resume()
        }
      } finally {
        await writers.stop()
      }
      const { rows: slotStats } = await cluster.query<{ stream_txns: string; spill_txns: string }>(
        "SELECT stream_txns::text, spill_txns::text FROM pg_stat_replication_slots WHERE slot_name = 'sluice_slot'",
      )
      const s = writers.stats
      console.log(
        `oracle: done in ${((Date.now() - started) / 1000).toFixed(1)} s, seed ${SEED}: ${s.committed} transactions committed ` +
          `(${s.large} large), ${s.rolledBack} rolled back, ${s.conflicts} conflicts; ${s.changes} row changes committed; ` +
          `${shapes.size} shapes (${counts.duplicatesResolved} repeated requests), ${counts.shapeChecks} shape checks, ` +
          `${counts.rowsCompared} rows compared (largest shape ${counts.maxShapeRows}); ${counts.historyTransactions} (shape, transaction) pairs ` +
          `checked against the mirrors, ${[...shapes.values()].reduce((n, t) => n + (t.history?.keysCompared ?? 0), 0)} rows in them; final logs: ${counts.snapshotRows} snapshot rows + ` +
          `${counts.logChanges} changes; ${streamedCommits} transactions routed through the streaming path, Postgres streamed ` +
          `${slotStats[0]?.stream_txns ?? '?'}; kinds ${JSON.stringify(s.byKind)}`,
      )
      expect(problems, 'warnings or errors logged by the pipeline').toEqual([])
      expect(s.large, 'large transactions ran').toBeGreaterThan(0)
      expect(streamedCommits, 'large transactions went through the streaming path').toBeGreaterThan(0)
      expect(shapes.size).toBe(SHAPES + mirrors.size)
    },
    SOAK ? 3_600_000 : 240_000,
  )
})

function followed(spec: ShapeSpec): FollowedShape {
  return new FollowedShape({ schema: 'public', ...specQuery(spec) }, BOOL_COLUMNS)
}

function safeJson(data: object): string {
  try {
    return JSON.stringify(data, (_k, v: unknown) => (typeof v === 'bigint' ? v.toString() : v instanceof Error ? `${v.name}: ${v.message}` : v))
  } catch {
    return String(data)
  }
}
