import { usePostgres } from '@sluice/test-utils'
import type { FastifyInstance } from 'fastify'
import pg from 'pg'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { buildTodoApi } from '../server/api.js'
import { MIGRATIONS, migrate } from '../server/schema.js'

/** The write API against a real Postgres (requests through fastify's inject: no socket needed to test validation). */
describe('todo API', () => {
  const cluster = usePostgres()
  let pool: pg.Pool
  let app: FastifyInstance

  beforeAll(async () => {
    pool = new pg.Pool({ connectionString: cluster.url, max: 4 })
    // Two processes starting at once: the advisory lock makes one wait, then find nothing to do.
    const results = await Promise.all([migrate(pool), migrate(pool)])
    expect(results.map((r) => r.applied).sort()).toEqual([0, MIGRATIONS.length])
    app = buildTodoApi({ pool, shapeUrl: 'http://127.0.0.1:1/v1/shape' })
  })

  afterAll(async () => {
    await app?.close()
    await pool?.end()
  })

  const send = (method: 'POST' | 'PATCH' | 'DELETE', url: string, payload?: object | string) =>
    app.inject({ method, url, ...(payload === undefined ? {} : { payload, headers: { 'content-type': 'application/json' } }) })

  /** The 32-bit xid that wrote the row's current version, as the replication stream's txids carry it. */
  async function xminOf(table: 'lists' | 'todos', id: string): Promise<string> {
    const { rows } = await pool.query<{ xmin: string }>(`SELECT xmin::text AS xmin FROM ${table} WHERE id = $1`, [id])
    return rows[0]!.xmin
  }

  const low32 = (txid: string) => String(BigInt(txid) & 0xffffffffn)

  it('answers each write with the id of the transaction that made it', async () => {
    const list = await send('POST', '/api/lists', { name: '  Errands  ' })
    expect(list.statusCode).toBe(201)
    const { id: listId, txid } = list.json<{ id: string; txid: string }>()
    expect(txid).toMatch(/^\d+$/)
    expect(await xminOf('lists', listId)).toBe(low32(txid))
    expect((await pool.query('SELECT name FROM lists WHERE id = $1', [listId])).rows[0].name).toBe('Errands')

    const id = crypto.randomUUID()
    const todo = await send('POST', '/api/todos', { id, list_id: listId, title: 'Post a letter' })
    expect(todo.statusCode).toBe(201)
    expect(todo.json().id).toBe(id)
    expect(await xminOf('todos', id)).toBe(low32(todo.json().txid))

    const toggled = await send('PATCH', `/api/todos/${id}`, { completed: true })
    expect(toggled.statusCode).toBe(200)
    expect(await xminOf('todos', id)).toBe(low32(toggled.json().txid))
    const renamed = await send('PATCH', `/api/todos/${id}`, { title: 'Post two letters' })
    expect((await pool.query('SELECT title, completed FROM todos WHERE id = $1', [id])).rows[0]).toEqual({ title: 'Post two letters', completed: true })
    expect(BigInt(renamed.json().txid)).toBeGreaterThan(BigInt(toggled.json().txid))
  })

  it('clears completed todos of one list only, and deletes a list with its todos in one transaction', async () => {
    const a = (await send('POST', '/api/lists', { name: 'A' })).json().id as string
    const b = (await send('POST', '/api/lists', { name: 'B' })).json().id as string
    for (const [list, title, completed] of [
      [a, 'a1', true],
      [a, 'a2', false],
      [b, 'b1', true],
    ] as const) {
      expect((await send('POST', '/api/todos', { list_id: list, title, completed })).statusCode).toBe(201)
    }
    const cleared = await send('POST', `/api/lists/${a}/clear-completed`)
    expect(cleared.json()).toMatchObject({ id: a, deleted: 1 })
    const titles = async () => (await pool.query('SELECT title FROM todos WHERE list_id IN ($1, $2) ORDER BY title', [a, b])).rows.map((r) => r.title)
    expect(await titles()).toEqual(['a2', 'b1'])
    expect((await send('POST', `/api/lists/${a}/clear-completed`)).json()).toMatchObject({ deleted: 0 })

    const deleted = await send('DELETE', `/api/lists/${b}`)
    expect(deleted.statusCode).toBe(200)
    expect(await titles()).toEqual(['a2'])
  })

  it('refuses bad input with a 4xx naming the field', async () => {
    const list = (await send('POST', '/api/lists', { name: 'Valid' })).json().id as string
    const missing = crypto.randomUUID()
    const cases: Array<[string, Awaited<ReturnType<typeof send>>, number, object]> = [
      ['no list_id', await send('POST', '/api/todos', { title: 'x' }), 400, { error: 'invalid_request', message: 'body.list_id is required', field: 'list_id' }],
      ['unknown field', await send('POST', '/api/lists', { name: 'x', colour: 'red' }), 400, { message: 'body.colour is not a known field', field: 'colour' }],
      ['blank name', await send('POST', '/api/lists', { name: '   ' }), 400, { message: 'body.name must not be blank', field: 'name' }],
      ['empty title', await send('POST', '/api/todos', { list_id: list, title: '' }), 400, { field: 'title' }],
      ['title too long', await send('POST', '/api/todos', { list_id: list, title: 'x'.repeat(501) }), 400, { field: 'title' }],
      ['completed not a boolean', await send('PATCH', `/api/todos/${missing}`, { completed: 'yes' }), 400, { field: 'completed' }],
      ['empty patch', await send('PATCH', `/api/todos/${missing}`, {}), 400, { error: 'invalid_request' }],
      ['bad id', await send('DELETE', '/api/todos/42'), 400, { message: 'params.id must match format "uuid"', field: 'id' }],
      ['not JSON', await send('POST', '/api/lists', '{"name":'), 400, { error: 'invalid_request' }],
      ['no such list', await send('POST', '/api/todos', { list_id: missing, title: 'x' }), 404, { error: 'list_not_found', field: 'list_id' }],
      ['no such todo', await send('PATCH', `/api/todos/${missing}`, { title: 'x' }), 404, { error: 'todo_not_found' }],
      ['no such list to rename', await send('PATCH', `/api/lists/${missing}`, { name: 'x' }), 404, { error: 'list_not_found' }],
      ['no such list to clear', await send('POST', `/api/lists/${missing}/clear-completed`), 404, { error: 'list_not_found' }],
      ['id taken', await send('POST', '/api/lists', { id: list, name: 'again' }), 409, { error: 'already_exists', field: 'id' }],
    ]
    for (const [what, response, status, body] of cases) {
      expect(response.statusCode, what).toBe(status)
      expect(response.json(), what).toMatchObject(body)
    }
  })

  it('shares a list with a user and stops sharing it; a deleted list takes its members with it', async () => {
    const list = (await send('POST', '/api/lists', { name: 'Shared' })).json().id as string
    const members = async () => (await pool.query('SELECT member FROM list_members WHERE list_id = $1 ORDER BY member', [list])).rows.map((r) => r.member)
    const shared = await send('POST', `/api/lists/${list}/members`, { member: 'alice' })
    expect(shared.statusCode).toBe(201)
    expect(shared.json()).toMatchObject({ id: list })
    const { rows } = await pool.query<{ xmin: string }>('SELECT xmin::text AS xmin FROM list_members WHERE list_id = $1', [list])
    expect(rows[0]!.xmin).toBe(low32(shared.json().txid))
    // Sharing again changes nothing and is not an error.
    expect((await send('POST', `/api/lists/${list}/members`, { member: 'alice' })).statusCode).toBe(201)
    expect((await send('POST', `/api/lists/${list}/members`, { member: 'bob' })).statusCode).toBe(201)
    expect(await members()).toEqual(['alice', 'bob'])

    const unshared = await send('DELETE', `/api/lists/${list}/members/alice`)
    expect(unshared.statusCode).toBe(200)
    expect(await members()).toEqual(['bob'])

    const missing = crypto.randomUUID()
    const cases: Array<[string, Awaited<ReturnType<typeof send>>, number, object]> = [
      ['not a user name', await send('POST', `/api/lists/${list}/members`, { member: 'Alice Smith' }), 400, { error: 'invalid_request', field: 'member' }],
      ['no member', await send('POST', `/api/lists/${list}/members`, {}), 400, { message: 'body.member is required' }],
      ['no such list', await send('POST', `/api/lists/${missing}/members`, { member: 'carol' }), 404, { error: 'list_not_found' }],
      ['not shared with them', await send('DELETE', `/api/lists/${list}/members/alice`), 404, { error: 'member_not_found' }],
    ]
    for (const [what, response, status, body] of cases) {
      expect(response.statusCode, what).toBe(status)
      expect(response.json(), what).toMatchObject(body)
    }

    expect((await send('DELETE', `/api/lists/${list}`)).statusCode).toBe(200)
    expect(await members()).toEqual([])
  })

  it('tells the browser where to read shapes from', async () => {
    expect((await app.inject({ method: 'GET', url: '/api/config' })).json()).toEqual({ shapeUrl: 'http://127.0.0.1:1/v1/shape' })
    expect((await app.inject({ method: 'GET', url: '/api/health' })).json()).toEqual({ status: 'ok' })
  })
})
