import { setTimeout as sleep } from 'node:timers/promises'
import { parseLsn } from '@sluice/protocol'
import { usePostgres } from '@sluice/test-utils'
import pg from 'pg'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import {
  SnapshotError,
  buildSnapshotQuery,
  encodeSnapshotEnd,
  isFullXidVisible,
  isVisibleInSnapshot,
  loadTable,
  runSnapshot,
} from '../../../src/shapes/index.js'
import type { SnapshotResult, SnapshotSink, TableInfo } from '../../../src/shapes/index.js'
import { setUpReplication, startClient, waitFor } from '../../replication/harness.js'

const cluster = usePostgres()
const pools: pg.Pool[] = []
let appCounter = 0
const decoder = new TextDecoder()

/** A pool with its own application_name, so a test can find its backends in pg_stat_activity. */
function newPool(options: pg.PoolConfig = {}): pg.Pool & { app: string } {
  const app = `snapshot_test_${++appCounter}`
  const pool = new pg.Pool({ connectionString: cluster.url, application_name: app, ...options }) as pg.Pool & { app: string }
  pool.app = app
  pool.on('error', () => {})
  pools.push(pool)
  return pool
}

/** Nothing is checked out of the pool and nobody waits for it. */
function expectReleased(pool: pg.Pool): void {
  expect(pool.totalCount - pool.idleCount, 'checked-out connections').toBe(0)
  expect(pool.waitingCount).toBe(0)
}

async function backendsOf(app: string): Promise<Array<{ state: string; query: string; wait: string | null }>> {
  const { rows } = await cluster.query<{ state: string; query: string; wait: string | null }>(
    'SELECT state, query, wait_event AS wait FROM pg_stat_activity WHERE application_name = $1 AND pid <> pg_backend_pid()',
    [app],
  )
  return rows
}

async function mustLoad(name: string, schema = 'public'): Promise<TableInfo> {
  const info = await loadTable(cluster, { schema, name })
  if (info === undefined) throw new Error(`${schema}.${name} did not load`)
  return info
}

async function errorOf(promise: Promise<unknown>): Promise<SnapshotError> {
  const error = await promise.then(
    () => {
      throw new Error('expected a rejection')
    },
    (e: unknown) => e,
  )
  expect(error).toBeInstanceOf(SnapshotError)
  return error as SnapshotError
}

class Collect implements SnapshotSink {
  readonly batches: string[][] = []
  starts = 0
  start(): void {
    this.starts++
  }
  rows(lines: Uint8Array[]): void {
    expect(this.starts).toBe(1)
    this.batches.push(lines.map((line) => decoder.decode(line)))
  }
  get lines(): string[] {
    return this.batches.flat()
  }
}

beforeAll(async () => {
  await cluster.query(`
    CREATE TABLE items (id int PRIMARY KEY, title text);
    INSERT INTO items SELECT i, 'item ' || i FROM generate_series(1, 2500) i;
    CREATE SEQUENCE a_sequence;
  `)
})

afterAll(async () => {
  await Promise.all(pools.map((pool) => pool.end().catch(() => {})))
})

