import { readdirSync, rmSync } from 'node:fs'
import { join } from 'node:path'
import { MUST_REFETCH_BODY } from '@sluice/protocol'
import { shapeDir } from '@sluice/storage'
import { useTempDir, usePostgres } from '@sluice/test-utils'
import { beforeAll, describe, expect, it } from 'vitest'
import { createLogger } from '../../src/logger.js'
import { caughtUp, usePipelines } from '../pipeline/harness.js'
import { type Res, call, messages, shapeUrl, startServer } from './http-harness.js'

/**
 * A shape whose log lost a file while the server was down (an operator's rm,
 * a bad disk): the server still starts, the log is set aside in the store's
 * quarantine/ and said so in the log, the shape's clients get 409 and sync
 * again from a new shape, and every other shape carries on from its offset.
 */

const cluster = usePostgres()
const dirs = useTempDir('quarantine')
const pipelines = usePipelines(cluster, dirs)

beforeAll(async () => {
  await cluster.query(`
    CREATE TABLE lost (id int4 PRIMARY KEY, v text); INSERT INTO lost SELECT i, 'v' || i FROM generate_series(1, 5) i;
    CREATE TABLE kept (id int4 PRIMARY KEY, v text); INSERT INTO kept SELECT i, 'k' || i FROM generate_series(1, 5) i;
  `)
})

async function syncToEnd(port: number, table: string): Promise<{ handle: string; offset: string; rows: number }> {
  let res: Res = await call(port, shapeUrl({ table, offset: '-1' }))
  let rows = 0
  for (;;) {
    expect(res.status).toBe(200)
    rows += messages(res).filter((m) => m.value !== undefined).length
    const handle = res.header('electric-handle')!
    const offset = res.header('electric-offset')!
    if (res.header('electric-up-to-date') !== undefined) return { handle, offset, rows }
    res = await call(port, shapeUrl({ table, offset, handle }))
  }
}

describe('a shape log with a file missing at start', () => {
  for (const [way, file] of [
    ['after a clean stop', 'entries.idx'],
    ['after a clean stop', 'meta.bin'],
    ['without the heads file, as after a crash', 'log.dat'],
  ] as const) {
    it(`is quarantined, its clients get 409 and resync, the other shapes carry on (${way}, ${file} gone)`, async () => {
      const { pipeline, dir } = await pipelines.start()
      let server = await startServer(pipeline)
      const lost = await syncToEnd(server.port, 'lost')
      const kept = await syncToEnd(server.port, 'kept')
      expect(lost.rows).toBe(5)
      await cluster.query(`UPDATE kept SET v = $1 WHERE id = 1`, [`after ${file}`])
      await caughtUp(pipeline, cluster)
      await server.close()
      await pipelines.stop(pipeline)
      const logs = join(dir, 'logs')
      // Without the heads a clean stop leaves, every log is scanned as after a crash.
      if (way !== 'after a clean stop') rmSync(join(logs, 'heads'))
      rmSync(join(shapeDir(logs, lost.handle), file))

      const lines: Array<{ msg: string; err?: { message: string } }> = []
      const logger = createLogger({ level: 'info', destination: { write: (text: string) => void lines.push(JSON.parse(text)) } })
      const again = await pipelines.start({ logger }, dir)
      server = await startServer(again.pipeline)
      try {
        const reported = lines.filter((l) => l.msg === 'shape log quarantined at open')
        expect(reported).toHaveLength(1)
        expect(reported[0]!.err!.message).toContain(file)
        expect(readdirSync(join(logs, 'quarantine')).map((n) => n.split('.')[0])).toEqual([lost.handle])

        const refetch = await call(server.port, shapeUrl({ table: 'lost', offset: lost.offset, handle: lost.handle }))
        expect(refetch.status).toBe(409)
        expect(refetch.text).toBe(MUST_REFETCH_BODY)
        const fresh = refetch.header('electric-handle')
        expect(fresh).toBeDefined()
        expect(fresh).not.toBe(lost.handle)
        const resynced = await syncToEnd(server.port, 'lost')
        expect(resynced.handle).toBe(fresh)
        expect(resynced.rows).toBe(5)

        const next = await call(server.port, shapeUrl({ table: 'kept', offset: kept.offset, handle: kept.handle }))
        expect(next.status).toBe(200)
        expect(messages(next).filter((m) => m.value !== undefined).map((m) => m.value!.v)).toEqual([`after ${file}`])
      } finally {
        await server.close()
      }
    })
  }
})
