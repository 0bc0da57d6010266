/**
 * The start benchmark's fixture: a Postgres cluster with one table and a
 * storage directory holding `shapes` shapes on it, as a server left them at a
 * clean stop. The first shape is made by a real server over HTTP (so its meta
 * is exactly what the server writes); the rest are written straight through
 * the storage engine with that meta's table signature and snapshot, one
 * `id = $1` shape per id (`where: 'literal'`: one `id = <n>` shape per id, a
 * distinct clause text each). Each meta carries the route the server records
 * for its clause (the first shape's, with the shape's id as key), so a restore
 * files them as it would a server's. Going through
 * HTTP and the pipeline for 100,000 shapes takes over ten minutes here; the
 * engine takes about a minute.
 */
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { createServer, loadConfig } from '@sluice/server'
import { type FileLogStore, openFileLogStore } from '@sluice/storage'
import type { PostgresCluster } from '@sluice/test-utils'
import { startPostgres } from '@sluice/test-utils'
import { decodeShapeMeta, definitionHash, encodeShapeMeta, formatHandle, parseHandle } from '../../packages/server/src/shapes/definition/index.js'
import { encodeSnapshotEnd } from '../../packages/server/src/shapes/snapshot/pg-snapshot.js'
import { writerLockOptions } from '../../packages/server/src/writer-lock.js'

export const TABLE = 'start_items'

/** How the fixture's shapes differ: by a parameter (one clause text) or by a literal in the clause. */
export type FixtureWhere = 'param' | 'literal'

export interface StartFixture {
  readonly cluster: PostgresCluster
  readonly storageDir: string
  readonly shapes: number
  /** The replication slot the store follows. */
  readonly slot: string
}

/** Raised when the stores a fixture writes change (2: metas carry their routes; 3: in the indexed layout), so older ones are made again. */
const FIXTURE_FORMAT = 3

/** Postgres settings: as the throwaway clusters', with room for the bench's few connections. */
const PG_SETTINGS = { wal_level: 'logical', fsync: false, autovacuum: false, max_replication_slots: 16, max_wal_senders: 16 } as const

/**
 * Starts (or reuses, under `dir`) the cluster and makes (or reuses) the store
 * of `shapes` shapes in `<dir>/store-<shapes>`. A store is reused only if a
 * finished earlier run marked it (`fixture.json`).
 */
export async function startFixture(dir: string, shapes: number, cluster?: PostgresCluster, where: FixtureWhere = 'param'): Promise<StartFixture> {
  mkdirSync(dir, { recursive: true })
  const pg = cluster ?? (await startPostgres({ settings: PG_SETTINGS, persistentDir: join(dir, 'pg') }))
  await pg.query(`CREATE TABLE IF NOT EXISTS ${TABLE} (id int PRIMARY KEY, title text NOT NULL)`)
  const storageDir = join(dir, where === 'param' ? `store-${shapes}` : `store-${shapes}-${where}`)
  const marker = join(storageDir, 'fixture.json')
  const made = existsSync(marker) ? (JSON.parse(readFileSync(marker, 'utf8')) as { shapes: number; format?: number }) : undefined
  if (made?.shapes === shapes && made.format === FIXTURE_FORMAT) {
    await catchUp(pg, storageDir, shapes, where)
    return { cluster: pg, storageDir, shapes, slot: slotName(shapes, where) }
  }
  if (existsSync(storageDir)) {
    // Made by an older fixture (or left unfinished): made again from nothing, slot included.
    rmSync(storageDir, { recursive: true, force: true })
    await pg.query('SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1', [slotName(shapes, where)])
  }
  await makeStore(pg, storageDir, shapes, where)
  await catchUp(pg, storageDir, shapes, where)
  writeFileSync(marker, JSON.stringify({ shapes, format: FIXTURE_FORMAT, made: new Date().toISOString() }))
  return { cluster: pg, storageDir, shapes, slot: slotName(shapes, where) }
}

/**
 * A stopped cluster drops its slots, so a reused store meets a new slot that
 * starts past its watermark (and the server would invalidate every shape);
 * and a slot the fixture's server confirmed can be a little past the store the
 * fixture then wrote without it. Nothing wrote to the table since, so the
 * store holds every commit up to the slot's position, and up to the end of
 * the WAL: say so by advancing its watermark there, as a server left idle
 * does from Postgres's keepalives. A store left below its shapes' snapshots
 * would restore every shape through a stitching target, which a server that
 * ran for a moment after making its shapes never does.
 */