describe('runSnapshot', () => {
  it('fixes the snapshot first, reports it and the insert LSN, and streams every row', async () => {
    const pool = newPool({ max: 1 })
    const info = await mustLoad('items')
    const before = parseLsn((await cluster.query<{ lsn: string }>('SELECT pg_current_wal_insert_lsn()::text AS lsn')).rows[0]?.lsn as string)
    let started: unknown
    const sink = new Collect()
    const result = await runSnapshot(pool, { table: info }, {
      start: (s) => {
        started = s
        sink.start()
      },
      rows: (lines) => sink.rows(lines),
    })
    expect(result.rows).toBe(2500)
    expect(started).toEqual({ snapshot: result.snapshot, insertLsn: result.insertLsn })
    expect(result.insertLsn).toBeGreaterThanOrEqual(before)
    expect(result.snapshot.xmin).toBeLessThanOrEqual(result.snapshot.xmax)
    const { rows } = await cluster.query<{ xid: string }>('SELECT pg_current_xact_id()::text AS xid')
    expect(BigInt(rows[0]?.xid as string)).toBeGreaterThanOrEqual(result.snapshot.xmax)
    // The first fetch is small (row sizes unknown yet), then a batch at a time.
    expect(sink.batches.map((b) => b.length)).toEqual([16, 1000, 1000, 484])
    expect(new Set(sink.lines.map((l) => (JSON.parse(l) as { key: string }).key)).size).toBe(2500)
    expect(JSON.parse(decoder.decode(encodeSnapshotEnd(result.snapshot)))).toEqual({
      headers: {
        control: 'snapshot-end',
        xmin: String(result.snapshot.xmin),
        xmax: String(result.snapshot.xmax),
        xip_list: result.snapshot.xip.map(String),
      },
    })
    expectReleased(pool)
    expect(await backendsOf(pool.app)).toEqual([expect.objectContaining({ state: 'idle', query: 'COMMIT' })])
  })

  it('sizes batches by rows, never calls the sink with an empty batch, and shrinks batches of large rows', async () => {
    const pool = newPool({ max: 1 })
    const info = await mustLoad('items')
    const sizes = async (request: Partial<Parameters<typeof runSnapshot>[1]>): Promise<number[]> => {
      const sink = new Collect()
      await runSnapshot(pool, { table: info, ...request }, sink)
      return sink.batches.map((b) => b.length)
    }
    expect(await sizes({ batchRows: 7, where: '"id" <= 20' })).toEqual([7, 7, 6])
    expect(await sizes({ batchRows: 1000, where: '"id" <= 2000' })).toEqual([16, 1000, 984])
    expect(await sizes({ where: 'FALSE' })).toEqual([])

    await cluster.query(`CREATE TABLE big_rows (id int PRIMARY KEY, blob text); INSERT INTO big_rows SELECT i, repeat('x', 10000) FROM generate_series(1, 60) i`)
    const big = await mustLoad('big_rows')
    const sink = new Collect()
    await runSnapshot(pool, { table: big, batchRows: 20, batchBytes: 50_000 }, sink)
    // The first fetch knows nothing about row sizes, so it is small; after it, about 50 kB (4 rows of 10 kB) at a time.
    expect(sink.batches.map((b) => b.length)).toEqual([16, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4])
    await expect(runSnapshot(pool, { table: big, batchRows: 0 }, sink)).rejects.toMatchObject({ code: 'invalid_request' })
    await expect(runSnapshot(pool, { table: big, statementTimeoutMs: -1 }, sink)).rejects.toMatchObject({ code: 'invalid_request' })
    expectReleased(pool)
  })

  it('never holds more than one batch of large rows: a one-round-trip read takes at most 100 rows, and a stream sizes its fetches by the largest row', async () => {
    await cluster.query(`CREATE TABLE documents (id int PRIMARY KEY, body text); INSERT INTO documents SELECT i, repeat(md5(i::text), 6400) FROM generate_series(1, 150) i`)
    const pool = newPool({ max: 1 })
    const sink = new Collect()
    // 150 rows of 200 kB: before, all of them in one round trip (30 MB at once, and a table of megabyte rows, a gigabyte).
    const result = await runSnapshot(pool, { table: await mustLoad('documents'), batchBytes: 4 * 1024 * 1024 }, sink)
    expect(result.rows).toBe(150)
    const sizes = sink.batches.map((b) => b.length)
    expect(sizes[0]).toBe(16)
    expect(Math.max(...sizes.slice(1))).toBe(20)

    // One large row among small ones shrinks the fetch after it, not every later one.
    await cluster.query(`CREATE TABLE mostly_small (id int PRIMARY KEY, body text); INSERT INTO mostly_small SELECT i, CASE WHEN i = 20 THEN repeat('x', 2000000) ELSE 'small' END FROM generate_series(1, 3000) i`)
    const mixed = new Collect()
    await runSnapshot(pool, { table: await mustLoad('mostly_small'), batchBytes: 4 * 1024 * 1024 }, mixed)
    const mixedSizes = mixed.batches.map((b) => b.length)
    expect(mixedSizes.reduce((a, b) => a + b, 0)).toBe(3000)
    expect(mixedSizes.length).toBeLessThan(10)
    expectReleased(pool)
  })

  it('runs a query built beforehand (text and values)', async () => {
    const pool = newPool({ max: 1 })
    const info = await mustLoad('items')
    const text = buildSnapshotQuery(info, { where: '"id" BETWEEN $1 AND $2', columns: ['id'] })
    const sink = new Collect()
    const result = await runSnapshot(pool, { table: info, text, values: ['10', '12'] }, sink)
    expect(result.rows).toBe(3)
    expect(sink.lines.map((l) => (JSON.parse(l) as { value: unknown }).value)).toEqual([{ id: '10' }, { id: '11' }, { id: '12' }])
  })

  it('takes a shape of at most one batch in one round trip, and a bigger one through the cursor, with the same rows', async () => {
    const pool = newPool({ max: 1 })
    const queries: string[] = []
    pool.on('connect', (client) => {
      const query = client.query.bind(client) as (...args: unknown[]) => unknown
      ;(client as unknown as { query: (...args: unknown[]) => unknown }).query = (...args: unknown[]) => {
        queries.push(typeof args[0] === 'string' ? args[0] : 'cursor')
        return query(...args)
      }
    })
    const info = await mustLoad('items')
    const take = async (batchRows: number, where?: string): Promise<{ lines: string[]; queries: string[]; result: SnapshotResult }> => {
      queries.length = 0
      const sink = new Collect()
      const result = await runSnapshot(pool, { table: info, where, batchRows }, sink)
      return { lines: sink.lines, queries: [...queries], result }
    }
    const small = await take(10, '"id" <= 10')
    expect(small.queries).toHaveLength(1)
    expect(small.queries[0]).toMatch(/^BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY;.* LIMIT 11; COMMIT$/s)
    expect(small.result.rows).toBe(10)
    expect(await backendsOf(pool.app)).toEqual([expect.objectContaining({ state: 'idle' })])
    const empty = await take(10, 'FALSE')
    expect(empty.queries).toHaveLength(1)
    expect(empty.lines).toEqual([])
    // One row more than a batch: the cursor, from a snapshot of its own.
    const over = await take(10, '"id" <= 11')
    expect(over.queries.slice(1)).toEqual([expect.stringMatching(/^BEGIN/), 'cursor', 'COMMIT'])
    expect(over.result.rows).toBe(11)
    // The same rows either way.
    const streamed = await take(3, '"id" <= 10')
    expect(streamed.queries.slice(1)).toEqual([expect.stringMatching(/^BEGIN/), 'cursor', 'COMMIT'])
    expect(streamed.lines).toEqual(small.lines)
    // With parameters, or a semicolon (even quoted), the cursor at once.
    queries.length = 0
    await runSnapshot(pool, { table: info, where: '"id" <= $1', params: ['5'] }, new Collect())
    expect(queries).toEqual([expect.stringMatching(/^BEGIN/), 'cursor', 'COMMIT'])
    queries.length = 0
    const semicolon = new Collect()
    await runSnapshot(pool, { table: info, where: `"title" <> 'x;y' AND "id" = 1` }, semicolon)
    expect(queries).toEqual([expect.stringMatching(/^BEGIN/), 'cursor', 'COMMIT'])
    expect(semicolon.lines).toHaveLength(1)
    expectReleased(pool)
  })

  it('reads a backslash in the where clause as standard SQL even where the session says otherwise', async () => {
    await cluster.query(`CREATE TABLE slashes (id int PRIMARY KEY, title text); INSERT INTO slashes VALUES (1, 'a\\b'), (2, 'ab')`)
    const pool = newPool({ max: 1, options: '-c standard_conforming_strings=off -c escape_string_warning=off' })
    const sink = new Collect()
    const result = await runSnapshot(pool, { table: await mustLoad('slashes'), where: `"title" = 'a\\b'` }, sink)
    expect(result.rows).toBe(1)
    expect(JSON.parse(sink.lines[0]!)).toMatchObject({ value: { id: '1', title: 'a\\b' } })
  })

  it('streams 200k rows in batches with bounded memory', async () => {
    await cluster.query(`CREATE TABLE many (id int PRIMARY KEY, payload text); INSERT INTO many SELECT i, repeat(md5(i::text), 12) FROM generate_series(1, 200000) i`)
    const pool = newPool({ max: 1 })
    const info = await mustLoad('many')
    let batches = 0
    let bytes = 0
    let maxHeap = 0
    let stateAtFirstBatch: unknown
    const baseline = process.memoryUsage().heapUsed
    const result = await runSnapshot(pool, { table: info }, {
      rows: async (lines) => {
        // Rows arrive while the query still runs (the backend is mid-query, fetching or waiting for the next fetch).
        if (batches++ === 0) stateAtFirstBatch = (await backendsOf(pool.app))[0]?.state
        for (const line of lines) bytes += line.length
        if (batches % 10 === 0) {
          maxHeap = Math.max(maxHeap, process.memoryUsage().heapUsed)
          await sleep(0)
        }
      },
    })
    expect(result.rows).toBe(200_000)
    expect(batches).toBe(201)
    // Over 80 MB of lines went through; a buffered result would have held all of it (twice: strings and bytes).
    expect(bytes).toBeGreaterThan(80_000_000)
    expect(maxHeap - baseline).toBeLessThan(48 * 1024 * 1024)
    expect(stateAtFirstBatch).toBe('active')
    expectReleased(pool)
  })
})

