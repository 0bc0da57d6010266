import { type AddressInfo, createServer, type Socket } from 'node:net'
import { setTimeout as sleep } from 'node:timers/promises'
import { usePostgres } from '@sluice/test-utils'
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest'
import { type DisconnectedInfo, type PublicationManager, ReplicationClient, ReplicationError, type SlotManager, type Transaction } from '../../src/replication/index.js'
import { CollectingSink, setUpReplication, startClient, waitFor } from './harness.js'

/** How the client retries (a failure that repeats on every connection) and stops (in the middle of a replay, or of a sink call). */

const cluster = usePostgres()

/** A sink that refuses every transaction touching `table`, as one with a bug on a certain row would. */
class RefusingSink extends CollectingSink {
  refused = 0
  constructor(private readonly table: string) {
    super()
  }
  override onTransaction(tx: Transaction): void {
    if (tx.changes.some((c) => c.kind !== 'truncate' && c.relation.table === this.table)) {
      this.refused++
      throw new Error(`refusing a transaction on ${this.table}`)
    }
    super.onTransaction(tx)
  }
}

describe('retrying the replication connection', () => {
  let names: { slot: SlotManager; publication: PublicationManager }
  let client: ReplicationClient | undefined

  beforeAll(async () => {
    await cluster.query('CREATE TABLE retry_ok (id int PRIMARY KEY)')
    await cluster.query('CREATE TABLE retry_bad (id int PRIMARY KEY)')
    names = await setUpReplication(cluster, [
      ['public', 'retry_ok'],
      ['public', 'retry_bad'],
    ])
  })

  afterEach(async () => {
    await client?.stop()
    client = undefined
  })

  afterAll(async () => {
    await cluster.dropReplicationSlots()
  })

  it('a transaction the sink fails on every time backs off further at each try instead of retrying at the first delay for ever', async () => {
    const sink = new RefusingSink('retry_bad')
    client = startClient(cluster, names, { durableLsn: () => 0n, sink, backoff: { initialMs: 20, maxMs: 5_000, multiplier: 2 } }).client
    const disconnects: DisconnectedInfo[] = []
    client.on('disconnected', (d) => disconnects.push(d))
    await client.start()
    await cluster.query('INSERT INTO retry_bad VALUES (1)')
    await waitFor(() => disconnects.length >= 5, 'five failed connections')
    const delays = disconnects.slice(0, 5).map((d) => d.retryInMs ?? -1)
    // Equal jitter: try n waits between half and all of 20 ms × 2^n.
    delays.forEach((delay, n) => expect(delay).toBeGreaterThanOrEqual((20 * 2 ** n) / 2))
    expect(sink.refused).toBeGreaterThanOrEqual(5)
    // Connections that got nowhere do not end the outage health measures: it runs from before the first.
    // (Read between connections: while one is up it says none is down.)
    const since = await waitFor(() => client!.disconnectedSince, 'the outage')
    await waitFor(() => disconnects.length >= 6, 'a sixth failed connection')
    expect(await waitFor(() => client!.disconnectedSince, 'the outage')).toBe(since)
  })

  it('a connection that delivers something resets the backoff: a failure after progress retries soon', async () => {
    let refuse = true
    const sink = new RefusingSink('retry_bad')
    const original = sink.onTransaction.bind(sink)
    sink.onTransaction = (tx) => {
      if (refuse) original(tx)
      else CollectingSink.prototype.onTransaction.call(sink, tx)
    }
    client = startClient(cluster, names, { durableLsn: () => 0n, sink, backoff: { initialMs: 20, maxMs: 5_000, multiplier: 2 } }).client
    const disconnects: DisconnectedInfo[] = []
    client.on('disconnected', (d) => disconnects.push(d))
    await client.start()
    await cluster.query('INSERT INTO retry_bad VALUES (2)')
    await waitFor(() => disconnects.length >= 4, 'four failed connections')
    // Now the sink takes it: that connection gets past it, so the next failure starts the schedule again.
    refuse = false
    await waitFor(() => sink.on('retry_bad').length > 0, 'the transaction to be taken')
    refuse = true
    const before = disconnects.length
    await cluster.query('INSERT INTO retry_bad VALUES (3)')
    await waitFor(() => disconnects.length > before, 'the next failure')
    expect(disconnects[before]!.retryInMs).toBeLessThanOrEqual(20)
  })

  it('stop() at any moment of a client that reconnects every few milliseconds ends it (connecting, streaming or waiting)', async () => {
    await cluster.query('INSERT INTO retry_bad VALUES (100) ON CONFLICT DO NOTHING')
    const rounds = process.env.SOAK === '1' ? 300 : 25
    for (let round = 0; round < rounds; round++) {
      const sink = new RefusingSink('retry_bad')
      const stopping = startClient(cluster, names, { durableLsn: () => 0n, sink, backoff: { initialMs: 1, maxMs: 4, multiplier: 2 } }).client
      stopping.start().catch(() => {})
      await sleep(Math.floor(Math.random() * 120))
      const outcome = await Promise.race([stopping.stop().then(() => 'stopped'), sleep(15_000).then(() => `still running in round ${round}`)])
      expect(outcome).toBe('stopped')
    }
  }, 300_000)

  it('stop() while the sink rolls back for a replay ends the client instead of opening a new connection', async () => {
    let entered!: () => void
    const inRollback = new Promise<void>((resolve) => (entered = resolve))
    let finish!: () => void
    const rollback = new Promise<void>((resolve) => (finish = resolve))
    const started = startClient(cluster, names, {
      durableLsn: () => 0n,
      beforeReplay: async () => {
        entered()
        await rollback
      },
    })
    client = started.client
    await client.start()
    await cluster.query('INSERT INTO retry_ok VALUES (1)')
    await started.sink.waitForCount('retry_ok', 1)
    client.replayFromDurable(new Error('a flush failed'))
    await inRollback
    const stopping = client.stop()
    finish()
    const outcome = await Promise.race([stopping.then(() => 'stopped'), sleep(10_000).then(() => 'still running')])
    expect(outcome).toBe('stopped')
    expect(client.connected).toBe(false)
    // Nothing holds the slot: no connection was opened after the stop.
    const slot = await waitFor(async () => {
      const info = await names.slot.info()
      return info?.active === false ? info : undefined
    }, 'the slot to be released')
    expect(slot.active).toBe(false)
  })
})

