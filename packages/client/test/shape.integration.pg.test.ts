import { describe, expect, it } from 'vitest'
import { MemoryShapeStorage, type Message, Shape, ShapeStream, type ShapeStreamOptions, isChangeMessage } from '../src/index.js'
import { FAST_BACKOFF, ITEMS_DDL, shapeMatches, until, useSluice, writeTx } from './harness.js'

/**
 * SSE, Shape materialisation, txids and persistence against a real Sluice
 * server on real Postgres (through the recording proxy).
 */
const sluice = useSluice()
let tableNo = 0

async function newTable(rows = 0): Promise<string> {
  const table = `shape_${++tableNo}`
  await sluice.cluster.query(ITEMS_DDL(table))
  if (rows > 0) {
    await sluice.cluster.query(`INSERT INTO ${table} (id, title, n) SELECT i, 'row ' || i, i FROM generate_series(1, $1) i`, [rows])
  }
  return table
}

function options(table: string, extra: Partial<ShapeStreamOptions> = {}): ShapeStreamOptions {
  return { url: sluice.shapeUrl, params: { table }, backoff: FAST_BACKOFF, ...extra }
}

const sseRequests = (table: string) => sluice.proxy.requestsFor(table).filter((r) => r.url.searchParams.get('live_sse') === 'true')
const longPolls = (table: string) => sluice.proxy.requestsFor(table).filter((r) => r.url.searchParams.get('live') === 'true' && !r.url.searchParams.has('live_sse'))

describe('SSE', () => {
  it('live changes arrive over SSE, each transaction whole, without duplicates', async () => {
    const table = await newTable(5)
    const stream = new ShapeStream(options(table, { liveSse: true }))
    const batches: Array<readonly Message[]> = []
    stream.subscribe((m) => void batches.push(m))
    const shape = new Shape(stream)
    try {
      await shape.ready()
      for (let i = 0; i < 5; i++) {
        const txid = await writeTx(
          sluice.cluster,
          `INSERT INTO ${table} (id, title) VALUES (${100 + i}, 'sse ${i}'); UPDATE ${table} SET n = n + 1 WHERE id = ${1 + i}; DELETE FROM ${table} WHERE id = ${100 + i - 1}`,
        )
        await shape.waitForTxid(txid)
      }
      await shapeMatches(shape, sluice.cluster, table)
      const sse = sseRequests(table)
      expect(sse.length).toBeGreaterThan(0)
      expect(sse.every((r) => r.headers.accept === 'text/event-stream' && r.url.searchParams.get('experimental_live_sse') === 'true')).toBe(true)
      expect(stream.state).toMatchObject({ kind: 'live', transport: 'sse' })
      // Each live change exactly once, in log order.
      const live = batches.flat().filter(isChangeMessage).filter((m) => m.headers.lsn !== undefined)
      const positions = live.map((m) => `${m.headers.lsn}_${m.headers.op_position}`)
      expect(new Set(positions).size).toBe(positions.length)
      // 5 inserts, 5 updates, 4 deletes (the first deletes a row that never existed).
      expect(live).toHaveLength(14)
    } finally {
      await shape.stop()
    }
  })

  it('falls back to long-poll at once when the answer is not an event stream', async () => {
    const table = await newTable(3)
    sluice.proxy.interceptor = ({ url }) =>
      url.searchParams.get('table') === table && url.searchParams.has('live_sse') ? { kind: 'respond', status: 200, headers: { 'content-type': 'application/json' }, body: '[]' } : undefined
    const shape = new Shape(new ShapeStream(options(table, { liveSse: true })))
    try {
      await shape.ready()
      await until('a long-poll', () => longPolls(table).length > 0)
      expect(sseRequests(table)).toHaveLength(1)
      const txid = await writeTx(sluice.cluster, `INSERT INTO ${table} (id, title) VALUES (77, 'by long-poll')`)
      await shape.waitForTxid(txid)
      await shapeMatches(shape, sluice.cluster, table)
      expect(shape.stream.state).toMatchObject({ transport: 'long-poll' })
    } finally {
      sluice.proxy.interceptor = undefined
      await shape.stop()
    }
  })

  it('falls back to long-poll after three SSE connections cut short', async () => {
    const table = await newTable(3)
    sluice.proxy.interceptor = ({ url }) => (url.searchParams.get('table') === table && url.searchParams.has('live_sse') ? { kind: 'headers-only' } : undefined)
    const shape = new Shape(new ShapeStream(options(table, { liveSse: true })))
    try {
      await shape.ready()
      await until('a long-poll', () => longPolls(table).length > 0)
      expect(sseRequests(table)).toHaveLength(3)
      const txid = await writeTx(sluice.cluster, `UPDATE ${table} SET title = 'seen' WHERE id = 2`)
      await shape.waitForTxid(txid)
      await shapeMatches(shape, sluice.cluster, table)
    } finally {
      sluice.proxy.interceptor = undefined
      await shape.stop()
    }
  })
})

