import type { ShapeDefinitionParams } from '@sluice/protocol'
import type { PostgresCluster } from '@sluice/test-utils'
import { setTimeout as sleep } from 'node:timers/promises'
import { Pipeline, type PipelineOptions } from '../../src/pipeline.js'
import { DISPLAY_SETTINGS } from '../../src/replication/index.js'
import { type LogLine, expectedRows, materialize, normaliseBooleans, readLog } from './log-replay.js'

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

export async function startPipeline(cluster: PostgresCluster, storageDir: string, options: Partial<PipelineOptions> = {}): Promise<Pipeline> {
  return Pipeline.start({ connectionString: cluster.url, storageDir, flushIntervalMs: 5, ...options })
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
  // Values print as the pipeline's sessions print them (PROTOCOL.md §3.5).
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
