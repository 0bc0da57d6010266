import type { ShapeDefinitionParams } from '@sluice/protocol'
import type { ShapeLog } from '@sluice/storage'
import type { PostgresCluster, TempDirFactory } from '@sluice/test-utils'
import { afterEach } from 'vitest'
import { setTimeout as sleep } from 'node:timers/promises'
import { Pipeline, type PipelineOptions } from '../../src/pipeline.js'
import { DISPLAY_SETTINGS } from '../../src/replication/index.js'
import {
  ExactReplay,
  LogFollower,
  type LogLine,
  type LogStructure,
  LogStructureChecker,
  checkLogStructure,
  expectedRows,
  materialize,
  materializeExact,
  normaliseBooleans,
  readLog,
} from './log-replay.js'

export function shapeParams(
  schema: string,
  name: string,
  options: Partial<Omit<ShapeDefinitionParams, 'table'>> = {},
): ShapeDefinitionParams {
  return {
    table: { schema, name },
    params: options.params ?? [],
    replica: options.replica ?? 'default',
    log: options.log ?? 'full',
    ...(options.where === undefined ? {} : { where: options.where }),
    ...(options.columns === undefined ? {} : { columns: options.columns }),
  }
}

/**
 * A pipeline on the test cluster. Without a catalog cache (tableCacheMs 0, the
 * default is a second): a table dropped and created again is noticed by the
 * very next request, which the tests of invalidation count on. Without
 * compaction unless asked (compactRatio): these tests check a log's history
 * (strictly increasing offsets, a strict replay, append-only bytes), which a
 * compaction replaces by design; the compaction tests turn it on.
 */
export async function startPipeline(cluster: PostgresCluster, storageDir: string, options: Partial<PipelineOptions> = {}): Promise<Pipeline> {
  return Pipeline.start({ connectionString: cluster.url, storageDir, flushIntervalMs: 5, tableCacheMs: 0, compactRatio: 0, ...options })
}

/**
 * Pipelines a test file starts in fresh (or given) storage directories; each
 * is stopped after its test, or earlier by `stop` (a restart test).
 */
export function usePipelines(
  cluster: PostgresCluster,
  dirs: TempDirFactory,
): {
  start(options?: Partial<PipelineOptions>, dir?: string): Promise<{ pipeline: Pipeline; dir: string }>
  stop(pipeline: Pipeline): Promise<void>
} {
  let running: Pipeline[] = []
  afterEach(async () => {
    for (const p of running) await p.stop()
    running = []
  })
  return {
    async start(options = {}, dir) {
      const storageDir = dir ?? (await dirs.make('store'))
      const pipeline = await startPipeline(cluster, storageDir, options)
      running.push(pipeline)
      return { pipeline, dir: storageDir }
    },
    async stop(pipeline) {
      running = running.filter((p) => p !== pipeline)
      await pipeline.stop()
    },
  }
}

/**
 * Waits until the pipeline has routed and made durable everything Postgres
 * committed before this call. It commits a marker row to a published table of
 * its own and waits for the router to pass that transaction: the insert
 * position read inside it is below its commit LSN.
 */
export async function caughtUp(pipeline: Pipeline, cluster: PostgresCluster, timeoutMs = 60_000): Promise<void> {
  await ensureMarker(cluster, pipeline)
  const { rows } = await cluster.query<{ lsn: string }>('INSERT INTO sluice_test_marker DEFAULT VALUES RETURNING pg_current_wal_insert_lsn()::text AS lsn')
  const target = parseLsnText(rows[0]!.lsn)
  const deadline = Date.now() + timeoutMs
  while (pipeline.router.lastRoutedLsn < target) {
    if (Date.now() > deadline) throw new Error(`pipeline did not catch up to ${target} (routed ${pipeline.router.lastRoutedLsn})`)
    await sleep(10)
  }
  await pipeline.store.flush()
}

const markers = new WeakSet<Pipeline>()

async function ensureMarker(cluster: PostgresCluster, pipeline: Pipeline): Promise<void> {
  if (markers.has(pipeline)) return
  await cluster.query('CREATE TABLE IF NOT EXISTS sluice_test_marker (id serial PRIMARY KEY)')
  const { rows } = await cluster.query(
    "SELECT 1 FROM pg_publication_tables WHERE pubname = 'sluice_publication' AND tablename = 'sluice_test_marker'",
  )
  if (rows.length === 0) await cluster.query('ALTER PUBLICATION sluice_publication ADD TABLE sluice_test_marker')
  markers.add(pipeline)
}

export function parseLsnText(text: string): bigint {
  const [hi, lo] = text.split('/')
  return (BigInt(`0x${hi}`) << 32n) | BigInt(`0x${lo}`)
}

/** The shape's log, materialised, next to what Postgres says it should hold. */
export async function compareShape(
  pipeline: Pipeline,
  cluster: PostgresCluster,
  handle: string,
  options: { where?: string; params?: readonly string[]; columns?: readonly string[]; bools?: readonly string[]; strict?: boolean } = {},
): Promise<{ actual: Map<string, Record<string, string | null>>; expected: Map<string, Record<string, string | null>>; lines: LogLine[] }> {
  const log = pipeline.shapes.log(handle)
  if (log === undefined) throw new Error(`shape ${handle} has no log`)
  const def = pipeline.shapes.definition(handle)!
  const lines = readLog(log)
  const actual = materialize(lines, { strict: options.strict ?? true })
  // Values print as the pipeline's sessions print them (docs/protocol.md §3.5).
  const client = await cluster.connect()
  let expected: Map<string, Record<string, string | null>>
  try {
    for (const [name, value] of Object.entries(DISPLAY_SETTINGS)) await client.query(`SELECT set_config($1, $2, false)`, [name, value])
    expected = await expectedRows((t, v) => client.query(t, v), { schema: def.schema, name: def.table }, options)
  } finally {
    await client.end()
  }
  normaliseBooleans(actual, options.bools ?? [])
  return { actual, expected, lines }
}

