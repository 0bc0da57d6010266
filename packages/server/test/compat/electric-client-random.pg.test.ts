import type { Message, Row } from '@electric-sql/client'
import { isChangeMessage, isControlMessage } from '@electric-sql/client'
import { seededRandom as prng, useTempDir, usePostgres } from '@sluice/test-utils'
import { setTimeout as sleep } from 'node:timers/promises'
import { isDeepStrictEqual } from 'node:util'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { Pipeline } from '../../src/pipeline.js'
import { startServer, type TestServer } from '../http/http-harness.js'
import { caughtUp, startPipeline } from '../pipeline/harness.js'
import { type SchemaEntry, expectedClientRows } from './client-values.js'
import { captureWarnings, eventually, openStream, rowKey, shapeOf } from './compat-harness.js'

/**
 * A seeded random workload of transactions (inserts, updates of random
 * columns, deletes, primary-key changes, rows moving across where clauses)
 * while several official clients follow: the whole table over long-poll, a
 * where-with-params shape over SSE, a `replica: 'full'` range shape, and a
 * stream that is stopped now and then and resumed from its saved handle and
 * offset by a new ShapeStream. Every one must end equal to Postgres.
 * SOAK=1 runs a long workload; SEED=n replays one.
 */

const SOAK = process.env.SOAK === '1'
const TRANSACTIONS = SOAK ? 1500 : 60
const SEED = process.env.SEED === undefined ? Math.floor(Math.random() * 2 ** 31) : Number(process.env.SEED)

const cluster = usePostgres()
const dirs = useTempDir('compat-random')
let pipeline: Pipeline
let server: TestServer
let url: string

const SCHEMA: Record<string, SchemaEntry> = {
  id: { type: 'int4', pk_index: 0, not_null: true },
  grp: { type: 'int4' },
  v: { type: 'text' },
  n: { type: 'int8' },
  f: { type: 'float8' },
  b: { type: 'bool' },
  tags: { type: 'text', dims: 1 },
  doc: { type: 'jsonb' },
}

beforeAll(async () => {
  await cluster.query(`
    CREATE TABLE rnd (id int4 PRIMARY KEY, grp int4, v text, n int8, f float8, b bool, tags text[], doc jsonb);
    INSERT INTO rnd SELECT i, i % 4, 'row ' || i, i * 17 % 1000, i / 3.0, i % 2 = 0, ARRAY['t' || (i % 5)], jsonb_build_object('i', i)
      FROM generate_series(1, 50) i;
  `)
  pipeline = await startPipeline(cluster, await dirs.make('store'))
  server = await startServer(pipeline, { longPollTimeoutMs: 2000, sseTimeoutMs: 3000 })
  url = `http://127.0.0.1:${server.port}/v1/shape`
})

afterAll(async () => {
  await server?.close()
  await pipeline?.stop()
})

/** Applies messages to a map the way the client's Shape does in full mode (docs/protocol.md §3.2). */
function apply(rows: Map<string, Row>, messages: ReadonlyArray<Message<Row>>): void {
  for (const m of messages) {
    if (isChangeMessage(m)) {
      if (m.headers.operation === 'insert') rows.set(m.key, m.value)
      else if (m.headers.operation === 'update') rows.set(m.key, { ...rows.get(m.key), ...m.value })
      else rows.delete(m.key)
    } else if (isControlMessage(m) && m.headers.control === 'must-refetch') rows.clear()
  }
}

/**
 * Follows the whole table through successive ShapeStreams: `restart()` drops
 * the current one and opens a new one at the (handle, offset) saved after the
 * last up-to-date batch, with the rows as they were then.
 */
class ResumingFollower {
  rows = new Map<string, Row>()
  restarts = 0
  private saved: { handle: string; offset: string; rows: Map<string, Row> } | undefined
  private current: ReturnType<typeof openStream> | undefined
  readonly errors: unknown[] = []

  start(): void {
    const from = this.saved
    const opened = openStream(url, {
      params: { table: 'rnd' },
      ...(from === undefined ? {} : { handle: from.handle, offset: from.offset as `${number}_${number}` }),
    })
    this.current = opened
    opened.stream.subscribe(
      (messages) => {
        if (this.current !== opened) return
        apply(this.rows, messages)
        const last = messages.at(-1)
        if (last !== undefined && isControlMessage(last) && last.headers.control === 'up-to-date') {
          this.saved = { handle: opened.stream.shapeHandle!, offset: opened.stream.lastOffset, rows: structuredClone(this.rows) }
        }
      },
      (error) => this.errors.push(error),
    )
  }

  /** Returns false if nothing was saved yet. */
  restart(): boolean {
    if (this.saved === undefined) return false
    this.stop()
    this.rows = structuredClone(this.saved.rows)
    this.restarts++
    this.start()
    return true
  }

  stop(): void {
    this.current?.abort.abort()
    this.current = undefined
  }
}

