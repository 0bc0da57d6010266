/**
 * A warm standby (`sluice start --standby`, standby.ts): it restores the
 * writer's shapes from the heads file before it holds the lock, follows each
 * new heads file while it waits (shapes made and deleted meanwhile), and at
 * the writer's kill -9 takes over with what changed since its last reading
 * (a shape made, a shape deleted, logs grown, rows written while no writer
 * ran): every shape that lives keeps its handle and ends equal to Postgres
 * from the offsets its clients had, every deleted one answers 409.
 */
import { chmod } from 'node:fs/promises'
import { usePostgres, useTempDir } from '@sluice/test-utils'
import { describe, expect, it } from 'vitest'
import { type Run, sluice } from './sluice-run.js'

const dirs = useTempDir('standby')
const cluster = usePostgres()

const HTTP = /HTTP: +(http:\/\/127\.0\.0\.1:\d+)/
const TABLE = 'standby_groups'

function start(dir: string, extra: readonly string[]): Run {
  return sluice(['start', '--port', '0', '--storage-dir', dir, '--database-url', cluster.url, '--log-level', 'info', '--allow-delete', ...extra])
}

/** A line of the log with `message` and `shapes` at `count`, whatever the log's format. */
function logLine(message: string, count: number): RegExp {
  return new RegExp(`(?=[^\\n]*${message})[^\\n]*"?shapes"?:\\s*${count}\\b`)
}

type Row = Record<string, string>

/** A client of one shape: its handle, offset and the rows it holds. */
interface Client {
  readonly group: number
  handle: string
  offset: string
  readonly rows: Map<string, Row>
}

interface Message {
  readonly key?: string
  readonly value?: Row
  readonly headers?: { readonly operation?: string; readonly control?: string }
}

function shapeUrl(base: string, group: number, params: Record<string, string>): string {
  const query = new URLSearchParams({ table: TABLE, where: `grp = ${group}`, ...params })
  return `${base}/v1/shape?${query}`
}

/** Reads until up to date, applying what comes to the client's rows; returns the last status. */
async function catchUp(base: string, client: Client): Promise<number> {
  for (let n = 0; n < 50; n++) {
    const r = await fetch(shapeUrl(base, client.group, { handle: client.handle, offset: client.offset }))
    const body = (await r.json()) as Message[] | { code?: string }
    if (r.status !== 200) return r.status
    client.offset = r.headers.get('electric-offset')!
    let upToDate = false
    for (const m of body as Message[]) {
      if (m.headers?.control === 'up-to-date') upToDate = true
      if (m.key === undefined) continue
      const op = m.headers?.operation
      if (op === 'delete') client.rows.delete(m.key)
      else client.rows.set(m.key, { ...(client.rows.get(m.key) ?? {}), ...m.value })
    }
    if (upToDate) return 200
  }
  throw new Error(`shape grp = ${client.group} never caught up`)
}

async function subscribe(base: string, group: number): Promise<Client> {
  const r = await fetch(shapeUrl(base, group, { offset: '-1' }))
  await r.arrayBuffer()
  expect(r.status).toBe(200)
  const client: Client = { group, handle: r.headers.get('electric-handle')!, offset: '-1', rows: new Map() }
  expect(await catchUp(base, client)).toBe(200)
  return client
}

/** Deletes the shape through the writer (DELETE answers 202; a request naming the handle would make the shape again). */
async function deleteShape(base: string, client: Client): Promise<void> {
  expect((await fetch(shapeUrl(base, client.group, { handle: client.handle }), { method: 'DELETE' })).status).toBe(202)
}

function held(client: Client): Array<{ id: number; title: string }> {
  return [...client.rows.values()].map((r) => ({ id: Number(r.id), title: String(r.title) })).sort((a, b) => a.id - b.id)
}

/**
 * Follows the shape (long-polls once up to date) until it holds what Postgres
 * holds: up to date means up to what the server has routed, and a server that
 * just took over may still be streaming what was committed before.
 */
async function expectEqualToPostgres(base: string, client: Client): Promise<void> {
  const { rows } = await cluster.query<{ id: number; title: string }>(`SELECT id, title FROM ${TABLE} WHERE grp = $1 ORDER BY id`, [client.group])
  const deadline = performance.now() + 30_000
  while (JSON.stringify(held(client)) !== JSON.stringify(rows) && performance.now() < deadline) {
    const r = await fetch(shapeUrl(base, client.group, { handle: client.handle, offset: client.offset, live: 'true' }))
    await r.arrayBuffer()
    expect(r.status).toBe(200)
    expect(await catchUp(base, client)).toBe(200)
  }
  expect(held(client)).toEqual(rows)
}

let nextId = 1
async function insert(group: number, count = 1): Promise<void> {
  for (let i = 0; i < count; i++) {
    const id = nextId++
    await cluster.query(`INSERT INTO ${TABLE} VALUES ($1, $2, $3)`, [id, group, `row ${id}`])
  }
}

