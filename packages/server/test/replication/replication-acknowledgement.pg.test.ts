import { usePostgres } from '@sluice/test-utils'
import { setTimeout as sleep } from 'node:timers/promises'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { type ReplicationClient, type SlotManager, type Transaction } from '../../src/replication/index.js'
import { type CollectingSink, setUpReplication, startClient, waitFor } from './harness.js'

const cluster = usePostgres()

describe('acknowledgement follows the durable watermark', () => {
  let client: ReplicationClient
  let sink: CollectingSink
  let slot: SlotManager
  let durable = 0n

  beforeAll(async () => {
    await cluster.query('CREATE TABLE acked (id int PRIMARY KEY)')
    await cluster.query('CREATE TABLE unpublished (id serial PRIMARY KEY, pad text)')
    const names = await setUpReplication(cluster, [['public', 'acked']])
    slot = names.slot
    // Frequent status updates give the slot every chance to overtake the watermark.
    ;({ client, sink } = startClient(cluster, names, { durableLsn: () => durable, statusIntervalMs: 100 }))
    await client.start()
  })

  afterAll(async () => {
    await client?.stop()
    await cluster.dropReplicationSlots()
  })

  it('never confirms past the durable LSN, however much arrives', async () => {
    const start = await slot.confirmedFlushLsn()
    for (let i = 1; i <= 5; i++) await cluster.query('INSERT INTO acked VALUES ($1)', [i])
    const txs = await sink.waitForCount('acked', 5)
    durable = (txs[1] as Transaction).lsn
    // Asking for more than is durable is capped at the watermark.
    client.acknowledge((txs[4] as Transaction).lsn)
    await waitFor(async () => (await slot.confirmedFlushLsn()) === durable, 'the slot to reach the durable LSN')

    // Meanwhile: more published changes, unpublished WAL (keepalives with a moving
    // WAL end) and status updates every 100 ms. The slot must stay put.
    const samples: bigint[] = []
    for (let round = 0; round < 20; round++) {
      await cluster.query('INSERT INTO unpublished (pad) SELECT repeat($1, 100) FROM generate_series(1, 50)', ['x'])
      if (round % 5 === 0) await cluster.query('INSERT INTO acked VALUES ($1)', [100 + round])
      samples.push(await slot.confirmedFlushLsn())
      await sleep(25)
    }
    expect(samples.every((lsn) => lsn === durable)).toBe(true)
    expect(start).toBeLessThanOrEqual(durable)
    expect(client.confirmedLsn).toBe(durable)
  })

  it('confirms exactly the durable LSN once it moves', async () => {
    const txs = await sink.waitForCount('acked', 9)
    // Not the last transaction: with everything durable the idle rule may go further (next test).
    durable = (txs[7] as Transaction).lsn
    expect(client.acknowledge(durable)).toBe(true)
    await waitFor(async () => (await slot.confirmedFlushLsn()) === durable, 'the slot to follow')
    expect(client.acknowledge(durable)).toBe(false)
    await sleep(300)
    expect(await slot.confirmedFlushLsn()).toBe(durable)
  })

  it('lets the slot advance over WAL nobody subscribed to once everything is durable (idle database)', async () => {
    const last = sink.transactions.at(-1) as Transaction
    durable = last.lsn
    await cluster.query('INSERT INTO unpublished (pad) SELECT repeat($1, 1000) FROM generate_series(1, 200)', ['y'])
    const { rows } = await cluster.query<{ lsn: string }>('SELECT pg_current_wal_lsn()::text AS lsn')
    const walNow = rows[0]?.lsn ?? ''
    // Keepalives carry the server's WAL end; idle, the client confirms it.
    const confirmed = await waitFor(async () => {
      const lsn = await slot.confirmedFlushLsn()
      return lsn > durable ? lsn : undefined
    }, 'the slot to pass the last transaction')
    expect(confirmed).toBeGreaterThan(durable)
    await waitFor(async () => (await slot.confirmedFlushLsn()) >= parseLsnText(walNow), 'the slot to reach the WAL position')
    // And a change after that is still delivered (nothing was skipped).
    await cluster.query('INSERT INTO acked VALUES (1000)')
    const txs = await sink.waitForCount('acked', 10)
    expect((txs[9] as Transaction).lsn).toBeGreaterThan(confirmed)
  })

  it('reports the WAL retained for the slot', async () => {
    const info = await slot.info()
    expect(info?.retainedWalBytes).toBeGreaterThanOrEqual(0n)
    expect(info?.active).toBe(true)
    expect(await slot.retainedWalBytes()).toBe(info?.retainedWalBytes ?? -1n)
  })
})

function parseLsnText(text: string): bigint {
  const [high = '0', low = '0'] = text.split('/')
  return (BigInt(`0x${high}`) << 32n) | BigInt(`0x${low}`)
}