async function catchUp(pg: PostgresCluster, storageDir: string, shapes: number, where: FixtureWhere): Promise<void> {
  const slot = slotName(shapes, where)
  const { rows } = await pg.query<{ lsn: string }>('SELECT confirmed_flush_lsn::text AS lsn FROM pg_replication_slots WHERE slot_name = $1', [slot])
  // Alone in its query: it refuses to run inside a multi-statement one.
  const text = rows[0]?.lsn ?? (await pg.query<{ lsn: string }>("SELECT lsn::text AS lsn FROM pg_create_logical_replication_slot($1, 'pgoutput')", [slot])).rows[0]!.lsn
  const end = (await pg.query<{ lsn: string }>('SELECT pg_current_wal_lsn()::text AS lsn')).rows[0]!.lsn
  const lsn = [text, end].map(parseLsn).reduce((a, b) => (a > b ? a : b))
  const store = await openFixtureStore(storageDir)
  try {
    if (lsn > store.durableLsn) {
      store.advance(lsn)
      await store.flush()
    }
  } finally {
    await store.close()
  }
}

async function makeStore(pg: PostgresCluster, storageDir: string, shapes: number, where: FixtureWhere): Promise<void> {
  await pg.query(`INSERT INTO ${TABLE} SELECT i, 'item ' || i FROM generate_series(1, $1) i ON CONFLICT DO NOTHING`, [shapes])
  const slot = slotName(shapes, where)
  const config = loadConfig(['--database-url', pg.url, '--port', '0', '--storage-dir', storageDir, '--slot', slot, '--log-level', 'warn'], {})
  const server = await createServer(config)
  let first: string
  try {
    const query = where === 'param' ? `where=${encodeURIComponent('id = $1')}&params%5B1%5D=1` : `where=${encodeURIComponent('id = 1')}`
    const url = `${server.url}/v1/shape?table=${TABLE}&${query}&offset=-1`
    const response = await fetch(url)
    if (response.status !== 200) throw new Error(`first shape: ${response.status} ${await response.text()}`)
    await response.arrayBuffer()
    first = response.headers.get('electric-handle') ?? ''
  } finally {
    await server.close()
  }
  const store = await openFixtureStore(storageDir)
  try {
    const meta = decodeShapeMeta(store.get(first)!.meta)
    const startMicros = parseHandle(first)!.micros + 1
    const snapshotEnd = encodeSnapshotEnd(meta.stitch!.snapshot)
    const BATCH = 500
    for (let from = 2; from <= shapes; from += BATCH) {
      const finishing: Promise<unknown>[] = []
      for (let id = from; id < Math.min(from + BATCH, shapes + 1); id++) {
        const definition = where === 'param' ? { ...meta.definition, params: { '1': String(id) } } : { ...meta.definition, where: literalClause(meta.definition.where, id) }
        const handle = formatHandle(definitionHash(definition), startMicros + id)
        // The route the server records for `id = <id>`: the first shape's, with this id as its key.
        const route = meta.route === undefined ? undefined : { ...meta.route, keys: [String(id)] }
        const encoded = encodeShapeMeta(definition, handle, { ...(meta.table === undefined ? {} : { table: meta.table }), stitch: meta.stitch!, route })
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

/** The store, locked the way the server locks it (flock on LOCK, which a server leaves behind naming its process: a pid-file lock would refuse it). */
async function openFixtureStore(storageDir: string): Promise<FileLogStore> {
  const { lockFile } = await writerLockOptions({ standby: false, waitMs: 0, logger: { info: () => {}, warn: () => {} } })
  return openFileLogStore({ dir: join(storageDir, 'logs'), lock: { lockFile } })
}

function parseLsn(text: string): bigint {
  const [hi, lo] = text.split('/')
  return (BigInt(`0x${hi}`) << 32n) | BigInt(`0x${lo}`)
}

/** Each store has a slot of its own, so the stores do not push one another's slots ahead. */
function slotName(shapes: number, where: FixtureWhere): string {
  return where === 'param' ? `start_${shapes}` : `start_${shapes}_${where}`
}

/** The first shape's canonical clause (`id = 1` as the server spells it, `("id" = 1)`) with another id. */
function literalClause(first: string | undefined, id: number): string {
  if (first === undefined || (first.match(/= 1\b/g) ?? []).length !== 1) throw new Error(`fixture: unexpected canonical clause ${String(first)}`)
  return first.replace(/= 1\b/, `= ${id}`)
}