describe('warm standby', () => {
  it('follows the shapes made and deleted while it waits, and takes over after a kill -9 with what changed since', { timeout: 240_000 }, async () => {
    const dir = await dirs.make('store')
    await chmod(dir, 0o755)
    await cluster.query(`CREATE TABLE ${TABLE} (id int PRIMARY KEY, grp int NOT NULL, title text NOT NULL)`)
    for (const group of [1, 2, 3, 4]) await insert(group, 2)
    const writer = start(dir, ['--heads-interval', '300ms'])
    const [, writerUrl] = await writer.waitFor(HTTP, 120_000)
    const clients = new Map<number, Client>()
    for (const group of [1, 2, 3, 4]) clients.set(group, await subscribe(writerUrl!, group))
    // The four in the heads file before the standby reads it.
    await new Promise((r) => setTimeout(r, 1_000))

    const standby = start(dir, ['--standby', '--standby-refresh', '200ms'])
    await standby.waitFor(logLine('standby: prepared', 4), 120_000)
    await standby.waitFor(/standby: waiting for the writer lock/, 120_000)

    // Followed through a new heads file: rows, a shape made, a shape deleted.
    await insert(1)
    await insert(2)
    await cluster.query(`UPDATE ${TABLE} SET title = 'changed' WHERE id = 3`)
    for (const group of [5, 7]) {
      await insert(group, 2)
      clients.set(group, await subscribe(writerUrl!, group))
    }
    const deleted3 = clients.get(3)!
    await deleteShape(writerUrl!, deleted3)
    for (const group of [1, 2]) expect(await catchUp(writerUrl!, clients.get(group)!)).toBe(200)
    await standby.waitFor(logLine('standby: followed the writer', 5), 60_000)

    // Left to the takeover (or followed, if a heads file comes first: the outcome is the same).
    await insert(6, 2)
    clients.set(6, await subscribe(writerUrl!, 6))
    const deleted4 = clients.get(4)!
    await deleteShape(writerUrl!, deleted4)
    await insert(1)
    await insert(5)
    await cluster.query(`UPDATE ${TABLE} SET title = 'again' WHERE id = 1`)
    writer.child.kill('SIGKILL')
    await writer.exited
    // While no writer runs: the standby takes them from the slot.
    await insert(6)
    await cluster.query(`DELETE FROM ${TABLE} WHERE id = 2`)

    const [, url] = await standby.waitFor(HTTP, 120_000)
    expect(standby.stdout).toMatch(logLine('shapes restored', 5))
    for (const group of [1, 2, 5, 6, 7]) {
      const client = clients.get(group)!
      const handle = client.handle
      expect(await catchUp(url!, client)).toBe(200)
      expect(client.handle).toBe(handle)
      await expectEqualToPostgres(url!, client)
    }
    for (const gone of [deleted3, deleted4]) {
      const r = await fetch(shapeUrl(url!, gone.group, { handle: gone.handle, offset: gone.offset }))
      await r.arrayBuffer()
      expect(r.status).toBe(409)
    }

    // A writer now: a change reaches a live client.
    const live = clients.get(2)!
    const waiting = fetch(shapeUrl(url!, 2, { handle: live.handle, offset: live.offset, live: 'true' }))
    await insert(2)
    expect((await waiting).status).toBe(200)
    expect(await catchUp(url!, live)).toBe(200)
    await expectEqualToPostgres(url!, live)
    standby.child.kill('SIGINT')
    expect((await standby.exited).code).toBe(0)
  })

  it('a standby stopped while it waits exits at once and leaves the writer alone', { timeout: 120_000 }, async () => {
    const dir = await dirs.make('store')
    await chmod(dir, 0o755)
    await cluster.query('CREATE TABLE standby_stop (id int PRIMARY KEY, title text NOT NULL)')
    await cluster.query("INSERT INTO standby_stop VALUES (1, 'one')")
    const writer = start(dir, [])
    const [, writerUrl] = await writer.waitFor(HTTP, 120_000)
    const first = await fetch(`${writerUrl}/v1/shape?table=standby_stop&offset=-1`)
    await first.arrayBuffer()
    const handle = first.headers.get('electric-handle')!
    const offset = first.headers.get('electric-offset')!
    const standby = start(dir, ['--standby'])
    await standby.waitFor(/standby: waiting for the writer lock/, 120_000)
    const stoppedAt = performance.now()
    standby.child.kill('SIGTERM')
    expect((await standby.exited).code).toBe(0)
    expect(performance.now() - stoppedAt).toBeLessThan(10_000)
    expect(standby.stdout).toMatch(/stopped while waiting for the writer lock/)
    // The writer never noticed.
    await cluster.query("INSERT INTO standby_stop VALUES (2, 'two')")
    const live = await fetch(`${writerUrl}/v1/shape?table=standby_stop&handle=${handle}&offset=${offset}&live=true`)
    expect(live.status).toBe(200)
    expect(JSON.stringify(await live.json())).toContain('"two"')
    writer.child.kill('SIGINT')
    expect((await writer.exited).code).toBe(0)
  })

  it('a read replica stopped while it waits for a writer to create the store exits at once', { timeout: 60_000 }, async () => {
    const dir = await dirs.make('empty')
    await chmod(dir, 0o755)
    const replica = start(dir, ['--read-only'])
    await replica.waitFor(/read replica: waiting for a writer to create the store/, 30_000)
    // Still waiting a moment later: the wait itself is not what ends it.
    await new Promise((r) => setTimeout(r, 500))
    expect(replica.child.exitCode).toBeNull()
    const stoppedAt = performance.now()
    replica.child.kill('SIGTERM')
    expect(await replica.exited).toEqual({ code: 0, signal: null })
    // The first signal ended the wait (before the fix it was ignored, and only a second one ended the process).
    expect(performance.now() - stoppedAt).toBeLessThan(10_000)
    expect(replica.stdout).toMatch(/stopped while waiting for a writer to create the store/)
    expect(replica.stderr).not.toContain('start-up failed')
  })
})
