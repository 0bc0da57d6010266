// Transactions the replication stream delivers before snapshots see them. The stream orders transactions by
// their commit records; a snapshot sees a transaction once its backend has left the proc array, which a backend
// waiting for a synchronous standby has not: its transaction is in the WAL, delivered, and invisible. (Without
// synchronous replication the same gap is a backend not scheduled between the two steps, under load.) Made
// deterministic here: every session commits locally, except the ones a test makes wait for a standby that never
// comes; `pg_cancel_backend` ends one such wait, and the transaction becomes visible.
import pg from 'pg'
import { useTempDir, usePostgres } from '@sluice/test-utils'
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest'
import type { Pipeline } from '../../src/pipeline.js'
import { startPipeline } from '../pipeline/harness.js'
import { type TestServer, call, messages, shapeUrl, startServer } from './http-harness.js'

const cluster = usePostgres({ settings: { synchronous_commit: 'local', synchronous_standby_names: 'nobody' } })
const dirs = useTempDir('commit-visibility')
let pipeline: Pipeline
let server: TestServer

beforeAll(async () => {
  pipeline = await startPipeline(cluster, await dirs.make('store'))
  server = await startServer(pipeline, { longPollTimeoutMs: 20_000 })
}, 120_000)

afterAll(async () => {
  await server?.close()
  await pipeline?.stop()
})

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms))

/** The current transaction's xid as the stream gives it (32 bits). */
async function xidOf(client: pg.ClientBase): Promise<number> {
  const { rows } = await client.query<{ xid: string }>("SELECT (pg_current_xact_id()::text::bigint % 4294967296)::text AS xid")
  return Number(rows[0]!.xid)
}

/** Commits `sql` in a transaction of its own, visible at once; returns its xid. */
async function commitNow(sql: string): Promise<number> {
  const client = new pg.Client({ connectionString: cluster.url })
  await client.connect()
  try {
    await client.query('BEGIN')
    await client.query(sql)
    const xid = await xidOf(client)
    await client.query('COMMIT')
    return xid
  } finally {
    await client.end()
  }
}

/** Until the router has routed transaction `xid` (a shape's readers may not see it yet: a move-in holds them back). */
async function routedXid(xid: number): Promise<void> {
  for (let i = 0; !pipeline.router.recentXids.includes(xid); i++) {
    if (i > 500) throw new Error(`transaction ${xid} was never routed`)
    await sleep(10)
  }
}

/** A session whose commits wait for the standby that never comes. */
class WaitingSession {
  private readonly client = new pg.Client({ connectionString: cluster.url })
  pid = 0
  committed: Promise<unknown> = Promise.resolve()

