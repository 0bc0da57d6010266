import { usePostgres } from '@sluice/test-utils'
import type pg from 'pg'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { ReplicationClient, Transaction } from '../../src/replication/index.js'
import { type CollectingSink, setUpReplication, startClient, waitFor } from './harness.js'

const cluster = usePostgres()

/** Rows of about 200 bytes: a few thousand overflow 64kB of decoding memory many times. */
const ROW = `repeat(md5(g::text), 6)`

describe('protocol 2: streamed in-progress transactions', () => {
  let client: ReplicationClient
  let sink: CollectingSink

  beforeAll(async () => {
    await cluster.query('CREATE TABLE big (id int PRIMARY KEY, label text, payload text)')
    await cluster.query('CREATE TABLE small (id int PRIMARY KEY)')
    const names = await setUpReplication(cluster, [
      ['public', 'big'],
      ['public', 'small'],
    ])
    // The walsender's own setting decides when Postgres streams: the smallest it allows.
    ;({ client, sink } = startClient(cluster, names, { durableLsn: () => 0n, settings: { logical_decoding_work_mem: '64kB' } }))
    await client.start()
  })

  afterAll(async () => {
    await client?.stop()
    await cluster.dropReplicationSlots()
  })

  async function currentXid(session: pg.Client): Promise<number> {
    const { rows } = await session.query<{ xid: string }>('SELECT (txid_current() % 4294967296)::text AS xid')
    return Number(rows[0]?.xid)
  }

  it('streams a large transaction incrementally, interleaved with small ones, then commits it', async () => {
    const session = await cluster.connect()
    await session.query('BEGIN')
    const xid = await currentXid(session)
    await session.query(`INSERT INTO big SELECT g, 'first', ${ROW} FROM generate_series(1, 3000) g`)
    // Segments of the open transaction arrive before it commits.
    await waitFor(() => sink.streamedBatches.some((b) => b.xid === xid), 'streamed changes of the open transaction')
    await cluster.query('INSERT INTO small VALUES (1)')
    await session.query(`INSERT INTO big SELECT g, 'second', ${ROW} FROM generate_series(3001, 6000) g`)
    await session.query('COMMIT')
    await session.end()

    const commit = await waitFor(() => sink.streamCommits.find((c) => c.xid === xid), 'the stream commit')
    const tx = await waitFor(() => sink.transactions.find((t) => t.xid === xid), 'the rebuilt transaction')
    expect(tx.lsn).toBe(commit.lsn)
    expect(tx.changes).toHaveLength(6000)
    expect(tx.changes.map((c) => (c.kind === 'insert' ? Number(c.newTuple[0]) : -1))).toEqual(Array.from({ length: 6000 }, (_, i) => i + 1))
    // Handed over in bounded batches, never as one 6000-change array.
    const batches = sink.streamedBatches.filter((b) => b.xid === xid)
    expect(batches.length).toBeGreaterThan(5)
    expect(Math.max(...batches.map((b) => b.count))).toBeLessThanOrEqual(1024)

    const small = sink.on('small')[0]
    expect(small).toBeDefined()
    // The small transaction committed first, so it comes first and has the smaller LSN.
    expect(sink.transactions.indexOf(small as Transaction)).toBeLessThan(sink.transactions.indexOf(tx))
    expect(small?.lsn).toBeLessThan(tx.lsn)
  })

  it('reports a rolled-back streamed transaction as aborted and delivers nothing of it', async () => {
    const session = await cluster.connect()
    await session.query('BEGIN')
    const xid = await currentXid(session)
    await session.query(`INSERT INTO big SELECT g, 'rolled back', ${ROW} FROM generate_series(10001, 14000) g`)
    await waitFor(() => sink.streamedBatches.some((b) => b.xid === xid), 'streamed changes of the doomed transaction')
    await session.query('ROLLBACK')
    await session.end()
    await cluster.query('INSERT INTO small VALUES (2)')
    await sink.waitForCount('small', 2)
    const abort = await waitFor(() => sink.streamAborts.find((a) => a.xid === xid), 'the stream abort')
    expect(abort).toEqual({ xid, subxid: xid, reason: 'aborted' })
    expect(sink.transactions.some((t) => t.xid === xid)).toBe(false)
    expect(sink.streamCommits.some((c) => c.xid === xid)).toBe(false)
  })

  it('drops the changes of a rolled-back subtransaction of a streamed transaction', async () => {
    const session = await cluster.connect()
    await session.query('BEGIN')
    const xid = await currentXid(session)
    await session.query(`INSERT INTO big SELECT g, 'kept', ${ROW} FROM generate_series(20001, 22000) g`)
    await session.query('SAVEPOINT s')
    await session.query(`INSERT INTO big SELECT g, 'undone', ${ROW} FROM generate_series(22001, 25000) g`)
    await session.query('ROLLBACK TO SAVEPOINT s')
    await session.query(`INSERT INTO big SELECT g, 'kept too', ${ROW} FROM generate_series(25001, 25010) g`)
    await session.query('COMMIT')
    await session.end()

    const tx = await waitFor(() => sink.transactions.find((t) => t.xid === xid), 'the transaction with a rolled-back savepoint')
    const labels = new Set(tx.changes.map((c) => (c.kind === 'insert' ? c.newTuple[1] : c.kind)))
    expect([...labels].sort()).toEqual(['kept', 'kept too'])
    expect(tx.changes).toHaveLength(2010)
    expect(sink.streamAborts.some((a) => a.xid === xid && a.subxid !== xid && a.reason === 'aborted')).toBe(true)
    expect(sink.streamCommits.some((c) => c.xid === xid)).toBe(true)
  })

  it('leaves nothing open and agrees with the table', async () => {
    const { rows } = await cluster.query<{ n: string }>('SELECT count(*)::text AS n FROM big')
    const inserted = sink.on('big').reduce((n, tx) => n + tx.changes.length, 0)
    expect(inserted).toBe(Number(rows[0]?.n))
    expect(client.connected).toBe(true)
  })
})

describe('protocol 1 (forced): no streaming from Postgres, big transactions spill in the assembler', () => {
  let client: ReplicationClient
  let sink: CollectingSink

  beforeAll(async () => {
    await cluster.query('CREATE TABLE v1_rows (id int PRIMARY KEY, payload text)')
    const names = await setUpReplication(cluster, [['public', 'v1_rows']])
    ;({ client, sink } = startClient(cluster, names, {
      durableLsn: () => 0n,
      protoVersion: 1,
      maxTransactionBytes: 64 * 1024,
      settings: { logical_decoding_work_mem: '64kB' },
    }))
    await client.start()
  })

  afterAll(async () => {
    await client?.stop()
    await cluster.dropReplicationSlots()
  })

  it('delivers a large transaction through the streaming callbacks, a small one whole', async () => {
    expect(client.connection?.protoVersion).toBe(1)
    await cluster.query(`INSERT INTO v1_rows SELECT g, repeat(md5(g::text), 6) FROM generate_series(1, 3000) g`)
    await cluster.query(`INSERT INTO v1_rows VALUES (0, 'small')`)
    const txs = await sink.waitForCount('v1_rows', 2)
    expect(txs[0]?.changes).toHaveLength(3000)
    expect(txs[1]?.changes).toHaveLength(1)
    expect(sink.streamCommits.map((c) => c.xid)).toEqual([txs[0]?.xid])
    expect(sink.streamCommits[0]?.lsn).toBe(txs[0]?.lsn)
    expect(sink.streamAborts).toEqual([])
  })
})
