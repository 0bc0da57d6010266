// The todo app's write API. Reads never come here: the browser follows the
// `lists` and `todos` shapes from Sluice. Every write runs in one transaction
// and answers that transaction's id, which the browser waits to see in its
// shapes before dropping the optimistic copy of the change.
import { existsSync } from 'node:fs'
import fastifyStatic from '@fastify/static'
import Fastify, { type FastifyError, type FastifyInstance, type FastifyReply } from 'fastify'
import type pg from 'pg'

export interface TodoApiOptions {
  readonly pool: pg.Pool
  /** The Sluice shape endpoint the browser should read from (a CDN's, when one is in front). */
  readonly shapeUrl: string
  /** The built app (vite build output) to serve at `/`; none: API only. */
  readonly staticDir?: string | undefined
  readonly logger?: boolean
}

/** Client-visible failures; the `error` code is stable, the message is for people. */
export class ApiError extends Error {
  override readonly name = 'ApiError'
  constructor(
    readonly statusCode: number,
    readonly code: string,
    message: string,
    readonly field?: string,
  ) {
    super(message)
  }
}

/** A list name or todo title: what a single line in the UI can reasonably hold. */
const MAX_TEXT = 500

const uuid = { type: 'string', format: 'uuid' } as const
const text = { type: 'string', minLength: 1, maxLength: MAX_TEXT, pattern: '\\S' } as const
const idParams = { type: 'object', required: ['id'], properties: { id: uuid } } as const
/** A user name as the sharing view names people: short, lower case, no spaces (it ends up in URLs). */
const memberName = { type: 'string', pattern: '^[a-z0-9][a-z0-9_.-]{0,39}$' } as const

interface WriteResult {
  readonly txid: string
}

/**
 * Runs `work` in a transaction and returns its result with the transaction's
 * id. `pg_current_xact_id()` is read inside the same transaction, after the
 * write, so it is the xid that the write's changes carry in the replication
 * stream (and in Sluice's `txids` headers).
 */
async function inTransaction<T extends object>(pool: pg.Pool, work: (client: pg.PoolClient) => Promise<T>): Promise<T & WriteResult> {
  const client = await pool.connect()
  try {
    await client.query('BEGIN')
    const result = await work(client)
    const { rows } = await client.query<{ txid: string }>('SELECT pg_current_xact_id()::text AS txid')
    await client.query('COMMIT')
    return { ...result, txid: rows[0]!.txid }
  } catch (error) {
    await client.query('ROLLBACK').catch(() => {})
    throw error
  } finally {
    client.release()
  }
}

function notFound(what: 'list' | 'todo', id: string): ApiError {
  return new ApiError(404, `${what}_not_found`, `No ${what} with id ${id}`)
}

/** Postgres errors a request can cause, as the API reports them. */
function fromPostgres(error: unknown): ApiError | undefined {
  const code = (error as { code?: unknown }).code
  if (code === '23505') return new ApiError(409, 'already_exists', 'A row with this id already exists', 'id')
  if (code === '23503') return new ApiError(404, 'list_not_found', 'The list does not exist (it may have just been deleted)', 'list_id')
  return undefined
}

function sendError(reply: FastifyReply, error: ApiError): FastifyReply {
  return reply.code(error.statusCode).send({ error: error.code, message: error.message, ...(error.field === undefined ? {} : { field: error.field }) })
}

