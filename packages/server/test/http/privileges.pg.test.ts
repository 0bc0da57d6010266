import { readFile } from 'node:fs/promises'
import { usePostgres, useTempDir } from '@sluice/test-utils'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { Pipeline } from '../../src/pipeline.js'
import { startPipeline } from '../pipeline/harness.js'
import { type Res, type TestServer, call, shapeUrl, startServer } from './http-harness.js'

/**
 * A role that may replicate but not do everything Sluice asks of a table: not
 * its owner (so it cannot set REPLICA IDENTITY FULL or publish it), or its owner
 * without SELECT. Each is a 400 naming the missing privilege, not a 5xx the
 * clients retry; the refused ALTER is not run again for every request.
 */

const cluster = usePostgres()
const dirs = useTempDir('privileges')
const ROLE = 'sluice_limited'
let pipeline: Pipeline
let server: TestServer

beforeAll(async () => {
  await cluster.query(`
    CREATE ROLE ${ROLE} LOGIN REPLICATION;
    GRANT CREATE ON DATABASE postgres TO ${ROLE};
    CREATE TABLE not_mine (id int PRIMARY KEY, v text);
    GRANT SELECT ON not_mine TO ${ROLE};
    CREATE TABLE mine (id int PRIMARY KEY, v text);
    ALTER TABLE mine OWNER TO ${ROLE};
    INSERT INTO mine VALUES (1, 'a');
    CREATE TABLE mine_unreadable (id int PRIMARY KEY, v text);
    ALTER TABLE mine_unreadable OWNER TO ${ROLE};
    REVOKE ALL ON mine_unreadable FROM ${ROLE};
  `)
  const url = new URL(cluster.url)
  url.username = ROLE
  pipeline = await startPipeline(cluster, await dirs.make('store'), { connectionString: url.toString(), slotName: 'limited_slot', publicationName: 'limited_pub' })
  server = await startServer(pipeline)
})

afterAll(async () => {
  await server?.close()
  await pipeline?.stop()
  await cluster.dropReplicationSlots()
})

const get = (table: string): Promise<Res> => call(server.port, shapeUrl({ table, offset: '-1' }))

async function refusedAlters(): Promise<number> {
  const log = await readFile(cluster.logFile, 'utf8')
  return log.split('must be owner of table not_mine').length - 1
}

describe('privileges Sluice lacks on a table', () => {
  it('a table the role does not own: 400 naming the privilege and the statement to run, and the ALTER is not retried per request', async () => {
    const first = await get('not_mine')
    expect(first.status).toBe(400)
    const [message] = (first.json() as { errors: { table: string[] } }).errors.table
    expect(message).toMatch(/^Role "sluice_limited" cannot set REPLICA IDENTITY FULL on table "public"\."not_mine" \(must be owner of table not_mine\)\. As an administrator, run: /)
    expect(first.header('retry-after')).toBeUndefined()
    const after = await refusedAlters()
    expect(after).toBeGreaterThanOrEqual(1)
    for (let i = 0; i < 5; i++) {
      const again = await get('not_mine')
      expect(again.status).toBe(400)
      expect(again.json()).toEqual(first.json())
    }
    expect(await refusedAlters()).toBe(after)
  })

  it('a table the role owns but may not read: 400 naming SELECT', async () => {
    const res = await get('mine_unreadable')
    expect(res.status).toBe(400)
    const [message] = (res.json() as { errors: { table: string[] } }).errors.table
    expect(message).toMatch(/^The database role Sluice connects as cannot read the table \(permission denied for table mine_unreadable\): an administrator must GRANT SELECT on it/)
  })

  it('a table the role owns and reads is served', async () => {
    const res = await get('mine')
    expect(res.status).toBe(200)
    expect((res.json() as Array<{ value?: unknown }>).filter((m) => m.value !== undefined).map((m) => m.value)).toEqual([{ id: '1', v: 'a' }])
  })
})