describe('Shape', () => {
  it('matches SELECT after a random mix of transactions (SOAK=1 for a long run)', async () => {
    const table = await newTable(50)
    const shape = new Shape(new ShapeStream(options(table)))
    const rounds = process.env.SOAK === '1' ? 400 : 40
    let seed = 12345
    const rand = (n: number): number => {
      seed = (seed * 1103515245 + 12345) % 2 ** 31
      return seed % n
    }
    try {
      await shape.ready()
      let txid = ''
      for (let round = 0; round < rounds; round++) {
        const statements: string[] = []
        for (let k = 0, count = 1 + rand(4); k < count; k++) {
          const id = 1 + rand(80)
          switch (rand(4)) {
            case 0:
              statements.push(`INSERT INTO ${table} (id, title, n, f, done, tags, doc) VALUES (${id}, 'r${round}', ${rand(100)}, ${rand(7) / 3}, ${rand(2) === 0}, '{{"a ${round}",b},{NULL,"\\\\"}}', '{"r": ${round}}') ON CONFLICT (id) DO UPDATE SET title = EXCLUDED.title, tags = EXCLUDED.tags`)
              break
            case 1:
              statements.push(`UPDATE ${table} SET n = coalesce(n, 0) + 1, f = 'Infinity' WHERE id = ${id}`)
              break
            case 2:
              statements.push(`DELETE FROM ${table} WHERE id = ${id}`)
              break
            default:
              statements.push(`UPDATE ${table} SET id = ${1000 + round * 10 + k} WHERE id = ${id}`)
          }
        }
        txid = await writeTx(sluice.cluster, statements.join(';\n'))
        if (round % 10 === 9) {
          await shape.waitForTxid(txid)
          await shapeMatches(shape, sluice.cluster, table)
        }
      }
      await shape.waitForTxid(txid)
      await shapeMatches(shape, sluice.cluster, table)
    } finally {
      await shape.stop()
    }
  })

  it('waitForTxid: a write before the snapshot resolves from snapshot-end; a later one when its change is synced', async () => {
    const table = await newTable(3)
    const before = await writeTx(sluice.cluster, `INSERT INTO ${table} (id, title) VALUES (10, 'before')`)
    const shape = new Shape(new ShapeStream(options(table)))
    const notified: number[] = []
    shape.subscribe(({ rows }) => void notified.push(rows.length))
    try {
      await shape.waitForTxid(before)
      expect(shape.value.has(`"public"."${table}"/"10"`)).toBe(true)
      const after = await writeTx(sluice.cluster, `INSERT INTO ${table} (id, title) VALUES (11, 'after')`)
      let resolved = false
      const waiting = shape.waitForTxid(BigInt(after)).then(() => (resolved = true))
      await waiting
      expect(resolved).toBe(true)
      expect(shape.value.get(`"public"."${table}"/"11"`)).toMatchObject({ title: 'after' })
      expect(notified.at(-1)).toBe(5)
      // A txid of a transaction that never touches the shape does not resolve; abort ends the wait.
      const elsewhere = await writeTx(sluice.cluster, 'CREATE TEMP TABLE scratch (x int)')
      const controller = new AbortController()
      const pending = shape.waitForTxid(elsewhere, { signal: controller.signal })
      controller.abort()
      await expect(pending).rejects.toMatchObject({ code: 'aborted' })
    } finally {
      await shape.stop()
    }
  })

  it('a reloaded shape resumes from storage instead of requesting -1', async () => {
    const table = await newTable(200)
    const storage = new MemoryShapeStorage()
    const first = await Shape.open({ ...options(table), storage })
    await first.ready()
    const firstRows = new Map(first.value)
    await first.stop()
    await sluice.cluster.query(`UPDATE ${table} SET title = 'while away' WHERE id = 7; DELETE FROM ${table} WHERE id = 8`)

    const before = sluice.proxy.requestsFor(table).length
    const second = await Shape.open({ ...options(table), storage })
    // The saved rows are there before any request.
    expect(second.value).toEqual(firstRows)
    expect(second.isUpToDate).toBe(false)
    await second.ready()
    await until('the change made while away', () => second.value.get(`"public"."${table}"/"7"`)?.title === 'while away')
    await shapeMatches(second, sluice.cluster, table)
    const urls = sluice.proxy.requestsFor(table).slice(before).map((r) => r.url)
    expect(urls.some((u) => u.searchParams.get('offset') === '-1')).toBe(false)
    expect(urls[0]!.searchParams.get('handle')).toBe(first.stream.shapeHandle)
    await second.stop()
  })

  it('a saved handle that is gone gets a 409 and a clean re-sync', async () => {
    const table = await newTable(5)
    const storage = new MemoryShapeStorage()
    const first = await Shape.open({ ...options(table), storage })
    await first.ready()
    const handle = first.stream.shapeHandle!
    await first.stop()
    const res = await fetch(`${sluice.serverUrl}/v1/shape?handle=${handle}`, { method: 'DELETE' })
    expect(res.status).toBe(202)
    await sluice.cluster.query(`DELETE FROM ${table} WHERE id > 2`)
    const second = await Shape.open({ ...options(table), storage })
    try {
      await until('re-synced', () => second.isUpToDate && second.stream.shapeHandle !== handle)
      await shapeMatches(second, sluice.cluster, table)
      expect(second.rows).toHaveLength(2)
    } finally {
      await second.stop()
    }
  })

  it('keeps row values typed through updates that carry only changed columns', async () => {
    const table = await newTable(1)
    const shape = new Shape<{ id: bigint; title: string; n: number | null }>(new ShapeStream(options(table)))
    try {
      await shape.ready()
      const txid = await writeTx(sluice.cluster, `UPDATE ${table} SET n = 42 WHERE id = 1`)
      await shape.waitForTxid(txid)
      const row = shape.rows[0]!
      expect(row).toMatchObject({ id: 1n, title: 'row 1', n: 42 })
    } finally {
      await shape.stop()
    }
  })
})
