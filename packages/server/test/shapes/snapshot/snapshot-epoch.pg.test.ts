import { spawnSync } from 'node:child_process'
import { join } from 'node:path'
import { usePostgres } from '@sluice/test-utils'
import pg from 'pg'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { isFullXidVisible, isVisibleInSnapshot, loadTable, runSnapshot } from '../../../src/shapes/index.js'
import { startPostgresAgain, stopPostgres } from '../../replication/harness.js'

/**
 * Snapshots of a cluster whose transaction IDs are in epoch 5 (set with
 * pg_resetwal -e): pg_current_snapshot() then prints xid8 values above 2^34,
 * while pgoutput (and test_decoding) carry only the low 32 bits.
 */

const cluster = usePostgres()
const EPOCH = 5n
let pool: pg.Pool

function runAsPostgres(command: string, args: string[]): void {
  const ids = process.getuid?.() === 0 ? { uid: Number(idOf('-u')), gid: Number(idOf('-g')) } : {}
  const result = spawnSync(command, args, { encoding: 'utf8', cwd: '/', ...ids })
  if (result.status !== 0) throw new Error(`${command} ${args.join(' ')} failed: ${result.stderr}${result.stdout}`)
}

function idOf(flag: string): string {
  return spawnSync('id', [flag, 'postgres'], { encoding: 'utf8' }).stdout.trim()
}

beforeAll(async () => {
  await stopPostgres(cluster, 'fast')
  runAsPostgres(join(cluster.binDir, 'pg_resetwal'), ['-e', String(EPOCH), '-D', cluster.dataDir])
  await startPostgresAgain(cluster)
  pool = new pg.Pool({ connectionString: cluster.url, max: 1 })
  pool.on('error', () => {})
  await cluster.query('CREATE TABLE t (id int PRIMARY KEY, note text)')
}, 120_000)

afterAll(async () => {
  await pool?.end()
  await cluster.dropReplicationSlots()
})

describe('snapshots in a high epoch', () => {
  it('classifies 32-bit xids from logical decoding against xid8 snapshots', async () => {
    await cluster.query(`SELECT pg_create_logical_replication_slot('epoch_test', 'test_decoding')`)
    const xidOf = async (client: pg.Client): Promise<bigint> => BigInt((await client.query<{ x: string }>('SELECT pg_current_xact_id()::text AS x')).rows[0]?.x as string)

    const before = await cluster.connect()
    await before.query(`BEGIN; INSERT INTO t VALUES (1, 'before')`)
    const beforeXid = await xidOf(before)
    await before.query('COMMIT')

    const open = await cluster.connect()
    await open.query(`BEGIN; INSERT INTO t VALUES (2, 'open')`)
    const openXid = await xidOf(open)

    const after = await cluster.connect()
    let afterXid = 0n
    const info = await loadTable(cluster, { schema: 'public', name: 't' })
    if (info === undefined) throw new Error('no table')
    const lines: string[] = []
    const result = await runSnapshot(pool, { table: info }, {
      start: async () => {
        await after.query(`BEGIN; INSERT INTO t VALUES (3, 'after')`)
        afterXid = await xidOf(after)
        await after.query('COMMIT')
        await open.query('COMMIT')
      },
      rows: (batch) => void lines.push(...batch.map((b) => new TextDecoder().decode(b))),
    })
    await Promise.all([before.end(), open.end(), after.end()])

    const { snapshot } = result
    expect(snapshot.xmin >> 32n).toBe(EPOCH)
    expect(snapshot.xmax >> 32n).toBe(EPOCH)
    expect(beforeXid >> 32n).toBe(EPOCH)
    expect(lines.map((l) => (JSON.parse(l) as { value: { id: string } }).value.id)).toEqual(['1'])

    // What logical decoding reports: the 32-bit xid of each transaction.
    const { rows } = await cluster.query<{ data: string }>(
      `SELECT data FROM pg_logical_slot_get_changes('epoch_test', NULL, NULL, 'include-xids', '1') WHERE data LIKE 'COMMIT %'`,
    )
    const decoded = rows.map((r) => Number(r.data.slice('COMMIT '.length)))
    const low = (xid: bigint): number => Number(xid & 0xffff_ffffn)
    expect(decoded).toEqual(expect.arrayContaining([low(beforeXid), low(openXid), low(afterXid)]))
    expect(isVisibleInSnapshot(snapshot, low(beforeXid))).toBe(true)
    expect(isVisibleInSnapshot(snapshot, low(openXid))).toBe(false)
    expect(isVisibleInSnapshot(snapshot, low(afterXid))).toBe(false)
    for (const xid of [beforeXid, openXid, afterXid]) expect(isVisibleInSnapshot(snapshot, low(xid))).toBe(isFullXidVisible(snapshot, xid))
    await cluster.query(`SELECT pg_drop_replication_slot('epoch_test')`)
  })
})