  static async open(): Promise<WaitingSession> {
    const session = new WaitingSession()
    await session.client.connect()
    // A cancelled wait still commits, with a warning (the transaction is already in the WAL).
    session.client.on('notice', () => {})
    await session.client.query('SET synchronous_commit = on')
    session.pid = (await session.client.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!.pid
    return session
  }

  /** Commits `sql`, which stays invisible to snapshots until `release`; returns its xid. */
  async commit(sql: string): Promise<number> {
    await this.client.query('BEGIN')
    await this.client.query(sql)
    const xid = await xidOf(this.client)
    this.committed = this.client.query('COMMIT')
    return xid
  }

  async release(): Promise<void> {
    await cluster.query('SELECT pg_cancel_backend($1)', [this.pid])
    await this.committed
  }

  end(): Promise<void> {
    return this.client.end()
  }
}

const sessions: WaitingSession[] = []
afterEach(async () => {
  for (const s of sessions.splice(0)) {
    await s.release().catch(() => {})
    await s.end().catch(() => {})
  }
})

async function waiting(): Promise<WaitingSession> {
  const session = await WaitingSession.open()
  sessions.push(session)
  return session
}

interface Read {
  readonly status: number
  readonly handle: string
  readonly rows: Map<string, Record<string, unknown>>
  /** Inserts of a key the log had already inserted (and not deleted since): a row sent twice. */
  readonly duplicates: string[]
}

/** The shape's whole log, from `-1` to up-to-date, as a client would hold it. */
async function readShape(table: string, where?: string): Promise<Read> {
  const rows = new Map<string, Record<string, unknown>>()
  const duplicates: string[] = []
  let offset = '-1'
  let handle = ''
  for (let i = 0; i < 100; i++) {
    const res = await call(server.port, shapeUrl({ table, ...(where === undefined ? {} : { where }), offset, ...(handle === '' ? {} : { handle }) }))
    if (res.status !== 200) return { status: res.status, handle, rows, duplicates }
    handle = res.header('electric-handle')!
    offset = res.header('electric-offset')!
    for (const m of messages(res) as { key?: string; value?: Record<string, unknown>; headers: Record<string, unknown> }[]) {
      if (m.key === undefined) continue
      const op = m.headers['operation']
      if (op === 'delete') rows.delete(m.key)
      else {
        if (op === 'insert' && rows.has(m.key)) duplicates.push(m.key)
        rows.set(m.key, { ...rows.get(m.key), ...m.value })
      }
    }
    if (res.header('electric-up-to-date') !== undefined) return { status: 200, handle, rows, duplicates }
  }
  throw new Error('never up to date')
}

/** Until the whole-table shape holds `key`: the server has routed the transaction that made it. */
async function routed(table: string, key: string): Promise<void> {
  for (let i = 0; i < 200; i++) {
    if ((await readShape(table)).rows.has(key)) return
    await sleep(25)
  }
  throw new Error(`${key} never reached ${table}'s shape`)
}

const keysOf = (read: Read): string[] => [...read.rows.keys()].sort()

/**
 * `<p>_posts` of active `<p>_users` (user 1 inactive, user 2 active with post
 * 10), read once from -1 so the shape exists, and a whole-table shape of the
 * posts too (`routed` reads it).
 */
async function postsOfActiveUsers(prefix: string): Promise<{ key(id: number): string; expectOnce(ids: number[]): Promise<void> }> {
  const posts = `${prefix}_posts`
  await cluster.query(`CREATE TABLE ${prefix}_users (id int PRIMARY KEY, active bool);
    CREATE TABLE ${posts} (id int PRIMARY KEY, user_id int);
    INSERT INTO ${prefix}_users VALUES (1, false), (2, true);
    INSERT INTO ${posts} VALUES (10, 2);`)
  const where = `user_id IN (SELECT id FROM ${prefix}_users WHERE active)`
  const key = (id: number): string => `"public"."${posts}"/"${id}"`
  const first = await readShape(posts, where)
  expect(keysOf(first)).toEqual([key(10)])
  expect(keysOf(await readShape(posts))).toEqual([key(10)])
  return {
    key,
    /** Until the shape holds exactly these posts: the same handle throughout (no 409), no row sent twice. */
    async expectOnce(ids) {
      const want = ids.map(key).sort()
      for (let i = 0; ; i++) {
        const read = await readShape(posts, where)
        expect(read.handle).toBe(first.handle)
        expect(read.duplicates).toEqual([])
        if (read.rows.size === want.length) {
          expect(keysOf(read)).toEqual(want)
          return
        }
        if (i > 100) throw new Error(`the move-in never brought every post in: ${keysOf(read).join(', ')}`)
        await sleep(50)
      }
    },
  }
}

describe('transactions delivered before snapshots see them', () => {
  it('a shape made meanwhile answers 503 until its snapshot sees them, then holds their rows', async () => {
    await cluster.query('CREATE TABLE cv_items (id int PRIMARY KEY, v text)')
    expect((await readShape('cv_items')).rows.size).toBe(0)
    const session = await waiting()
    await session.commit("INSERT INTO cv_items VALUES (1, 'a')")
    await routed('cv_items', '"public"."cv_items"/"1"')
    expect((await cluster.query('SELECT count(*)::int AS n FROM cv_items')).rows[0]).toEqual({ n: 0 })

    const early = await call(server.port, shapeUrl({ table: 'cv_items', where: "v = 'a'", offset: '-1' }))
    expect(early.status, early.text).toBe(503)
    expect(JSON.parse(early.text)).toMatchObject({ message: 'Snapshot creation failed' })
    expect(Number(early.header('retry-after'))).toBeGreaterThan(0)

    await session.release()
    const later = await readShape('cv_items', "v = 'a'")
    expect(later.status).toBe(200)
    expect(keysOf(later)).toEqual(['"public"."cv_items"/"1"'])
  })

  it('a move-in whose query misses a transaction routed before the move runs again once it is visible: the row comes in once, no 409', async () => {
    const shape = await postsOfActiveUsers('cv')
    // Routed while user 1 is inactive (judged out of the shape), invisible to the move-in's snapshot.
    const session = await waiting()
    await session.commit('INSERT INTO cv_posts VALUES (100, 1)')
    await routed('cv_posts', shape.key(100))
    await cluster.query('UPDATE cv_users SET active = true WHERE id = 1')
    await sleep(200)
    await session.release()
    await shape.expectOnce([10, 100])
  })

  it('a move-in whose query sees a held transaction but not an earlier one runs again: every row once, no 409', async () => {
    const shape = await postsOfActiveUsers('cv3')
    // Routed before the move and invisible: the move-in's runs wait for it...
    const before = await waiting()
    await before.commit('INSERT INTO cv3_posts VALUES (200, 1)')
    await routed('cv3_posts', shape.key(200))
    await routedXid(await commitNow('UPDATE cv3_users SET active = true WHERE id = 1'))
    // ...while two more arrive and are held: the earlier one invisible, the later one visible.
    const earlier = await waiting()
    await routedXid(await earlier.commit('INSERT INTO cv3_posts VALUES (201, 1)'))
    await routedXid(await commitNow('INSERT INTO cv3_posts VALUES (202, 1)'))
    // A run now sees 202 and not 201, which the stream delivered first.
    await before.release()
    await sleep(100)
    await earlier.release()
    await shape.expectOnce([10, 200, 201, 202])
  })
})
