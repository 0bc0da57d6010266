/**
 * The ceiling of the live benchmark: a bare fastify app, in a process of its
 * own, with a long-poll route for the `live_rows` shapes, woken in-process by
 * Postgres `LISTEN/NOTIFY` (a trigger notifies each committed update, see
 * `schema.ts`), so it is driven by the same commits Sluice replicates. Each
 * shape keeps its last few change lines in memory; a request past them waits
 * until the next notification or the long-poll timeout. No WAL decoding, no
 * durability, no storage, no where-clause evaluation (the shape is `k` taken
 * from the notification): what is left is Postgres's commit and notify, the
 * HTTP layer, and the JSON the client parses.
 *
 * Commands (JSON lines, `../http/json-lines.ts`): `listen {connectionString,
 * longPollTimeoutMs}` -> `{port}`; `stats {}` -> notifications seen.
 */
import type { AddressInfo } from 'node:net'
import Fastify from 'fastify'
import pg from 'pg'
import { serveCommands } from '../http/json-lines.js'
import { LIVE_TABLE, NOTIFY_CHANNEL } from './schema.js'

/** Change lines kept per shape: live clients are never more than a few behind. */
const KEPT_LINES = 64
const CURSOR_EPOCH_S = Date.UTC(2024, 9, 9) / 1000
const JSON_TYPE = 'application/json; charset=utf-8'
const SCHEMA = JSON.stringify({ id: { type: 'int4', pk_index: 0, not_null: true }, k: { type: 'int4', not_null: true }, stamp: { type: 'text', not_null: true } })
const EXPOSE = 'electric-cursor,electric-handle,electric-has-data,electric-offset,electric-schema,electric-up-to-date,electric-internal-known-error,retry-after'

interface Shape {
  /** Offset (as `<seq>_0`) of the last line. */
  seq: number
  readonly lines: Array<{ seq: number; line: string }>
  readonly waiters: Set<() => void>
}

const shapes = new Map<number, Shape>()
let notifications = 0
let lastLsn = '0'

function shapeOf(k: number): Shape {
  let s = shapes.get(k)
  if (s === undefined) {
    s = { seq: 0, lines: [], waiters: new Set() }
    shapes.set(k, s)
  }
  return s
}

function onNotification(payload: string): void {
  const n = JSON.parse(payload) as { id: string; k: number; stamp: string; xid: number; lsn: string }
  notifications++
  lastLsn = n.lsn
  const shape = shapeOf(n.k)
  shape.seq++
  // The message Sluice sends for the same update (replica default: PK + changed columns).
  const line = `{"key":${JSON.stringify(`"public"."${LIVE_TABLE}"/"${n.id}"`)},"value":{"id":${JSON.stringify(n.id)},"stamp":${JSON.stringify(n.stamp)}},"headers":{"operation":"update","relation":["public","${LIVE_TABLE}"],"lsn":"${n.lsn}","op_position":0,"txids":[${n.xid}],"last":true}}`
  shape.lines.push({ seq: shape.seq, line })
  if (shape.lines.length > KEPT_LINES) shape.lines.shift()
  const waiters = [...shape.waiters]
  shape.waiters.clear()
  for (const wake of waiters) wake()
}

function cursor(timeoutMs: number): string {
  const interval = Math.floor(timeoutMs / 1000)
  const t = Date.now() / 1000 - CURSOR_EPOCH_S
  return String(Math.ceil(t / interval) * interval)
}

function offsetSeq(offset: string): number {
  const tx = Number(offset.split('_')[0])
  return Number.isFinite(tx) ? tx : 0
}

async function listen(args: Record<string, unknown>): Promise<{ port: number }> {
  const longPollTimeoutMs = Number(args.longPollTimeoutMs)

  const client = new pg.Client({ connectionString: String(args.connectionString) })
  await client.connect()
  client.on('notification', (msg) => {
    if (msg.channel === NOTIFY_CHANNEL && msg.payload !== undefined) onNotification(msg.payload)
  })
  await client.query(`LISTEN ${NOTIFY_CHANNEL}`)

  const app = Fastify({ logger: false })
  app.get('/v1/shape', async (request, reply) => {
    const q = request.query as Record<string, string | undefined>
    const k = /^k = (\d+)$/.exec(q.where ?? '')?.[1]
    if (q.table !== LIVE_TABLE || k === undefined || q.offset === undefined) {
      return reply.code(400).header('content-type', JSON_TYPE).send('{"message":"Invalid request"}')
    }
    const shape = shapeOf(Number(k))
    const handle = `ceiling-${k}`
    reply.header('electric-server', 'ElectricSQL/1.7.12').header('access-control-allow-origin', '*').header('access-control-expose-headers', EXPOSE)
    reply.header('electric-handle', handle).header('content-type', JSON_TYPE)
    if (q.offset === '-1') {
      return reply
        .header('electric-offset', '0_0')
        .header('electric-schema', SCHEMA)
        .header('electric-has-data', 'true')
        .header('cache-control', 'public, max-age=604800, s-maxage=3600, stale-while-revalidate=2629746')
        .send('[]')
    }
    const after = offsetSeq(q.offset)
    const live = q.live !== undefined && q.live !== 'false'
    const answer = (): string => {
      const lines = shape.lines.filter((l) => l.seq > after).map((l) => l.line)
      const offset = `${Math.max(shape.seq, after)}_0`
      reply.header('electric-offset', offset).header('electric-up-to-date', '').header('electric-has-data', lines.length > 0 ? 'true' : 'false')
      reply.header('etag', `"${handle}:${q.offset}:${offset}"`)
      if (live) reply.header('electric-cursor', cursor(longPollTimeoutMs)).header('cache-control', 'public, max-age=5, stale-while-revalidate=5')
      else reply.header('electric-schema', SCHEMA).header('cache-control', 'public, max-age=60, stale-while-revalidate=300')
      const upToDate = `{"headers":{"control":"up-to-date","global_last_seen_lsn":"${lastLsn}"}}`
      return `[${[...lines, upToDate].join(',')}]`
    }
    if (!live || shape.seq > after) return reply.send(answer())
    // Held until the next notification for this shape, the timeout, or the client leaving.
    await new Promise<void>((resolve) => {
      const done = (): void => {
        clearTimeout(timer)
        shape.waiters.delete(done)
        reply.raw.off('close', done)
        resolve()
      }
      const timer = setTimeout(done, longPollTimeoutMs)
      shape.waiters.add(done)
      reply.raw.once('close', done)
    })
    if (reply.raw.destroyed) {
      reply.hijack()
      return
    }
    return reply.send(answer())
  })
  await app.listen({ port: 0, host: '127.0.0.1' })
  return { port: (app.server.address() as AddressInfo).port }
}

serveCommands({ listen, stats: () => ({ notifications }) })