describe(`a random workload followed by official clients (seed ${SEED}, ${TRANSACTIONS} transactions)`, () => {
  it('every client ends equal to Postgres', async () => {
    const random = prng(SEED)
    const pick = <T,>(xs: readonly T[]): T => xs[Math.floor(random() * xs.length)]!
    const captured = captureWarnings()
    const whole = openStream(url, { params: { table: 'rnd' } })
    const group = openStream(url, { params: { table: 'rnd', where: 'grp = $1', params: ['1'] }, liveSse: true })
    const range = openStream(url, { params: { table: 'rnd', where: 'n > 500', replica: 'full' } })
    const shapes = { whole: shapeOf(whole.stream), group: shapeOf(group.stream), range: shapeOf(range.stream) }
    const resuming = new ResumingFollower()
    resuming.start()
    try {
      await Promise.all(Object.values(shapes).map((s) => s.value))
      const ids = new Set<number>()
      for (let i = 1; i <= 50; i++) ids.add(i)
      let nextId = 1000
      const floats = ['0', '-1.5', "'NaN'", "'Infinity'", "'-Infinity'", '1e300', '3.25']
      for (let t = 0; t < TRANSACTIONS; t++) {
        const statements: string[] = []
        const ops = 1 + Math.floor(random() * 5)
        for (let o = 0; o < ops; o++) {
          const kind = random()
          const existing = [...ids]
          if (kind < 0.3 || existing.length < 5) {
            const id = nextId++
            ids.add(id)
            statements.push(
              `INSERT INTO rnd VALUES (${id}, ${Math.floor(random() * 4)}, 'ins ${id}', ${Math.floor(random() * 1000)}, ${pick(floats)}, ${random() < 0.5}, ARRAY['a', NULL, 'x"y'], '{"new": ${id}}')`,
            )
          } else if (kind < 0.75) {
            const id = pick(existing)
            const sets = [
              `grp = ${Math.floor(random() * 4)}`,
              `v = ${random() < 0.2 ? 'NULL' : `'v${Math.floor(random() * 1e6)}, "q"'`}`,
              `n = ${Math.floor(random() * 1000)}`,
              `f = ${pick(floats)}`,
              `b = ${random() < 0.2 ? 'NULL' : String(random() < 0.5)}`,
              `tags = ARRAY['t${Math.floor(random() * 9)}', '{b}']`,
              `doc = doc || '{"u": ${t}}'`,
            ].filter(() => random() < 0.4)
            if (sets.length === 0) sets.push('n = n + 1')
            statements.push(`UPDATE rnd SET ${sets.join(', ')} WHERE id = ${id}`)
          } else if (kind < 0.9) {
            const id = pick(existing)
            ids.delete(id)
            statements.push(`DELETE FROM rnd WHERE id = ${id}`)
          } else {
            const id = pick(existing)
            const to = nextId++
            ids.delete(id)
            ids.add(to)
            statements.push(`UPDATE rnd SET id = ${to}, n = ${Math.floor(random() * 1000)} WHERE id = ${id}`)
          }
        }
        await cluster.query(`BEGIN; ${statements.join('; ')}; COMMIT;`)
        if (t === Math.floor(TRANSACTIONS / 2)) await eventually(() => resuming.restart(), 'a saved position to resume from')
        else if (random() < 0.1) resuming.restart()
        // Now and then let the clients catch up so live requests get held and woken, not only chained.
        if (random() < 0.15) await sleep(Math.floor(random() * 50))
      }
      await caughtUp(pipeline, cluster)
      const keyOf = (r: Record<string, string | null>): string => rowKey('public', 'rnd', r.id!)
      const want = {
        whole: await expectedClientRows(cluster, 'rnd', SCHEMA, keyOf),
        group: await expectedClientRows(cluster, 'rnd', SCHEMA, keyOf, 'grp = $1', ['1']),
        range: await expectedClientRows(cluster, 'rnd', SCHEMA, keyOf, 'n > 500'),
      }
      for (const [name, shape] of Object.entries(shapes) as Array<[keyof typeof shapes, (typeof shapes)['whole']]>) {
        await eventually(() => isDeepStrictEqual(new Map(shape.currentValue), want[name]), `shape ${name} to match Postgres`).catch(() => undefined)
        expect(new Map(shape.currentValue), name).toEqual(want[name])
      }
      await eventually(() => isDeepStrictEqual(resuming.rows, want.whole), 'the resumed follower to match Postgres').catch(() => undefined)
      expect(resuming.rows).toEqual(want.whole)
      expect(resuming.errors).toEqual([])
      expect(resuming.restarts).toBeGreaterThan(0)
      // Under a steady stream of commits each SSE request finds data already waiting, which the server
      // sends and then ends the response, as Electric does (docs/protocol.md §5.5); after three such short
      // connections the client switches to long-polling for good and says so. Allowed here, nothing else.
      expect(captured.warnings.filter((w) => !w.startsWith('[Electric] SSE connections are closing immediately'))).toEqual([])
      for (const s of Object.values(shapes)) expect(s.error).toBe(false)
    } finally {
      captured.restore()
      resuming.stop()
      for (const s of [whole, group, range]) s.abort.abort()
    }
  })
})
