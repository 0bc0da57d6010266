/**
 * The start benchmark's fixture: a Postgres cluster with one table and a
 * storage directory holding `shapes` shapes on it, as a server left them at a
 * clean stop. The first shape is made by a real server over HTTP (so its meta
 * is exactly what the server writes); the rest are written straight through
 * the storage engine with that meta's table signature and snapshot, one
 * `id = $1` shape per id. Going through HTTP and the pipeline for 100,000
 * shapes takes over ten minutes here; the engine takes about a minute.
 */
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { createServer, loadConfig } from '@sluice/server'
import { openFileLogStore } from '@sluice/storage'
import type { PostgresCluster } from '@sluice/test-utils'
import { startPostgres } from '@sluice/test-utils'
import { decodeShapeMeta, definitionHash, encodeShapeMeta, formatHandle, parseHandle } from '../../packages/server/src/shapes/definition/index.js'
import { loadNativeAddon } from '../../packages/server/src/native-addon.js'
import { encodeSnapshotEnd } from '../../packages/server/src/shapes/snapshot/pg-snapshot.js'

export const TABLE = 'start_items'

export interface StartFixture {
  readonly cluster: PostgresCluster
  readonly storageDir: string
  readonly shapes: number
}

/** Postgres settings: as the throwaway clusters', with room for the bench's few connections. */
const PG_SETTINGS = { wal_level: 'logical', fsync: false, autovacuum: false, max_replication_slots: 16, max_wal_senders: 16 } as const

/**
 * Starts (or reuses, under `dir`) the cluster and makes (or reuses) the store
 * of `shapes` shapes in `<dir>/store-<shapes>`. A store is reused only if a
 * finished earlier run marked it (`fixture.json`).
 */
export async function startFixture(dir: string, shapes: number, cluster?: PostgresCluster): Promise<StartFixture> {
  mkdirSync(dir, { recursive: true })
  const pg = cluster ?? (await startPostgres({ settings: PG_SETTINGS, persistentDir: join(dir, 'pg') }))
  await pg.query(`CREATE TABLE IF NOT EXISTS ${TABLE} (id int PRIMARY KEY, title text NOT NULL)`)
  const storageDir = join(dir, `store-${shapes}`)
  const marker = join(storageDir, 'fixture.json')
  if (existsSync(marker) && (JSON.parse(readFileSync(marker, 'utf8')) as { shapes: number }).shapes === shapes) {
    await catchUp(pg, storageDir, shapes)
    return { cluster: pg, storageDir, shapes }
  }
  await makeStore(pg, storageDir, shapes)
  writeFileSync(marker, JSON.stringify({ shapes, made: new Date().toISOString() }))
  return { cluster: pg, storageDir, shapes }
}

/**
 * A stopped cluster drops its slots, so a reused store meets a new slot that
 * starts past its watermark (and the server would invalidate every shape).
 * Nothing wrote to the table since, so the store holds every commit up to the
 * new slot's start: say so by advancing its watermark there.
 */
async function catchUp(pg: PostgresCluster, storageDir: string, shapes: number): Promise<void> {
  const slot = `start_${shapes}`
  const { rows } = await pg.query<{ n: number }>('SELECT count(*)::int AS n FROM pg_replication_slots WHERE slot_name = $1', [slot])
  if (rows[0]!.n > 0) return
  // Alone in its query: it refuses to run inside a multi-statement one.
  const created = await pg.query<{ lsn: string }>("SELECT lsn::text AS lsn FROM pg_create_logical_replication_slot($1, 'pgoutput')", [slot])
  const [hi, lo] = created.rows[0]!.lsn.split('/')
  const lsn = (BigInt(`0x${hi}`) << 32n) | BigInt(`0x${lo}`)
  const store = await openFileLogStore({ dir: join(storageDir, 'logs'), ...(await writerLock()) })
  try {
    store.advance(lsn)
    await store.flush()
  } finally {
    await store.close()
  }
}

/**
 * The store opened here takes the writer lock the way the server does (flock
 * through the addon, where it loads): the server leaves LOCK naming its pid,
 * and a pid lock would take that for this process holding the store still.
 */
async function writerLock(): Promise<{ lock?: { lockFile: (fd: number) => boolean } }> {
  const lockFile = (await loadNativeAddon())?.lockFile
  return lockFile === undefined ? {} : { lock: { lockFile } }
}

async function makeStore(pg: PostgresCluster, storageDir: string, shapes: number): Promise<void> {
  await pg.query(`INSERT INTO ${TABLE} SELECT i, 'item ' || i FROM generate_series(1, $1) i ON CONFLICT DO NOTHING`, [shapes])
  // Each store has a slot of its own, so the stores do not push one another's slots ahead.
  const slot = `start_${shapes}`
  const config = loadConfig(['--database-url', pg.url, '--port', '0', '--storage-dir', storageDir, '--slot', slot, '--log-level', 'warn'], {})
  const server = await createServer(config)
  let first: string
  try {
    const url = `${server.url}/v1/shape?table=${TABLE}&where=${encodeURIComponent('id = $1')}&params%5B1%5D=1&offset=-1`
    const response = await fetch(url)
    if (response.status !== 200) throw new Error(`first shape: ${response.status} ${await response.text()}`)
    await response.arrayBuffer()
    first = response.headers.get('electric-handle') ?? ''
  } finally {
    await server.close()
  }
  const store = await openFileLogStore({ dir: join(storageDir, 'logs'), ...(await writerLock()) })
  try {
    const meta = decodeShapeMeta(store.get(first)!.meta)
    const startMicros = parseHandle(first)!.micros + 1
    const snapshotEnd = encodeSnapshotEnd(meta.stitch!.snapshot)
    const BATCH = 500
    for (let from = 2; from <= shapes; from += BATCH) {
      const finishing: Promise<unknown>[] = []
      for (let id = from; id < Math.min(from + BATCH, shapes + 1); id++) {
        const definition = { ...meta.definition, params: { '1': String(id) } }
        const handle = formatHandle(definitionHash(definition), startMicros + id)
        const encoded = encodeShapeMeta(definition, handle, { ...(meta.table === undefined ? {} : { table: meta.table }), stitch: meta.stitch! })
        const writer = store.createShape(handle, { meta: encoded })
        writer.append([new TextEncoder().encode(`{"key":"\\"public\\".\\"${TABLE}\\"/\\"${id}\\"","value":{"id":"${id}","title":"item ${id}"},"headers":{"operation":"insert","relation":["public","${TABLE}"]}}`)])
        finishing.push(writer.finish(snapshotEnd))
      }
      await Promise.all(finishing)
      if (from % 10_000 < BATCH) process.stderr.write(`fixture: ${Math.min(from + BATCH - 1, shapes)} of ${shapes} shapes\n`)
    }
  } finally {
    await store.close()
  }
}
