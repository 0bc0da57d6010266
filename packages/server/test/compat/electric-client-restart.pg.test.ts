import { useTempDir, usePostgres } from '@sluice/test-utils'
import type { FastifyInstance } from 'fastify'
import type { AddressInfo } from 'node:net'
import { afterAll, describe, expect, it } from 'vitest'
import { buildApp } from '../../src/http/index.js'
import type { Pipeline } from '../../src/pipeline.js'
import { caughtUp, startPipeline } from '../pipeline/harness.js'
import { type SchemaEntry, expectedClientRows } from './client-values.js'
import { type RecordedExchange, StreamLog, captureWarnings, eventually, openStream, rowKey, shapeOf } from './compat-harness.js'

/**
 * The official client following a shape while the Sluice server restarts on
 * the same storage and port: the client retries through the outage and
 * carries on with the same handle from its offset (the shape is restored from
 * its log), ending equal to Postgres, including what was committed while the
 * server was down.
 */

const cluster = usePostgres()
const dirs = useTempDir('compat-restart')
const running: Array<{ app: FastifyInstance; pipeline: Pipeline }> = []

const SCHEMA: Record<string, SchemaEntry> = {
  id: { type: 'int4', pk_index: 0, not_null: true },
  v: { type: 'text' },
}

async function start(storageDir: string, port: number): Promise<{ app: FastifyInstance; pipeline: Pipeline; port: number }> {
  const pipeline = await startPipeline(cluster, storageDir)
  const app = buildApp({ shapes: pipeline.shapeService, http: { longPollTimeoutMs: 2000 } })
  await app.listen({ port, host: '127.0.0.1' })
  running.push({ app, pipeline })
  return { app, pipeline, port: (app.server.address() as AddressInfo).port }
}

async function stop(server: { app: FastifyInstance; pipeline: Pipeline }): Promise<void> {
  await server.app.close()
  await server.pipeline.stop()
  running.splice(running.indexOf(server), 1)
}

afterAll(async () => {
  for (const server of [...running]) await stop(server)
})

describe('the official client across a server restart', () => {
  it('keeps its handle and offset and catches up with what was committed during the outage', async () => {
    await cluster.query(`CREATE TABLE restart_items (id int4 PRIMARY KEY, v text); INSERT INTO restart_items SELECT i, 'v' || i FROM generate_series(1, 20) i`)
    const storage = await dirs.make('store')
    const first = await start(storage, 0)
    const url = `http://127.0.0.1:${first.port}/v1/shape`
    const exchanges: RecordedExchange[] = []
    const { stream, abort } = openStream(url, { params: { table: 'restart_items' } }, exchanges)
    const shape = shapeOf(stream)
    const log = new StreamLog(stream)
    const captured = captureWarnings()
    const keyOf = (r: Record<string, string | null>): string => rowKey('public', 'restart_items', r.id!)
    try {
      await shape.value
      const handle = stream.shapeHandle
      await cluster.query("INSERT INTO restart_items VALUES (21, 'before the restart')")
      await caughtUp(first.pipeline, cluster)
      await eventually(() => shape.currentValue.has(rowKey('public', 'restart_items', '21')), 'the change before the restart')

      await stop(first)
      await cluster.query("INSERT INTO restart_items VALUES (22, 'while down'); UPDATE restart_items SET v = 'changed while down' WHERE id = 1; DELETE FROM restart_items WHERE id = 2")
      const second = await start(storage, first.port)
      await cluster.query("INSERT INTO restart_items VALUES (23, 'after the restart')")
      await caughtUp(second.pipeline, cluster)

      const want = await expectedClientRows(cluster, 'restart_items', SCHEMA, keyOf)
      await eventually(() => shape.currentValue.has(rowKey('public', 'restart_items', '23')) && !shape.currentValue.has(rowKey('public', 'restart_items', '2')), 'the catch-up', 60_000)
      await eventually(() => shape.currentValue.get(rowKey('public', 'restart_items', '1'))?.v === 'changed while down', 'the update made while down')
      expect(new Map(shape.currentValue)).toEqual(want)
      expect(stream.shapeHandle).toBe(handle)
      expect(log.controls()).not.toContain('must-refetch')
      // A request that reaches the closing server is answered 503, which the client retries. (That 503 is
      // fastify's own `return503OnClosing` answer: no retry-after, CORS or electric-server header.)
      for (const e of exchanges.filter((x) => x.status !== 200)) expect(e.status).toBe(503)
      expect(log.errors).toEqual([])
      expect(captured.warnings).toEqual([])
    } finally {
      captured.restore()
      abort.abort()
      // Before the per-test temp dir is removed (useTempDir's afterEach): a store must not lose its directory while open.
      for (const server of [...running]) await stop(server)
    }
  })
})