describe('stopping the client', () => {
  let names: { slot: SlotManager; publication: PublicationManager }

  beforeAll(async () => {
    await cluster.query('CREATE TABLE stop_rows (id int PRIMARY KEY)')
    names = await setUpReplication(cluster, [['public', 'stop_rows']])
  })

  afterAll(async () => {
    await cluster.dropReplicationSlots()
  })

  it("waits for the sink's call under way to finish before it resolves (whoever stopped it then closes what the sink writes to)", async () => {
    const events: string[] = []
    let release!: () => void
    const held = new Promise<void>((resolve) => (release = resolve))
    let arrived!: () => void
    const inSink = new Promise<void>((resolve) => (arrived = resolve))
    class SlowSink extends CollectingSink {
      override async onTransaction(tx: Transaction): Promise<void> {
        events.push('sink started')
        arrived()
        await held
        super.onTransaction(tx)
        events.push('sink finished')
      }
    }
    const { client } = startClient(cluster, names, { durableLsn: () => 0n, sink: new SlowSink() })
    await client.start()
    await cluster.query('INSERT INTO stop_rows VALUES (1)')
    await inSink
    const stopped = client.stop().then(() => events.push('stopped'))
    await sleep(300)
    expect(events).toEqual(['sink started'])
    release()
    await stopped
    expect(events).toEqual(['sink started', 'sink finished', 'stopped'])
  })

  it('stop() while a connection is being opened ends the client (pg never settles a connect whose client is ended)', async () => {
    // A server that accepts and never answers: the client waits in its startup for as long as it likes.
    const sockets: Socket[] = []
    const silent = createServer((socket) => sockets.push(socket))
    await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve))
    try {
      const client = new ReplicationClient({
        connection: { host: '127.0.0.1', port: (silent.address() as AddressInfo).port, user: 'nobody', database: 'none' },
        slotName: names.slot.name,
        publicationNames: [names.publication.name],
        sink: new CollectingSink(),
        durableLsn: () => 0n,
      })
      const started = client.start().then(
        () => 'connected',
        (error: unknown) => error,
      )
      await waitFor(() => sockets.length > 0, 'the connection to be accepted')
      const outcome = await Promise.race([client.stop().then(() => 'stopped'), sleep(10_000).then(() => 'still running')])
      expect(outcome).toBe('stopped')
      const reason = await started
      expect(reason).toBeInstanceOf(ReplicationError)
      expect((reason as ReplicationError).code).toBe('client_stopped')
    } finally {
      for (const socket of sockets) socket.destroy()
      silent.close()
    }
  })
})