describe('runSnapshot with concurrent writers', () => {
  it('sees exactly the transactions its snapshot says are visible, all committed below the insert LSN', async () => {
    await cluster.query('CREATE TABLE events (id bigserial PRIMARY KEY, writer int, note text); INSERT INTO events (writer, note) SELECT 0, $$before$$ FROM generate_series(1, 500)')
    const names = await setUpReplication(cluster, [['public', 'events']])
    const { client: replication, sink: replicated } = startClient(cluster, names, { durableLsn: () => 0n })
    await replication.start()
    const pool = newPool({ max: 1 })
    const info = await mustLoad('events')

    interface Written {
      readonly xid: bigint
      readonly ids: string[]
    }
    const written: Written[] = []
    let stop = false
    const writers = await Promise.all([1, 2, 3].map(() => cluster.connect()))
    const loops = writers.map(async (client, w) => {
      while (!stop) {
        await client.query('BEGIN')
        const { rows } = await client.query<{ id: string }>('INSERT INTO events (writer, note) SELECT $1, $$x$$ FROM generate_series(1, 3) RETURNING id::text', [w + 1])
        const xid = (await client.query<{ xid: string }>('SELECT pg_current_xact_id()::text AS xid')).rows[0]?.xid as string
        if (w === 2 && written.length % 5 === 0) {
          await client.query('ROLLBACK')
          continue
        }
        await client.query('COMMIT')
        written.push({ xid: BigInt(xid), ids: rows.map((r) => r.id) })
        await sleep(1)
      }
    })

    // A transaction open across the start of the snapshot, committed just after it is taken.
    const open = await cluster.connect()
    await open.query('BEGIN')
    const openIds = (await open.query<{ id: string }>(`INSERT INTO events (writer, note) VALUES (9, 'open') RETURNING id::text`)).rows.map((r) => r.id)
    const openXid = BigInt((await open.query<{ xid: string }>('SELECT pg_current_xact_id()::text AS xid')).rows[0]?.xid as string)

    await sleep(300)
    const seen = new Set<string>()
    let result: SnapshotResult
    try {
      result = await runSnapshot(pool, { table: info, batchRows: 50 }, {
        start: async () => {
          await open.query('COMMIT')
        },
        rows: async (lines) => {
          for (const line of lines) seen.add((JSON.parse(decoder.decode(line)) as { value: { id: string } }).value.id)
          await sleep(2)
        },
      })
      await sleep(200)
    } finally {
      stop = true
      await Promise.all(loops)
      await Promise.all(writers.map((w) => w.end()))
      await open.end()
    }
    try {
      const { snapshot, insertLsn } = result

      // The open transaction was running when the snapshot was taken.
      expect(snapshot.xip).toContain(openXid)
      expect(isFullXidVisible(snapshot, openXid)).toBe(false)
      for (const id of openIds) expect(seen.has(id)).toBe(false)

      // Every writer transaction: its rows are in the snapshot exactly when the snapshot says it is visible,
      // and the 32-bit form of its xid (what pgoutput carries) classifies the same way.
      let visible = 0
      let invisible = 0
      for (const tx of written) {
        const isVisible = isFullXidVisible(snapshot, tx.xid)
        expect(isVisibleInSnapshot(snapshot, Number(tx.xid & 0xffff_ffffn))).toBe(isVisible)
        for (const id of tx.ids) expect(seen.has(id), `row ${id} of xid ${tx.xid}`).toBe(isVisible)
        if (isVisible) visible++
        else invisible++
      }
      expect(visible).toBeGreaterThan(0)
      expect(invisible).toBeGreaterThan(0)
      expect([...seen].filter((id) => Number(id) <= 500)).toHaveLength(500)

      // The replication stream: every transaction visible in the snapshot committed below the insert LSN,
      // and the snapshot plus the invisible transactions' rows are every row, each once.
      const total = written.length + 1
      const txs = await replicated.waitForCount('events', total, 30_000)
      expect(txs).toHaveLength(total)
      const all = new Set(seen)
      let below = 0
      for (const tx of txs) {
        const isVisible = isVisibleInSnapshot(snapshot, tx.xid)
        if (isVisible) expect(tx.lsn).toBeLessThan(insertLsn)
        if (tx.lsn < insertLsn) below++
        for (const change of tx.changes) {
          if (change.kind !== 'insert') throw new Error('expected inserts only')
          const id = change.newTuple[0] as string
          expect(seen.has(id), `row ${id}`).toBe(isVisible)
          if (!isVisible) {
            expect(all.has(id)).toBe(false)
            all.add(id)
          }
        }
      }
      expect(below).toBeGreaterThanOrEqual(visible)
      const { rows } = await cluster.query<{ n: string }>('SELECT count(*)::text AS n FROM events')
      expect(all.size).toBe(Number(rows[0]?.n))
    } finally {
      await replication.stop()
      // Terminates the walsender if it still holds the slot.
      await cluster.dropReplicationSlots()
    }
    expectReleased(pool)
  }, 120_000)
})

