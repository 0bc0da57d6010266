import { usePostgres } from '@sluice/test-utils'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { DisconnectedInfo, PublicationManager, ReplicationClient, SlotManager, Transaction } from '../../src/replication/index.js'
import { type CollectingSink, setUpReplication, startClient, startPostgresAgain, stopPostgres, waitFor } from './harness.js'

const cluster = usePostgres()

const ids = (txs: readonly Transaction[]): number[] =>
  txs.flatMap((tx) => tx.changes.map((c) => (c.kind === 'insert' ? Number(c.newTuple[0]) : -1)))

describe('Postgres restarts under a running client', () => {
  let names: { slot: SlotManager; publication: PublicationManager }
  let client: ReplicationClient
  let sink: CollectingSink
  let durable = 0n
  const connects: number[] = []
  const disconnects: DisconnectedInfo[] = []
  let lsnA3 = 0n

  beforeAll(async () => {
    await cluster.query('CREATE TABLE events (id int PRIMARY KEY, payload text)')
    names = await setUpReplication(cluster, [['public', 'events']])
    ;({ client, sink } = startClient(cluster, names, {
      durableLsn: () => durable,
      statusIntervalMs: 100,
      settings: { logical_decoding_work_mem: '64kB' },
    }))
    client.on('connected', () => connects.push(Date.now()))
    client.on('disconnected', (info) => disconnects.push(info))
    await client.start()
  })

  afterAll(async () => {
    await client?.stop()
    await cluster.dropReplicationSlots()
  })

  it('after a crash restart: reconnects with backoff, loses nothing, repeats nothing', async () => {
    for (let id = 1; id <= 5; id++) await cluster.query('INSERT INTO events VALUES ($1, $2)', [id, `a${id}`])
    const before = await sink.waitForCount('events', 5)
    lsnA3 = (before[2] as Transaction).lsn
    durable = lsnA3
    client.acknowledge(durable)
    await waitFor(async () => (await names.slot.confirmedFlushLsn()) === durable, 'the slot to reach A3')

    // A streamed transaction is in flight when the server dies: it dies with
    // it, and the sink must drop what it buffered of it.
    const doomed = await cluster.connect()
    doomed.on('error', () => {})
    await doomed.query('BEGIN')
    const { rows } = await doomed.query<{ xid: string }>('SELECT (txid_current() % 4294967296)::text AS xid')
    const doomedXid = Number(rows[0]?.xid)
    void doomed.query(`INSERT INTO events SELECT g, repeat(md5(g::text), 6) FROM generate_series(100001, 104000) g`).catch(() => {})
    await waitFor(() => sink.streamedBatches.some((b) => b.xid === doomedXid), 'the doomed transaction to stream')

    await stopPostgres(cluster, 'immediate')
    // While the server is down the client keeps retrying, with growing delays.
    await waitFor(() => disconnects.length >= 3, 'failed reconnect attempts while Postgres is down')
    await startPostgresAgain(cluster)
    await waitFor(() => connects.length >= 2, 'the client to reconnect')
    // Crash recovery may bring the slot back to an older position (it is saved
    // lazily), never a newer one: Postgres resends from there and the client
    // drops what it already delivered.
    expect(await names.slot.confirmedFlushLsn()).toBeLessThanOrEqual(durable)

    for (let id = 6; id <= 8; id++) await cluster.query('INSERT INTO events VALUES ($1, $2)', [id, `b${id}`])
    const after = await sink.waitForCount('events', 8)
    expect(ids(after)).toEqual([1, 2, 3, 4, 5, 6, 7, 8])
    const lsns = after.map((tx) => tx.lsn)
    for (let i = 1; i < lsns.length; i++) expect(lsns[i]).toBeGreaterThan(lsns[i - 1] ?? 0n)
    expect(await names.slot.confirmedFlushLsn()).toBeLessThanOrEqual(durable)
    // The streamed transaction was voided when the connection dropped, and never committed.
    expect(sink.streamAborts).toContainEqual({ xid: doomedXid, subxid: doomedXid, reason: 'disconnected' })
    expect(sink.transactions.some((tx) => tx.xid === doomedXid)).toBe(false)
    // Each failure was reported with the delay before the next attempt, and the delays grow.
    const delays = disconnects.map((d) => d.retryInMs)
    expect(delays.every((d) => typeof d === 'number')).toBe(true)
    expect(disconnects.every((d) => d.reason instanceof Error)).toBe(true)
    expect(Math.max(...(delays as number[]))).toBeGreaterThan(delays[0] as number)
    expect(client.connected).toBe(true)
  })

  it('a new client (our process restarted) resumes after the durable LSN, exactly once', async () => {
    await client.stop()
    expect(disconnects.at(-1)?.retryInMs).toBeUndefined()
    expect(await names.slot.confirmedFlushLsn()).toBe(durable)

    const second = startClient(cluster, names, { durableLsn: () => lsnA3 })
    await second.client.start()
    try {
      const txs = await second.sink.waitForCount('events', 5)
      // A3 itself sits at the slot's position and is resent by Postgres; the durable filter drops it.
      expect(ids(txs)).toEqual([4, 5, 6, 7, 8])
      await cluster.query('INSERT INTO events VALUES (9, $1)', ['c9'])
      expect(ids(await second.sink.waitForCount('events', 6))).toEqual([4, 5, 6, 7, 8, 9])
    } finally {
      await second.client.stop()
    }
  })

  it('a clean shutdown of Postgres completes as soon as the durable LSN catches up, and streaming resumes', async () => {
    let watermark = lsnA3
    const third = startClient(cluster, names, { durableLsn: () => watermark, statusIntervalMs: 100 })
    const thirdConnects: number[] = []
    third.client.on('connected', () => thirdConnects.push(Date.now()))
    await third.client.start()
    try {
      const txs = await third.sink.waitForCount('events', 6)
      await cluster.query('INSERT INTO events VALUES (10, $1)', ['d10'])
      const all = await third.sink.waitForCount('events', 7)
      expect(ids(all)).toEqual([4, 5, 6, 7, 8, 9, 10])
      watermark = (txs[0] as Transaction).lsn

      // A fast shutdown waits for the walsender, which waits for us to confirm
      // its last position; we do once everything received is durable.
      const started = Date.now()
      const stopping = stopPostgres(cluster, 'fast')
      await new Promise((resolve) => setTimeout(resolve, 500))
      watermark = (all.at(-1) as Transaction).lsn
      third.client.acknowledge(watermark)
      await stopping
      // Well under wal_sender_timeout (60 s), which would otherwise end the wait.
      expect(Date.now() - started).toBeLessThan(15_000)
      await startPostgresAgain(cluster)
      await waitFor(() => thirdConnects.length >= 2, 'the third client to reconnect')

      await cluster.query('INSERT INTO events VALUES (11, $1)', ['e11'])
      expect(ids(await third.sink.waitForCount('events', 8))).toEqual([4, 5, 6, 7, 8, 9, 10, 11])
    } finally {
      await third.client.stop()
    }
  })
})