export function buildTodoApi(options: TodoApiOptions): FastifyInstance {
  const { pool } = options
  const app = Fastify({
    logger: options.logger ?? false,
    // Fastify's default strips unknown properties silently; a typo'd field should be an error the caller sees.
    ajv: { customOptions: { removeAdditional: false, allErrors: false } },
  })

  app.setErrorHandler((error: FastifyError, request, reply) => {
    if (error instanceof ApiError) return sendError(reply, error)
    if (error.validation !== undefined) {
      const first = error.validation[0]
      const where = error.validationContext ?? 'body'
      const path = first?.instancePath.replace(/^\//, '').replaceAll('/', '.') ?? ''
      const missing = (first?.params as { missingProperty?: string } | undefined)?.missingProperty
      const extra = (first?.params as { additionalProperty?: string } | undefined)?.additionalProperty
      const field = missing ?? extra ?? (path === '' ? undefined : path)
      const problem =
        extra !== undefined
          ? 'is not a known field'
          : missing !== undefined
            ? 'is required'
            : first?.keyword === 'pattern'
              ? field === 'member'
                ? 'must be 1-40 lower-case letters, digits, ".", "_" or "-"'
                : 'must not be blank'
              : (first?.message ?? 'is invalid')
      const message = field === undefined ? `${where} ${problem}` : `${where}.${field} ${problem}`
      return sendError(reply, new ApiError(400, 'invalid_request', message, field))
    }
    const known = fromPostgres(error)
    if (known !== undefined) return sendError(reply, known)
    if (error.statusCode !== undefined && error.statusCode >= 400 && error.statusCode < 500) {
      return sendError(reply, new ApiError(error.statusCode, 'invalid_request', error.message))
    }
    request.log.error({ err: error }, 'todo api: unexpected error')
    return reply.code(500).send({ error: 'internal', message: 'Internal server error' })
  })

  app.get('/api/config', async () => ({ shapeUrl: options.shapeUrl }))
  app.get('/api/health', async () => {
    await pool.query('SELECT 1')
    return { status: 'ok' }
  })

  app.post<{ Body: { id?: string; name: string } }>(
    '/api/lists',
    { schema: { body: { type: 'object', required: ['name'], additionalProperties: false, properties: { id: uuid, name: text } } } },
    async (request, reply) => {
      const { id, name } = request.body
      const result = await inTransaction(pool, async (client) => {
        const { rows } = await client.query('INSERT INTO lists (id, name) VALUES (coalesce($1::uuid, gen_random_uuid()), $2) RETURNING id', [id ?? null, name.trim()])
        return { id: rows[0].id as string }
      })
      return reply.code(201).send(result)
    },
  )

  app.patch<{ Params: { id: string }; Body: { name: string } }>(
    '/api/lists/:id',
    { schema: { params: idParams, body: { type: 'object', required: ['name'], additionalProperties: false, properties: { name: text } } } },
    async (request) => {
      const { id } = request.params
      return inTransaction(pool, async (client) => {
        const { rowCount } = await client.query('UPDATE lists SET name = $2 WHERE id = $1', [id, request.body.name.trim()])
        if (rowCount === 0) throw notFound('list', id)
        return { id }
      })
    },
  )

  app.delete<{ Params: { id: string } }>('/api/lists/:id', { schema: { params: idParams } }, async (request) => {
    const { id } = request.params
    return inTransaction(pool, async (client) => {
      // Its todos go with it (ON DELETE CASCADE), in this same transaction.
      const { rowCount } = await client.query('DELETE FROM lists WHERE id = $1', [id])
      if (rowCount === 0) throw notFound('list', id)
      return { id }
    })
  })

  app.post<{ Params: { id: string } }>('/api/lists/:id/clear-completed', { schema: { params: idParams } }, async (request) => {
    const { id } = request.params
    return inTransaction(pool, async (client) => {
      const list = await client.query('SELECT 1 FROM lists WHERE id = $1', [id])
      if (list.rowCount === 0) throw notFound('list', id)
      const { rowCount } = await client.query('DELETE FROM todos WHERE list_id = $1 AND completed', [id])
      return { id, deleted: rowCount ?? 0 }
    })
  })

  app.post<{ Params: { id: string }; Body: { member: string } }>(
    '/api/lists/:id/members',
    { schema: { params: idParams, body: { type: 'object', required: ['member'], additionalProperties: false, properties: { member: memberName } } } },
    async (request, reply) => {
      const { id } = request.params
      const result = await inTransaction(pool, async (client) => {
        // Sharing twice is not an error: the list is shared with them either way.
        const { rowCount } = await client.query(
          'INSERT INTO list_members (list_id, member) SELECT id, $2 FROM lists WHERE id = $1 ON CONFLICT DO NOTHING',
          [id, request.body.member],
        )
        if (rowCount === 0 && (await client.query('SELECT 1 FROM lists WHERE id = $1', [id])).rowCount === 0) throw notFound('list', id)
        return { id }
      })
      return reply.code(201).send(result)
    },
  )

  app.delete<{ Params: { id: string; member: string } }>(
    '/api/lists/:id/members/:member',
    { schema: { params: { type: 'object', required: ['id', 'member'], properties: { id: uuid, member: memberName } } } },
    async (request) => {
      const { id, member } = request.params
      return inTransaction(pool, async (client) => {
        const { rowCount } = await client.query('DELETE FROM list_members WHERE list_id = $1 AND member = $2', [id, member])
        if (rowCount === 0) throw new ApiError(404, 'member_not_found', `List ${id} is not shared with ${member}`)
        return { id }
      })
    },
  )

  app.post<{ Body: { id?: string; list_id: string; title: string; completed?: boolean } }>(
    '/api/todos',
    {
      schema: {
        body: {
          type: 'object',
          required: ['list_id', 'title'],
          additionalProperties: false,
          properties: { id: uuid, list_id: uuid, title: text, completed: { type: 'boolean' } },
        },
      },
    },
    async (request, reply) => {
      const { id, list_id: listId, title, completed } = request.body
      const result = await inTransaction(pool, async (client) => {
        const { rows } = await client.query(
          'INSERT INTO todos (id, list_id, title, completed) VALUES (coalesce($1::uuid, gen_random_uuid()), $2, $3, $4) RETURNING id',
          [id ?? null, listId, title.trim(), completed ?? false],
        )
        return { id: rows[0].id as string }
      })
      return reply.code(201).send(result)
    },
  )

  app.patch<{ Params: { id: string }; Body: { title?: string; completed?: boolean } }>(
    '/api/todos/:id',
    {
      schema: {
        params: idParams,
        body: { type: 'object', minProperties: 1, additionalProperties: false, properties: { title: text, completed: { type: 'boolean' } } },
      },
    },
    async (request) => {
      const { id } = request.params
      const { title, completed } = request.body
      return inTransaction(pool, async (client) => {
        const { rowCount } = await client.query(
          'UPDATE todos SET title = coalesce($2, title), completed = coalesce($3, completed) WHERE id = $1',
          [id, title?.trim() ?? null, completed ?? null],
        )
        if (rowCount === 0) throw notFound('todo', id)
        return { id }
      })
    },
  )

  app.delete<{ Params: { id: string } }>('/api/todos/:id', { schema: { params: idParams } }, async (request) => {
    const { id } = request.params
    return inTransaction(pool, async (client) => {
      const { rowCount } = await client.query('DELETE FROM todos WHERE id = $1', [id])
      if (rowCount === 0) throw notFound('todo', id)
      return { id }
    })
  })

  if (options.staticDir !== undefined) {
    if (!existsSync(options.staticDir)) throw new Error(`todo api: no built app at ${options.staticDir} (run the build first)`)
    app.register(fastifyStatic, { root: options.staticDir, wildcard: false })
  }

  return app
}
