import { MUST_REFETCH_BODY } from '@sluice/protocol'
import { useTempDir, usePostgres } from '@sluice/test-utils'
import { beforeAll, describe, expect, it } from 'vitest'
import { usePipelines } from '../pipeline/harness.js'
import { call, messages, shapeUrl, startServer } from './http-harness.js'

/**
 * A shape log deleted between a request's lookup of its shape and its read:
 * on a writer an expiry or eviction can land there, and on a replica the
 * writer deletes logs the replica is reading. The read throws the storage's
 * `shape_deleted`, and the client is told its shape is gone (409), as for any
 * retired handle, not that the server failed (500).
 */

const cluster = usePostgres()
const dirs = useTempDir('deleted-under-read')
const pipelines = usePipelines(cluster, dirs)

beforeAll(async () => {
  await cluster.query(`CREATE TABLE vanishing (id int4 PRIMARY KEY, v text); INSERT INTO vanishing SELECT i, 'v' || i FROM generate_series(1, 5) i`)
})

describe('a log deleted under a read', () => {
  it('answers 409 must-refetch (JSON), not 500, and the server carries on', async () => {
    const { pipeline } = await pipelines.start()
    const server = await startServer(pipeline)
    try {
      const first = await call(server.port, shapeUrl({ table: 'vanishing', offset: '-1' }))
      expect(first.status).toBe(200)
      const handle = first.header('electric-handle')!
      const offset = first.header('electric-offset')!
      // The store deletes the log while the shape manager still lists the shape: the moment between a
      // request's lookup and its read, held open.
      await pipeline.store.deleteShape(handle)

      const again = await call(server.port, shapeUrl({ table: 'vanishing', offset, handle }))
      expect(again.status).toBe(409)
      expect(again.text).toBe(MUST_REFETCH_BODY)
      expect(again.header('content-type')).toContain('application/json')
      expect(again.header('cache-control')).toBeDefined()

      // Once the manager retires the handle too (as expiry does before it deletes), the client gets a new shape.
      await pipeline.shapes.delete(handle)
      const retired = await call(server.port, shapeUrl({ table: 'vanishing', offset, handle }))
      expect(retired.status).toBe(409)
      const fresh = retired.header('electric-handle')!
      expect(fresh).not.toBe(handle)
      const resync = await call(server.port, shapeUrl({ table: 'vanishing', offset: '-1', handle: fresh }))
      expect(resync.status).toBe(200)
      expect(messages(resync).filter((m) => m.value !== undefined)).toHaveLength(5)
    } finally {
      await server.close()
      await pipelines.stop(pipeline)
    }
  })
})
