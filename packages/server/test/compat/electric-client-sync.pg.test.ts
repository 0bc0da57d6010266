import type { Row } from '@electric-sql/client'
import { useTempDir, usePostgres } from '@sluice/test-utils'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { Pipeline } from '../../src/pipeline.js'
import { startServer, type TestServer } from '../http/http-harness.js'
import { caughtUp, startPipeline } from '../pipeline/harness.js'
import { type SchemaEntry, expectedClientRows } from './client-values.js'
import { setTimeout as sleep } from 'node:timers/promises'
import { type RecordedExchange, StreamLog, captureWarnings, eventually, openStream, rowKey, shapeOf } from './compat-harness.js'

/**
 * The official client's sync lifecycle against a real Sluice server: initial
 * sync and live long-polls, resume from a saved (handle, offset), 409 rotation
 * by TRUNCATE and by DELETE, a table dropped under the client and created
 * again, where clauses with params, `replica: 'full'`, SSE,
 * `offset: 'now'`, and `log: 'changes_only'` with `requestSnapshot`. Every end
 * state is compared with Postgres; where the protocol promises an exact message
 * sequence (resume, `now`), the messages themselves are compared.
 */

const cluster = usePostgres()
const dirs = useTempDir('compat-sync')
let pipeline: Pipeline
let server: TestServer
let url: string

/** Short server-side holds so held requests and SSE reconnects happen within a test. */
const LONG_POLL_MS = 3000
const SSE_TIMEOUT_MS = 4000

/** Every test table has this shape; `n` and `cat` give where clauses something to select on. */
const SCHEMA: Record<string, SchemaEntry> = {
  id: { type: 'int4', pk_index: 0, not_null: true },
  cat: { type: 'text' },
  n: { type: 'int8' },
  flag: { type: 'bool' },
  doc: { type: 'jsonb' },
}

async function createTable(name: string, rows = 5): Promise<void> {
  await cluster.query(`
    CREATE TABLE ${name} (id int4 PRIMARY KEY, cat text, n int8, flag bool, doc jsonb);
    INSERT INTO ${name} SELECT i, CASE WHEN i % 2 = 0 THEN 'even' ELSE 'odd' END, i * 10, i % 3 = 0, jsonb_build_object('i', i)
      FROM generate_series(1, ${rows}) i;
  `)
}

const open = (options: Parameters<typeof openStream>[1], exchanges?: RecordedExchange[]): ReturnType<typeof openStream> =>
  openStream(url, options, exchanges)

const expected = (table: string, where?: string, params?: readonly unknown[]): Promise<Map<string, Record<string, unknown>>> =>
  expectedClientRows(cluster, table, SCHEMA, (r) => rowKey('public', table, r.id!), where, params)

beforeAll(async () => {
  // Small chunks, so the initial sync of a few hundred rows spans several cacheable responses.
  pipeline = await startPipeline(cluster, await dirs.make('store'), { chunkBytes: 4096 })
  server = await startServer(pipeline, { longPollTimeoutMs: LONG_POLL_MS, sseTimeoutMs: SSE_TIMEOUT_MS, allowDelete: true })
  url = `http://127.0.0.1:${server.port}/v1/shape`
})

afterAll(async () => {
  await server?.close()
  await pipeline?.stop()
})

