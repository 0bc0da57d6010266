import { existsSync, readFileSync } from 'node:fs'
import { chmod } from 'node:fs/promises'
import { join } from 'node:path'
import { useTempDir } from '@sluice/test-utils'
import pg from 'pg'
import { afterEach, describe, expect, it } from 'vitest'
import { type EmbeddedPostgres, startEmbeddedPostgres } from '../../src/embedded-postgres.js'

const dirs = useTempDir('embedded-pg')
let running: EmbeddedPostgres[] = []

afterEach(async () => {
  for (const p of running) await p.stop().catch(() => {})
  running = []
})

/** A storage dir the postgres OS user can traverse when we are root. */
async function storageDir(): Promise<string> {
  const dir = await dirs.make('store')
  await chmod(dir, 0o755)
  return dir
}

async function query<T extends pg.QueryResultRow>(url: string, sql: string): Promise<T[]> {
  const client = new pg.Client({ connectionString: url })
  await client.connect()
  try {
    return (await client.query<T>(sql)).rows
  } finally {
    await client.end()
  }
}

async function start(dir: string): Promise<EmbeddedPostgres> {
  const p = await startEmbeddedPostgres({ dir: join(dir, 'postgres') })
  running.push(p)
  return p
}

describe('embedded Postgres', () => {
  it('creates a cluster with logical replication, reuses its data on the next start, and stops', async () => {
    const dir = await storageDir()
    const first = await start(dir)
    expect(first.created).toBe(true)
    expect(first.url).toMatch(/^postgresql:\/\/postgres@127\.0\.0\.1:\d+\/postgres$/)
    expect(first.dataDir).toBe(join(dir, 'postgres', 'data'))
    const [settings] = await query<{ wal_level: string; slots: string }>(
      first.url,
      "SELECT current_setting('wal_level') AS wal_level, current_setting('max_replication_slots') AS slots",
    )
    expect(settings).toEqual({ wal_level: 'logical', slots: '10' })
    // A logical slot can be made (what the pipeline needs), and data survives a restart.
    await query(first.url, "CREATE TABLE kept (id int PRIMARY KEY); INSERT INTO kept VALUES (1), (2)")
    await query(first.url, "SELECT pg_create_logical_replication_slot('embedded_test_slot', 'pgoutput')")
    await first.stop()
    expect(existsSync(join(first.dataDir, 'postmaster.pid'))).toBe(false)
    await expect(query(first.url, 'SELECT 1')).rejects.toThrow()

    const t0 = performance.now()
    const second = await start(dir)
    const warmMs = performance.now() - t0
    expect(second.created).toBe(false)
    // The port of the last run is preferred, so the connection URL stays the same when it is free.
    expect(second.port).toBe(first.port)
    expect(await query<{ n: string }>(second.url, 'SELECT count(*)::text AS n FROM kept')).toEqual([{ n: '2' }])
    await query(second.url, "SELECT pg_drop_replication_slot('embedded_test_slot')")
    expect(warmMs).toBeLessThan(5_000)
    await second.stop()
    await second.stop() // idempotent
  })

  it('restarts a cluster left running by a process that died', async () => {
    const dir = await storageDir()
    const first = await start(dir)
    // Forget it without stopping, and pretend its owner is gone.
    const stateFile = join(dir, 'postgres', 'sluice-embedded.json')
    const state = JSON.parse(readFileSync(stateFile, 'utf8')) as { port: number }
    const { writeFile } = await import('node:fs/promises')
    await writeFile(stateFile, JSON.stringify({ port: state.port, ownerPid: 2 ** 22 + 12345 }))
    const second = await start(dir)
    expect(second.created).toBe(false)
    expect(await query<{ one: number }>(second.url, 'SELECT 1 AS one')).toEqual([{ one: 1 }])
    await second.stop()
    await expect(query(first.url, 'SELECT 1')).rejects.toThrow()
  })

  it('refuses a data folder in use by a live sluice', async () => {
    const dir = await storageDir()
    await start(dir)
    const stateFile = join(dir, 'postgres', 'sluice-embedded.json')
    const state = JSON.parse(readFileSync(stateFile, 'utf8')) as { port: number }
    const { writeFile } = await import('node:fs/promises')
    // Our parent process stands in for another live sluice.
    await writeFile(stateFile, JSON.stringify({ port: state.port, ownerPid: process.ppid }))
    await expect(startEmbeddedPostgres({ dir: join(dir, 'postgres') })).rejects.toThrow(/in use by another sluice process/)
  })

  it('reports binaries that are not there', async () => {
    const dir = await storageDir()
    await expect(startEmbeddedPostgres({ dir: join(dir, 'postgres'), binDir: join(dir, 'nothing') })).rejects.toThrow(
      /--postgres-bin .* must contain postgres, initdb, pg_ctl/,
    )
  })
})
