import { setTimeout as sleep } from 'node:timers/promises'
import { usePostgres } from '@sluice/test-utils'
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest'
import {
  type DisconnectedInfo,
  type PublicationManager,
  type ReplicationClient,
  ReplicationError,
  type SlotManager,
  type Transaction,
} from '../../src/replication/index.js'
import { type TcpProxy, setUpReplication, startClient, startProxy, waitFor } from './harness.js'

const cluster = usePostgres()

const ids = (txs: readonly Transaction[]): number[] =>
  txs.flatMap((tx) => tx.changes.map((c) => (c.kind === 'insert' ? Number(c.newTuple[0]) : -1)))

let nextId = 0
async function insert(table: string, count: number): Promise<number[]> {
  const inserted: number[] = []
  for (let i = 0; i < count; i++) {
    const id = ++nextId
    await cluster.query(`INSERT INTO ${table} VALUES ($1)`, [id])
    inserted.push(id)
  }
  return inserted
}

describe('the replication connection', () => {
  let names: { slot: SlotManager; publication: PublicationManager }
  let proxy: TcpProxy
  let client: ReplicationClient | undefined

  beforeAll(async () => {
    await cluster.query('CREATE TABLE rows_a (id int PRIMARY KEY)')
    names = await setUpReplication(cluster, [['public', 'rows_a']])
    proxy = await startProxy(cluster.port)
  })

  afterEach(async () => {
    await client?.stop()
    client = undefined
  })

  afterAll(async () => {
    await proxy?.close()
    await cluster.dropReplicationSlots()
  })

  function through(proxyPort: number): string {
    return cluster.url.replace(`:${cluster.port}/`, `:${proxyPort}/`)
  }

  it('survives a dropped link: reconnects and delivers each transaction once', async () => {
    const started = startClient(cluster, names, { durableLsn: () => 0n, connection: through(proxy.port) })
    client = started.client
    const disconnects: DisconnectedInfo[] = []
    client.on('disconnected', (d) => disconnects.push(d))
    await client.start()
    const first = await insert('rows_a', 3)
    await started.sink.waitForCount('rows_a', 3)
    proxy.dropAll()
    const second = await insert('rows_a', 2)
    const txs = await started.sink.waitForCount('rows_a', 5)
    // Durable is 0: Postgres resends everything after reconnecting; the client drops what it delivered.
    expect(ids(txs)).toEqual([...first, ...second])
    expect(disconnects.length).toBeGreaterThanOrEqual(1)
    expect(disconnects[0]?.retryInMs).toBeGreaterThanOrEqual(0)
    await sleep(200)
    expect(ids(started.sink.on('rows_a'))).toEqual([...first, ...second])
  })

  it('notices a silent dead link through its liveness check', async () => {
    const started = startClient(cluster, names, {
      durableLsn: () => 0n,
      connection: through(proxy.port),
      statusIntervalMs: 100,
      livenessTimeoutMs: 600,
    })
    client = started.client
    const disconnects: DisconnectedInfo[] = []
    client.on('disconnected', (d) => disconnects.push(d))
    await client.start()
    await sleep(300)
    // The slot may still have been held by the previous test's walsender (55006 at the first attempt):
    // what is judged is a live connection going silent.
    await waitFor(() => client?.connected, 'a live connection')
    disconnects.length = 0
    proxy.freeze()
    const reason = await waitFor(() => disconnects[0]?.reason, 'the liveness check to fire')
    expect((reason as ReplicationError).code).toBe('connection_lost')
    expect(reason.message).toMatch(/No message from Postgres/)
    await waitFor(() => client?.connected, 'a new connection')
    const more = await insert('rows_a', 1)
    // Durable is 0, so the new connection first replays the earlier rows.
    const txs = await started.sink.waitForCount('rows_a', nextId)
    expect(ids(txs)).toEqual(Array.from({ length: nextId }, (_, i) => i + 1))
    expect(ids(txs).slice(-1)).toEqual(more)
  })

  it('does not count the time a slow sink or a pause held the socket as silence from Postgres', async () => {
    const started = startClient(cluster, names, {
      durableLsn: () => 0n,
      statusIntervalMs: 100,
      livenessTimeoutMs: 600,
    })
    client = started.client
    const disconnects: DisconnectedInfo[] = []
    client.on('disconnected', (d) => disconnects.push(d))
    const record = started.sink.onTransaction.bind(started.sink)
    let slow = false
    started.sink.onTransaction = async (tx: Transaction) => {
      // Longer than the liveness timeout: the socket is not read meanwhile.
      if (slow) await sleep(1500)
      record(tx)
    }
    await client.start()
    await started.sink.waitForCount('rows_a', nextId)
    slow = true
    const held = await insert('rows_a', 1)
    await waitFor(() => ids(started.sink.on('rows_a')).includes(held[0]!), 'the slow sink to take the row')
    slow = false
    client.pause()
    await sleep(1500)
    client.resume()
    const after = await insert('rows_a', 1)
    await waitFor(() => ids(started.sink.on('rows_a')).includes(after[0]!), 'the row after the pause')
    // Several status ticks after each hold, with Postgres answering each.
    await sleep(500)
    expect(disconnects).toEqual([])
  })

  it('does not count a blocked event loop as silence from Postgres', async () => {
    const started = startClient(cluster, names, {
      durableLsn: () => 0n,
      statusIntervalMs: 100,
      livenessTimeoutMs: 600,
    })
    client = started.client
    const disconnects: DisconnectedInfo[] = []
    client.on('disconnected', (d) => disconnects.push(d))
    await client.start()
    await started.sink.waitForCount('rows_a', nextId)
    await sleep(300)
    // One synchronous stretch longer than the liveness timeout (a server answering thousands of requests
    // in one go on a starved CPU): Postgres's answers wait unread in the socket meanwhile.
    const until = Date.now() + 1500
    while (Date.now() < until) {
      // busy on purpose
    }
    await sleep(500)
    const after = await insert('rows_a', 1)
    await waitFor(() => ids(started.sink.on('rows_a')).includes(after[0]!), 'the row after the block')
    expect(disconnects).toEqual([])
  })

  it('stops with protocol_violation on a copy message it does not know, instead of skipping it', async () => {
    const started = startClient(cluster, names, { durableLsn: () => 0n, connection: through(proxy.port) })
    client = started.client
    await client.start()
    const before = await insert('rows_a', 1)
    await started.sink.waitForCount('rows_a', nextId)
    // CopyData ('d', length) holding a message of type 'x': neither XLogData ('w') nor a keepalive ('k').
    const bogus = Buffer.from([0x64, 0, 0, 0, 9, 0x78, 1, 2, 3, 4])
    proxy.injectToClients(bogus)
    const reason = await client.stopped
    expect(reason).toBeInstanceOf(ReplicationError)
    expect((reason as ReplicationError).code).toBe('protocol_violation')
    expect(reason?.message).toMatch(/copy message Sluice does not know \(type 120, 5 bytes\)/)
    expect(ids(started.sink.on('rows_a')).slice(-1)).toEqual(before)
  })

  it('pause() holds changes back until resume()', async () => {
    const started = startClient(cluster, names, { durableLsn: () => 0n })
    client = started.client
    await client.start()
    const seen = (await started.sink.waitForCount('rows_a', nextId)).length
    client.pause()
    expect(client.paused).toBe(true)
    const held = await insert('rows_a', 3)
    await sleep(500)
    expect(started.sink.on('rows_a')).toHaveLength(seen)
    client.resume()
    const txs = await started.sink.waitForCount('rows_a', seen + 3)
    expect(ids(txs).slice(-3)).toEqual(held)
  })

  it('waits for a slow sink, in order, without dropping anything', async () => {
    const started = startClient(cluster, names, { durableLsn: () => 0n })
    client = started.client
    const delivered: number[] = []
    let inFlight = 0
    let maxInFlight = 0
    const record = started.sink.onTransaction.bind(started.sink)
    started.sink.onTransaction = async (tx: Transaction) => {
      inFlight++
      maxInFlight = Math.max(maxInFlight, inFlight)
      await sleep(5)
      delivered.push(...ids([tx]))
      record(tx)
      inFlight--
    }
    await client.start()
    const batch = await insert('rows_a', 40)
    await waitFor(() => delivered.includes(batch.at(-1) ?? -1), 'the slow sink to catch up')
    expect(maxInFlight).toBe(1)
    expect(delivered.slice(-40)).toEqual(batch)
  })

  it('stop() confirms the durable position, reports the reason and releases the slot', async () => {
    const reader = startClient(cluster, names, { durableLsn: () => 0n })
    await reader.client.start()
    const txs = await reader.sink.waitForCount('rows_a', nextId)
    await reader.client.stop()
    const durable = (txs.at(-2) as Transaction).lsn

    const started = startClient(cluster, names, { durableLsn: () => durable })
    client = started.client
    const disconnects: DisconnectedInfo[] = []
    client.on('disconnected', (d) => disconnects.push(d))
    await client.start()
    await client.stop()
    expect(disconnects).toHaveLength(1)
    expect(disconnects[0]?.retryInMs).toBeUndefined()
    expect((disconnects[0]?.reason as ReplicationError).code).toBe('client_stopped')
    expect(await client.stopped).toBeUndefined()
    expect(client.connected).toBe(false)
    const slot = await waitFor(async () => {
      const info = await names.slot.info()
      return info?.active === false ? info : undefined
    }, 'the slot to be released')
    expect(slot.confirmedFlushLsn).toBe(durable)
    // Stopping twice, or starting a stopped client, is harmless / refused.
    await client.stop()
    await expect(client.start()).rejects.toMatchObject({ code: 'already_started' })
  })
})