describe('runSnapshot: aborts', () => {
  it('does not take a connection when the signal is already aborted', async () => {
    const pool = newPool({ max: 1 })
    const error = await errorOf(runSnapshot(pool, { table: await mustLoad('items'), signal: AbortSignal.abort(new Error('gone')) }, new Collect()))
    expect(error.code).toBe('aborted')
    expect(error.message).toMatch(/gone/)
    expect(pool.totalCount).toBe(0)
  })

  it('cancels a running query and closes the connection', async () => {
    const pool = newPool({ max: 1 })
    const controller = new AbortController()
    const running = runSnapshot(pool, { table: await mustLoad('items'), where: '(SELECT pg_sleep(30)) IS NOT NULL', signal: controller.signal }, new Collect())
    await waitFor(async () => (await backendsOf(pool.app)).some((b) => b.state === 'active' && b.wait === 'PgSleep'), 'the query to run')
    const abortedAt = Date.now()
    controller.abort()
    const error = await errorOf(running)
    expect(error.code).toBe('aborted')
    expect(error.retryable).toBe(false)
    expect(Date.now() - abortedAt).toBeLessThan(1000)
    expectReleased(pool)
    await waitFor(async () => (await backendsOf(pool.app)).length === 0, 'the backend to go', 5000)
    // The pool is fine afterwards.
    expect((await runSnapshot(pool, { table: await mustLoad('items') }, new Collect())).rows).toBe(2500)
  })

  it('ends the transaction when aborted while the sink holds a batch', async () => {
    const pool = newPool({ max: 1 })
    const controller = new AbortController()
    let batches = 0
    const running = runSnapshot(pool, { table: await mustLoad('items'), batchRows: 100, signal: controller.signal }, {
      rows: () => {
        batches++
        return new Promise<void>(() => {}) // never done
      },
    })
    await waitFor(() => batches === 1, 'the first batch')
    controller.abort()
    expect((await errorOf(running)).code).toBe('aborted')
    expectReleased(pool)
    await waitFor(async () => (await backendsOf(pool.app)).length === 0, 'the backend to go', 5000)
    expect(batches).toBe(1)
  })

  it('gives up waiting for a pool connection', async () => {
    const pool = newPool({ max: 1 })
    const held = await pool.connect()
    const controller = new AbortController()
    const running = runSnapshot(pool, { table: await mustLoad('items'), signal: controller.signal }, new Collect())
    await waitFor(() => pool.waitingCount === 1, 'the snapshot to wait')
    controller.abort()
    expect((await errorOf(running)).code).toBe('aborted')
    held.release()
    await waitFor(() => pool.totalCount === pool.idleCount && pool.waitingCount === 0, 'the late connection to go back')
    expect((await runSnapshot(pool, { table: await mustLoad('items') }, new Collect())).rows).toBe(2500)
  })
})

