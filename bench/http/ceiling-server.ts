/**
 * The ceiling of the HTTP benchmark: a bare fastify app, in a process of its
 * own, that does the least an HTTP sync server could do for the same requests:
 * `GET /v1/shape?table=http_rows&offset=-1` answers the bytes and headers
 * Sluice answered for the same request (captured by the orchestrator), from
 * one Buffer in memory: no storage, no shape lookup, no validation. (The live
 * ceiling, woken by LISTEN/NOTIFY, is in `../live/ceiling-server.ts`.)
 *
 * Commands (JSON lines, `json-lines.ts`): `listen {initialHeaders,
 * initialBodyBase64}` -> `{port}`.
 */
import type { AddressInfo } from 'node:net'
import Fastify from 'fastify'
import { serveCommands } from './json-lines.js'
import { ROWS_TABLE } from './schema.js'

async function listen(args: Record<string, unknown>): Promise<{ port: number }> {
  const initialBody = Buffer.from(String(args.initialBodyBase64), 'base64')
  const initialHeaders = args.initialHeaders as Record<string, string>

  const app = Fastify({ logger: false })
  app.get('/v1/shape', async (request, reply) => {
    const q = request.query as Record<string, string | undefined>
    if (q.table === ROWS_TABLE && q.offset === '-1') return reply.headers(initialHeaders).send(initialBody)
    return reply.code(400).header('content-type', 'application/json; charset=utf-8').send('{"message":"Invalid request"}')
  })
  await app.listen({ port: 0, host: '127.0.0.1' })
  return { port: (app.server.address() as AddressInfo).port }
}

serveCommands({ listen })