describe('the official client syncing from Sluice', () => {
  it('initial sync and live long-poll updates; handle and offset track the response headers', async () => {
    await createTable('live_items', 300)
    const exchanges: RecordedExchange[] = []
    const { stream, abort } = open({ params: { table: 'live_items' } }, exchanges)
    const shape = shapeOf(stream)
    const log = new StreamLog(stream)
    try {
      expect(new Map(await shape.value)).toEqual(await expected('live_items'))
      // offset=-1 never carries up-to-date (docs/protocol.md §12.1): the client needed a second request.
      expect(exchanges[0]!.url.searchParams.get('offset')).toBe('-1')
      expect(exchanges[0]!.headers.has('electric-up-to-date')).toBe(false)
      // The client walked the snapshot chunk by chunk (each a non-live 200 with its schema) before up-to-date.
      const initial = exchanges.slice(0, exchanges.findIndex((e) => e.headers.has('electric-up-to-date')) + 1)
      expect(initial.length).toBeGreaterThan(3)
      for (const e of initial) {
        expect(e.status).toBe(200)
        expect(e.url.searchParams.has('live')).toBe(false)
        expect(e.headers.get('electric-schema')).not.toBeNull()
      }
      const last = exchanges.at(-1)!
      expect(stream.shapeHandle).toBe(last.headers.get('electric-handle'))
      expect(stream.lastOffset).toBe(last.headers.get('electric-offset'))

      // Single-row and multi-row transactions, an update of many columns, a key change, deletes.
      await cluster.query("INSERT INTO live_items VALUES (1001, 'new', 1, true, '{}')")
      await cluster.query(`
        BEGIN;
        UPDATE live_items SET n = n + 1, doc = doc || '{"touched": true}' WHERE id % 7 = 0;
        DELETE FROM live_items WHERE id BETWEEN 10 AND 20;
        UPDATE live_items SET id = 2000 WHERE id = 1;
        INSERT INTO live_items SELECT i, 'bulk', i, NULL, NULL FROM generate_series(3000, 3050) i;
        COMMIT;
      `)
      await cluster.query('UPDATE live_items SET flag = NOT flag WHERE id = 3')
      await caughtUp(pipeline, cluster)
      const want = await expected('live_items')
      await eventually(() => shape.currentValue.size === want.size && shape.currentValue.has(rowKey('public', 'live_items', '3050')), 'the live changes')
      await log.until((l) => l.changes().some((m) => m.headers.operation === 'update' && m.key === rowKey('public', 'live_items', '3')), 'the last update')
      expect(new Map(shape.currentValue)).toEqual(want)
      // Live requests carried the cursor the server gave, and every live response had one.
      const live = exchanges.filter((e) => e.url.searchParams.get('live') === 'true')
      expect(live.length).toBeGreaterThan(0)
      for (const e of live) expect(e.headers.get('electric-cursor')).toMatch(/^\d+$/)
      expect(log.errors).toEqual([])
    } finally {
      abort.abort()
    }
  })

  it('resumes from a saved handle and offset and receives exactly the later changes', async () => {
    await createTable('resume_items')
    const first = open({ params: { table: 'resume_items' } })
    const firstShape = shapeOf(first.stream)
    await firstShape.value
    const saved = { handle: first.stream.shapeHandle!, offset: first.stream.lastOffset }
    first.abort.abort()
    expect(saved.handle).toBeTruthy()
    expect(saved.offset).toMatch(/^\d+_(\d+|inf)$/)

    await cluster.query("INSERT INTO resume_items VALUES (6, 'late', 60, false, NULL)")
    await cluster.query("UPDATE resume_items SET cat = 'changed' WHERE id = 2")
    await cluster.query('DELETE FROM resume_items WHERE id = 3')
    await caughtUp(pipeline, cluster)

    const exchanges: RecordedExchange[] = []
    const second = open({ params: { table: 'resume_items' }, handle: saved.handle, offset: saved.offset }, exchanges)
    const log = new StreamLog(second.stream)
    try {
      await log.until((l) => l.controls().includes('up-to-date'), 'the resumed stream to catch up')
      const changes = log.changes().map((m) => [m.headers.operation, m.key, m.value])
      expect(changes).toEqual([
        ['insert', rowKey('public', 'resume_items', '6'), { id: 6, cat: 'late', n: 60n, flag: false, doc: null }],
        ['update', rowKey('public', 'resume_items', '2'), { id: 2, cat: 'changed' }],
        ['delete', rowKey('public', 'resume_items', '3'), { id: 3 }],
      ])
      expect(exchanges[0]!.url.searchParams.get('handle')).toBe(saved.handle)
      expect(exchanges[0]!.url.searchParams.get('offset')).toBe(saved.offset)
      expect(exchanges.every((e) => e.status === 200)).toBe(true)
      expect(second.stream.shapeHandle).toBe(saved.handle)
      // Each live change carries the lsn, op position and txids the client's snapshot tracker needs (§6).
      for (const m of log.changes()) {
        expect(m.headers.lsn).toMatch(/^\d+$/)
        expect(typeof m.headers.op_position).toBe('number')
        expect(m.headers.txids).toEqual([expect.any(Number)])
      }
    } finally {
      second.abort.abort()
    }
  })

  interface Following {
    readonly stream: ReturnType<typeof open>['stream']
    readonly shape: ReturnType<typeof shapeOf>
    readonly log: StreamLog
    readonly exchanges: RecordedExchange[]
    readonly warnings: readonly unknown[]
  }

  /**
   * The official client following a new table (`rows` rows, default 5), its
   * requests recorded and console warnings captured, synced before `run`
   * starts and stopped after it ends.
   */
  async function following(table: string, options: { rows?: number; liveSse?: boolean }, run: (f: Following) => Promise<void>): Promise<void> {
    await createTable(table, options.rows)
    const exchanges: RecordedExchange[] = []
    const { stream, abort } = open({ params: { table }, ...(options.liveSse === true ? { liveSse: true } : {}) }, exchanges)
    const shape = shapeOf(stream)
    const log = new StreamLog(stream)
    const captured = captureWarnings()
    try {
      await shape.value
      await run({ stream, shape, log, exchanges, warnings: captured.warnings })
    } finally {
      captured.restore()
      abort.abort()
    }
  }

  for (const rotation of ['TRUNCATE', 'DELETE /v1/shape'] as const) {
    it(`409 rotation by ${rotation} while following: the client re-syncs to the right rows, no duplicates`, async () => {
      const table = rotation === 'TRUNCATE' ? 'rotate_truncate' : 'rotate_delete'
      await following(table, {}, async ({ stream, shape, log, exchanges, warnings }) => {
        const oldHandle = stream.shapeHandle!
        // Most likely the client is parked on a live request by now, so the rotation reaches a held
        // long-poll; if not, its next request meets the rotation instead. Both must end the same.
        await sleep(200)
        if (rotation === 'TRUNCATE') {
          await cluster.query(`TRUNCATE ${table}`)
          await cluster.query(`INSERT INTO ${table} VALUES (100, 'after', 1, true, '[]'), (101, 'after', 2, false, '{}')`)
        } else {
          const res = await fetch(`${url}?table=${table}`, { method: 'DELETE' })
          expect(res.status).toBe(202)
          await cluster.query(`INSERT INTO ${table} VALUES (100, 'after', 1, true, '[]')`)
          await cluster.query(`DELETE FROM ${table} WHERE id = 1`)
        }
        await caughtUp(pipeline, cluster)
        await log.until((l) => l.controls().includes('must-refetch'), 'the must-refetch')
        const want = await expected(table)
        await eventually(() => stream.isUpToDate && shape.currentValue.size === want.size && shape.currentValue.has(rowKey('public', table, '100')), 'the re-sync')
        expect(new Map(shape.currentValue)).toEqual(want)
        expect(stream.shapeHandle).not.toBe(oldHandle)
        const conflict = exchanges.find((e) => e.status === 409)!
        expect(conflict).toBeDefined()
        expect(conflict.headers.get('electric-handle')).toBe(stream.shapeHandle)
        // After the refetch, offset=-1 with the new handle, and each key inserted once.
        const afterRefetch = log.messages.slice(log.messages.findLastIndex((m) => 'control' in m.headers && m.headers.control === 'must-refetch') + 1)
        const inserted = afterRefetch.filter((m) => 'key' in m && m.headers.operation === 'insert').map((m) => (m as { key: string }).key)
        expect(new Set(inserted).size).toBe(inserted.length)
        const refetch = exchanges[exchanges.indexOf(conflict) + 1]!
        expect(refetch.url.searchParams.get('offset')).toBe('-1')
        // Every 409 named a handle (a held long-poll's too: Sluice used to send none there, and the
        // client warned that a proxy must be stripping headers).
        for (const e of exchanges.filter((x) => x.status === 409)) expect(e.headers.get('electric-handle')).toMatch(/^\d+-\d+$/)
        expect(warnings).toEqual([])
        expect(log.errors).toEqual([])
      })
    })
  }

  it('a table dropped under a following client: must-refetch, then it waits without an error until the table is back', { timeout: 90_000 }, async () => {
    await following('dropped_items', { rows: 3 }, async ({ stream, shape, log, exchanges }) => {
      const oldHandle = stream.shapeHandle!
      await cluster.query('DROP TABLE dropped_items')
      await log.until((l) => l.controls().includes('must-refetch'), 'the must-refetch')
      // Its refetch names the retired handle; the table is gone, so: retry later, not a 400 that ends the stream.
      await eventually(() => exchanges.some((e) => e.status === 503), 'a 503 for the refetch')
      const waiting = exchanges.find((e) => e.status === 503)!
      expect(waiting.url.searchParams.get('expired_handle')).toBe(oldHandle)
      expect(Number(waiting.headers.get('retry-after'))).toBeGreaterThan(0)
      expect(exchanges.some((e) => e.status === 400)).toBe(false)
      await cluster.query(`CREATE TABLE dropped_items (id int4 PRIMARY KEY, cat text, n int8, flag bool, doc jsonb);
                           INSERT INTO dropped_items VALUES (7, 'back', 70, true, '{}')`)
      const want = await expected('dropped_items')
      await eventually(() => shape.currentValue.size === 1 && shape.currentValue.has(rowKey('public', 'dropped_items', '7')), 'the table back', 60_000)
      expect(new Map(shape.currentValue)).toEqual(want)
      expect(stream.shapeHandle).not.toBe(oldHandle)
      expect(log.errors).toEqual([])
    })
  })

  it('where with params: rows move in and out as their values change', async () => {
    await createTable('where_items', 20)
    const where = 'cat = $1 AND n >= $2'
    const params = ['even', '60']
    const { stream, abort } = open({ params: { table: 'where_items', where, params: { 1: params[0]!, 2: params[1]! } } })
    const shape = shapeOf(stream)
    try {
      expect(new Map(await shape.value)).toEqual(await expected('where_items', where, params))
      await cluster.query("UPDATE where_items SET cat = 'even' WHERE id = 7") // moves in
      await cluster.query('UPDATE where_items SET n = 0 WHERE id = 8') // moves out
      await cluster.query("UPDATE where_items SET doc = '{\"x\": 1}' WHERE id = 10") // stays in
      await cluster.query('UPDATE where_items SET n = 1000 WHERE id = 1') // stays out
      await cluster.query("INSERT INTO where_items VALUES (50, 'even', 500, NULL, NULL), (51, 'odd', 510, NULL, NULL)")
      await caughtUp(pipeline, cluster)
      const want = await expected('where_items', where, params)
      await eventually(() => shape.currentValue.has(rowKey('public', 'where_items', '50')) && !shape.currentValue.has(rowKey('public', 'where_items', '8')), 'the moves')
      await eventually(() => (shape.currentValue.get(rowKey('public', 'where_items', '10'))?.doc as { x?: number } | undefined)?.x === 1, 'the update')
      expect(new Map(shape.currentValue)).toEqual(want)
    } finally {
      abort.abort()
    }
  })

  it("replica: 'full' sends whole rows and old values the client parses", async () => {
    await createTable('full_items')
    const { stream, abort } = open({ params: { table: 'full_items', replica: 'full' } })
    const shape = shapeOf(stream)
    const log = new StreamLog(stream)
    try {
      await shape.value
      const initial = log.changes().length
      await cluster.query("UPDATE full_items SET n = 999, doc = '{\"new\": true}' WHERE id = 2")
      await cluster.query('DELETE FROM full_items WHERE id = 4')
      await caughtUp(pipeline, cluster)
      await log.until((l) => l.changes().some((m) => m.headers.operation === 'delete'), 'the delete')
      const [update, del] = log.changes().slice(initial)
      expect(update!.headers.operation).toBe('update')
      expect(update!.value).toEqual({ id: 2, cat: 'even', n: 999n, flag: false, doc: { new: true } })
      expect((update as unknown as { old_value: Row }).old_value).toEqual({ n: 20n, doc: { i: 2 } })
      expect(del!.headers.operation).toBe('delete')
      expect(del!.value).toEqual({ id: 4, cat: 'even', n: 40n, flag: false, doc: { i: 4 } })
      expect(new Map(shape.currentValue)).toEqual(await expected('full_items'))
    } finally {
      abort.abort()
    }
  })

  /**
   * Follows `table` with the official client in SSE mode through `run`, then
   * checks it never fell back to long-polling: no live request without SSE,
   * every SSE answer an event stream, no warning and no stream error.
   */
  async function followOverSse(
    table: string,
    run: (shape: ReturnType<typeof shapeOf>, sseRequests: () => number) => Promise<void>,
  ): Promise<void> {
    await following(table, { liveSse: true }, async ({ shape, log, exchanges, warnings }) => {
      const sse = (): RecordedExchange[] => exchanges.filter((e) => e.url.searchParams.get('live_sse') === 'true')
      await eventually(() => sse().length > 0, 'an SSE request')
      await run(shape, () => sse().length)
      expect(new Map(shape.currentValue)).toEqual(await expected(table))
      for (const e of sse()) {
        expect(e.status).toBe(200)
        expect(e.headers.get('content-type')).toMatch(/^text\/event-stream/)
      }
      expect(exchanges.filter((e) => e.url.searchParams.get('live') === 'true' && e.url.searchParams.get('live_sse') !== 'true')).toEqual([])
      expect(warnings).toEqual([])
      expect(log.errors).toEqual([])
    })
  }

  it('SSE: live updates arrive over server-sent events, across stream reconnects', async () => {
    await followOverSse('sse_items', async (shape, sseRequests) => {
      await cluster.query("INSERT INTO sse_items VALUES (6, 'sse', 6, true, '{\"sse\": 1}')")
      await caughtUp(pipeline, cluster)
      await eventually(() => shape.currentValue.has(rowKey('public', 'sse_items', '6')), 'the first SSE change')
      // Outlive one SSE stream (the server ends it after SSE_TIMEOUT_MS) so the client reconnects
      // at the offset it derived from global_last_seen_lsn (docs/protocol.md §5.5), then change more.
      const before = sseRequests()
      await eventually(() => sseRequests() > before, 'an SSE reconnect')
      await cluster.query(`
        BEGIN;
        INSERT INTO sse_items VALUES (7, 'sse', 7, NULL, NULL), (8, 'sse', 8, NULL, NULL);
        UPDATE sse_items SET n = -1 WHERE id = 1;
        COMMIT;
      `)
      await cluster.query('DELETE FROM sse_items WHERE id = 2')
      await caughtUp(pipeline, cluster)
      await eventually(() => !shape.currentValue.has(rowKey('public', 'sse_items', '2')) && shape.currentValue.has(rowKey('public', 'sse_items', '8')), 'the later SSE changes')
      await eventually(() => shape.currentValue.get(rowKey('public', 'sse_items', '1'))?.n === -1n, 'the update')
    })
  })

  it('SSE under a steady stream of commits: the client stays on SSE (a stream with data waiting does not end early)', async () => {
    await followOverSse('sse_steady', async (shape, sseRequests) => {
      // Commits back to back across more than two SSE lifetimes: every reconnect finds data waiting. A
      // stream that ended after sending it would be short each time, and after three in a row the client
      // falls back to long-polling for good.
      const before = sseRequests()
      let last = 0
      for (const end = Date.now() + 2.5 * SSE_TIMEOUT_MS; Date.now() < end; ) {
        await cluster.query('UPDATE sse_steady SET n = $1 WHERE id = 1', [++last])
      }
      await caughtUp(pipeline, cluster)
      await eventually(() => shape.currentValue.get(rowKey('public', 'sse_steady', '1'))?.n === BigInt(last), 'the last update')
      expect(sseRequests()).toBeGreaterThan(before + 1)
    })
  })

  it("offset: 'now' skips the existing rows and delivers exactly the later changes", async () => {
    await createTable('now_items')
    await caughtUp(pipeline, cluster)
    const exchanges: RecordedExchange[] = []
    const { stream, abort } = open({ params: { table: 'now_items' }, offset: 'now' }, exchanges)
    const log = new StreamLog(stream)
    try {
      await log.until((l) => l.controls().includes('up-to-date'), 'the first up-to-date')
      expect(log.changes()).toEqual([])
      expect(exchanges[0]!.url.searchParams.get('offset')).toBe('now')
      expect(stream.shapeHandle).toBe(exchanges[0]!.headers.get('electric-handle'))
      expect(stream.lastOffset).toMatch(/^\d+_(\d+|inf)$/)
      await cluster.query("INSERT INTO now_items VALUES (6, 'now', 6, true, NULL)")
      await cluster.query('DELETE FROM now_items WHERE id = 1')
      await caughtUp(pipeline, cluster)
      await log.until((l) => l.changes().length >= 2, 'the later changes')
      expect(log.changes().map((m) => [m.headers.operation, m.key, m.value])).toEqual([
        ['insert', rowKey('public', 'now_items', '6'), { id: 6, cat: 'now', n: 6n, flag: true, doc: null }],
        ['delete', rowKey('public', 'now_items', '1'), { id: 1 }],
      ])
    } finally {
      abort.abort()
    }
  })

  for (const method of ['GET', 'POST'] as const) {
    it(`log: 'changes_only' with requestSnapshot over ${method}: the subset joins the stream, later changes apply once`, async () => {
      const table = `subset_items_${method.toLowerCase()}`
      await createTable(table, 30)
      const exchanges: RecordedExchange[] = []
      const { stream, abort } = open({ params: { table }, log: 'changes_only', subsetMethod: method }, exchanges)
      const shape = shapeOf(stream)
      const log = new StreamLog(stream)
      try {
        await shape.value
        expect(shape.currentValue.size).toBe(0)
        await shape.requestSnapshot({ where: 'n > $1', params: { 1: '100' }, orderBy: 'id DESC', limit: 5 })
        const snapshotIds = [30, 29, 28, 27, 26]
        expect([...shape.currentValue.values()].map((r) => r.id).sort()).toEqual([...snapshotIds].sort())
        const subset = exchanges.find((e) => (method === 'POST' ? e.method === 'POST' : [...e.url.searchParams.keys()].some((k) => k.startsWith('subset__'))))!
        expect(subset.status).toBe(200)
        expect(subset.headers.get('electric-snapshot')).toBe('true')

        // Changes to rows in the snapshot apply; changes to rows the client never saw inserted are dropped by Shape.
        await cluster.query(`UPDATE ${table} SET cat = 'seen' WHERE id = 30`)
        await cluster.query(`UPDATE ${table} SET cat = 'unseen' WHERE id = 1`)
        await cluster.query(`DELETE FROM ${table} WHERE id = 29`)
        await cluster.query(`INSERT INTO ${table} VALUES (31, 'new', 310, NULL, NULL)`)
        await caughtUp(pipeline, cluster)
        await eventually(() => shape.currentValue.has(rowKey('public', table, '31')) && !shape.currentValue.has(rowKey('public', table, '29')), 'the later changes')
        await eventually(() => shape.currentValue.get(rowKey('public', table, '30'))?.cat === 'seen', 'the update')
        const all = await expected(table)
        const want = new Map([...all].filter(([, r]) => [30, 28, 27, 26, 31].includes(r.id as number)))
        expect(new Map(shape.currentValue)).toEqual(want)
        const inserted = log.changes().filter((m) => m.headers.operation === 'insert').map((m) => m.key)
        expect(new Set(inserted).size).toBe(inserted.length)
        expect(log.errors).toEqual([])
      } finally {
        abort.abort()
      }
    })
  }
})