describe('runSnapshot: failures', () => {
  it('reports a dropped table, a dropped schema, a re-created table and changed columns', async () => {
    const pool = newPool({ max: 1 })
    await cluster.query('CREATE SCHEMA doomed; CREATE TABLE doomed.t (id int PRIMARY KEY); CREATE TABLE gone (id int PRIMARY KEY); CREATE TABLE again (id int PRIMARY KEY); CREATE TABLE altered (id int PRIMARY KEY)')
    const gone = await mustLoad('gone')
    const inDoomed = await mustLoad('t', 'doomed')
    const again = await mustLoad('again')
    const altered = await mustLoad('altered')
    await cluster.query('DROP TABLE gone; DROP SCHEMA doomed CASCADE; DROP TABLE again; CREATE TABLE again (id int PRIMARY KEY); ALTER TABLE altered ADD COLUMN extra text')

    const dropped = await errorOf(runSnapshot(pool, { table: gone }, new Collect()))
    expect(dropped).toMatchObject({ code: 'table_not_found', sqlState: '42P01', retryable: false })
    expect(dropped.message).toMatch(/"public"\."gone"/)
    expect(await errorOf(runSnapshot(pool, { table: inDoomed }, new Collect()))).toMatchObject({ code: 'table_not_found', sqlState: '3F000' })
    const recreated = await errorOf(runSnapshot(pool, { table: again }, new Collect()))
    expect(recreated).toMatchObject({ code: 'table_changed', retryable: true })
    expect(recreated.message).toMatch(/dropped/)
    expect(await errorOf(runSnapshot(pool, { table: altered }, new Collect()))).toMatchObject({ code: 'table_changed', message: expect.stringMatching(/columns changed/) })
    // Reloaded, it works.
    expect((await runSnapshot(pool, { table: await mustLoad('altered') }, new Collect())).rows).toBe(0)
    expectReleased(pool)
    expect((await backendsOf(pool.app)).map((b) => b.state)).toEqual(['idle'])
  })

  it('holds the table: a DROP waits for the snapshot to finish', async () => {
    await cluster.query('CREATE TABLE held (id int PRIMARY KEY); INSERT INTO held SELECT generate_series(1, 300)')
    const pool = newPool({ max: 1 })
    let release: () => void = () => {}
    const gate = new Promise<void>((resolve) => (release = resolve))
    let batches = 0
    const running = runSnapshot(pool, { table: await mustLoad('held'), batchRows: 100 }, {
      rows: async () => {
        if (batches++ === 0) await gate
      },
    })
    await waitFor(() => batches === 1, 'the first batch')
    let dropped = false
    const drop = cluster.query('DROP TABLE held').then(() => (dropped = true))
    await sleep(300)
    expect(dropped).toBe(false)
    release()
    expect((await running).rows).toBe(300)
    await drop
    expect(dropped).toBe(true)
  })

  it('maps a missing privilege', async () => {
    await cluster.query(`CREATE ROLE reader LOGIN; CREATE TABLE secret (id int PRIMARY KEY)`)
    const url = new URL(cluster.url)
    url.username = 'reader'
    const pool = newPool({ max: 1, connectionString: url.toString() })
    const error = await errorOf(runSnapshot(pool, { table: await mustLoad('secret') }, new Collect()))
    expect(error).toMatchObject({ code: 'insufficient_privilege', sqlState: '42501' })
    expectReleased(pool)
  })

  it('applies statement_timeout and gives the connection back', async () => {
    const pool = newPool({ max: 1 })
    const info = await mustLoad('items')
    const error = await errorOf(runSnapshot(pool, { table: info, where: '(SELECT pg_sleep(5)) IS NOT NULL', statementTimeoutMs: 200 }, new Collect()))
    expect(error).toMatchObject({ code: 'statement_timeout', sqlState: '57014', retryable: true })
    expectReleased(pool)
    expect(pool.totalCount).toBe(1)
    expect((await runSnapshot(pool, { table: info, statementTimeoutMs: 10_000 }, new Collect())).rows).toBe(2500)
    expect((await backendsOf(pool.app)).map((b) => b.state)).toEqual(['idle'])
  })

  it('gives up on a table lock queued behind an ALTER TABLE after lockTimeoutMs, and gives the connection back', async () => {
    await cluster.query('CREATE TABLE lock_queued (id int PRIMARY KEY); INSERT INTO lock_queued VALUES (1)')
    const info = await mustLoad('lock_queued')
    // A long transaction holds the table; an ALTER TABLE then waits for it, and a snapshot's lock queues behind that.
    const long = await cluster.connect()
    const alter = await cluster.connect()
    try {
      await long.query('BEGIN; SELECT * FROM lock_queued')
      const altering = alter.query('ALTER TABLE lock_queued ADD COLUMN note text').catch((error: unknown) => error)
      await waitFor(async () => (await cluster.query(`SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE 'ALTER TABLE lock_queued%'`)).rows.length === 1, 'the ALTER TABLE to wait')
      const pool = newPool({ max: 1 })
      for (const statementTimeoutMs of [0, 60_000]) {
        const error = await errorOf(runSnapshot(pool, { table: info, lockTimeoutMs: 300, statementTimeoutMs }, new Collect()))
        expect(error).toMatchObject({ code: 'lock_timeout', sqlState: '55P03', retryable: true })
        expectReleased(pool)
      }
      await long.query('COMMIT')
      await altering
    } finally {
      await long.end()
      await alter.end()
    }
  })

  it('wraps sink failures, rolls back and gives the connection back', async () => {
    const pool = newPool({ max: 1 })
    const info = await mustLoad('items')
    const boom = new Error('disk full')
    let calls = 0
    const error = await errorOf(runSnapshot(pool, { table: info, batchRows: 100 }, {
      rows: () => {
        if (++calls === 2) throw boom
      },
    }))
    expect(error).toMatchObject({ code: 'sink_failed', cause: boom })
    expect(error.message).toMatch(/disk full/)
    expectReleased(pool)
    expect(pool.totalCount).toBe(1)
    expect((await backendsOf(pool.app)).map((b) => [b.state, b.query])).toEqual([['idle', 'ROLLBACK']])
    const failedStart = await errorOf(runSnapshot(pool, { table: info }, { start: () => Promise.reject(boom), rows: () => {} }))
    expect(failedStart).toMatchObject({ code: 'sink_failed', cause: boom })
    expect((await runSnapshot(pool, { table: info }, new Collect())).rows).toBe(2500)
    expectReleased(pool)
  })

  it('maps errors of the where clause and its parameters', async () => {
    const pool = newPool({ max: 1 })
    const info = await mustLoad('items')
    expect(await errorOf(runSnapshot(pool, { table: info, where: '1 / ("id" - "id") = 0' }, new Collect()))).toMatchObject({
      code: 'evaluation_error',
      sqlState: '22012',
    })
    expect(await errorOf(runSnapshot(pool, { table: info, where: '"id" = $1', params: ['abc'] }, new Collect()))).toMatchObject({
      code: 'evaluation_error',
      sqlState: '22P02',
    })
    expect(await errorOf(runSnapshot(pool, { table: info, where: '"nope" = 1' }, new Collect()))).toMatchObject({ code: 'invalid_query', sqlState: '42703' })
    // The transaction is read-only.
    expect(await errorOf(runSnapshot(pool, { table: info, where: `nextval('a_sequence') > 0` }, new Collect()))).toMatchObject({
      code: 'query_failed',
      sqlState: '25006',
    })
    expectReleased(pool)
    expect((await runSnapshot(pool, { table: info }, new Collect())).rows).toBe(2500)
  })

  it('reports a connection that cannot be made', async () => {
    const pool = new pg.Pool({ host: '127.0.0.1', port: 1, connectionTimeoutMillis: 2000 })
    pools.push(pool)
    const error = await errorOf(runSnapshot(pool, { table: await mustLoad('items') }, new Collect()))
    expect(error).toMatchObject({ code: 'connection_failed', retryable: true })
  })

  it('shares a bounded pool between many snapshots at once', async () => {
    const pool = newPool({ max: 2 })
    const info = await mustLoad('items')
    let peak = 0
    const results = await Promise.all(
      Array.from({ length: 6 }, (_, i) =>
        runSnapshot(pool, { table: info, where: '"id" <= $1', params: [String((i + 1) * 100)], batchRows: 50 }, {
          rows: async () => {
            peak = Math.max(peak, pool.totalCount)
            await sleep(1)
          },
        }),
      ),
    )
    expect(results.map((r) => r.rows)).toEqual([100, 200, 300, 400, 500, 600])
    expect(peak).toBeLessThanOrEqual(2)
    expectReleased(pool)
  })
})