export function sorted(rows: Map<string, Record<string, string | null>>): Array<[string, Record<string, string | null>]> {
  return [...rows].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
}

/**
 * For a pipeline in another process: commits a marker transaction to a
 * published table and returns an LSN below its commit. Once the pipeline has
 * routed past it (and flushed), it has seen everything committed before this
 * call. The publication must exist (a pipeline has started once).
 */
export async function commitMarker(cluster: PostgresCluster, publication = 'sluice_publication'): Promise<bigint> {
  await cluster.query('CREATE TABLE IF NOT EXISTS sluice_test_marker (id serial PRIMARY KEY)')
  const { rows: published } = await cluster.query(
    'SELECT 1 FROM pg_publication_tables WHERE pubname = $1 AND tablename = $2',
    [publication, 'sluice_test_marker'],
  )
  if (published.length === 0) await cluster.query(`ALTER PUBLICATION "${publication.replaceAll('"', '""')}" ADD TABLE sluice_test_marker`)
  const { rows } = await cluster.query<{ lsn: string }>('INSERT INTO sluice_test_marker DEFAULT VALUES RETURNING pg_current_wal_insert_lsn()::text AS lsn')
  return parseLsnText(rows[0]!.lsn)
}

/** What a shape must hold, as `expectedRows` takes it. */
export interface ShapeQuery {
  readonly schema: string
  readonly table: string
  readonly where?: string
  readonly params?: readonly string[]
  readonly columns?: readonly string[]
}

/**
 * Any log (a pipeline's, or one read through a read-only store in another
 * process), checked for structure, replayed strictly, next to what Postgres
 * says the shape holds now. Throws on a structural violation.
 */
export async function compareLog(
  log: ShapeLog,
  cluster: PostgresCluster,
  shape: ShapeQuery,
  options: { bools?: readonly string[] } = {},
): Promise<{ actual: Map<string, Record<string, string | null>>; expected: Map<string, Record<string, string | null>>; lines: LogLine[]; structure: LogStructure }> {
  const lines = readLog(log)
  const structure = checkLogStructure(lines)
  const actual = materializeExact(lines)
  normaliseBooleans(actual, options.bools ?? [])
  const expected = await expectedRows((t, v) => cluster.query(t, v), { schema: shape.schema, name: shape.table }, {
    ...(shape.where === undefined ? {} : { where: shape.where }),
    ...(shape.params === undefined ? {} : { params: shape.params }),
    ...(shape.columns === undefined ? {} : { columns: shape.columns }),
  })
  return { actual, expected, lines, structure }
}

/**
 * One shape's log followed across checkpoints: each `step` reads only what was
 * published since the previous one, checks its structure, replays it strictly
 * onto the rows so far, and compares them with what Postgres says the shape
 * holds now. `verifyPrefix` re-reads the whole log and checks it still starts
 * with every byte read before (append-only, also across crashes).
 */
export class FollowedShape {
  readonly follower = new LogFollower()
  readonly structure = new LogStructureChecker()
  readonly replay = new ExactReplay()
  counts: LogStructure = { snapshotRows: 0, changes: 0, transactions: 0, ranges: 0 }

  constructor(private readonly shape: ShapeQuery, private readonly bools: readonly string[] = []) {}

  async step(
    log: ShapeLog,
    cluster: PostgresCluster,
  ): Promise<{ fresh: LogLine[]; actual: Map<string, Record<string, string | null>>; expected: Map<string, Record<string, string | null>> }> {
    const fresh = this.follower.next(log)
    this.structure.feed(fresh)
    this.counts = this.structure.end()
    this.replay.apply(fresh)
    const actual = new Map(this.replay.rows)
    normaliseBooleans(actual, this.bools)
    const shape = this.shape
    const expected = await expectedRows((t, v) => cluster.query(t, v), { schema: shape.schema, name: shape.table }, {
      ...(shape.where === undefined ? {} : { where: shape.where }),
      ...(shape.params === undefined ? {} : { params: shape.params }),
      ...(shape.columns === undefined ? {} : { columns: shape.columns }),
    })
    return { fresh, actual, expected }
  }
}

/** The first difference between two row maps, for an error message (undefined when equal). */
export function firstDifference(
  actual: Map<string, Record<string, string | null>>,
  expected: Map<string, Record<string, string | null>>,
): string | undefined {
  const problems: string[] = []
  for (const [key, row] of expected) {
    const got = actual.get(key)
    if (got === undefined) problems.push(`missing ${key}: ${JSON.stringify(row)}`)
    else if (JSON.stringify(sortKeys(got)) !== JSON.stringify(sortKeys(row))) problems.push(`differs ${key}: log ${JSON.stringify(sortKeys(got))} vs pg ${JSON.stringify(sortKeys(row))}`)
    if (problems.length >= 5) break
  }
  for (const [key, row] of actual) {
    if (problems.length >= 8) break
    if (!expected.has(key)) problems.push(`extra ${key}: ${JSON.stringify(row)}`)
  }
  if (problems.length === 0) return undefined
  return `${problems.length}+ differences (log ${actual.size} rows, pg ${expected.size}):\n  ${problems.join('\n  ')}`
}

function sortKeys(row: Record<string, string | null>): Record<string, string | null> {
  return Object.fromEntries(Object.entries(row).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)))
}
