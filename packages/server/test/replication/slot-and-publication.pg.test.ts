import { usePostgres } from '@sluice/test-utils'
import pg from 'pg'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import {
  DEFAULT_PUBLICATION_NAME,
  DEFAULT_SLOT_NAME,
  InvalidNameError,
  PublicationManager,
  PublicationNotFoundError,
  ReplicationClient,
  ReplicationPrivilegeError,
  SlotManager,
  SlotMismatchError,
  SlotNotFoundError,
  TableNotFoundError,
} from '../../src/replication/index.js'
import { CollectingSink, queryable, waitFor } from './harness.js'

const cluster = usePostgres()

const SCHEMA = 'Sch ema "Q"'
const TABLE = 'Weird "T" Ñame'
const PUBLICATION = 'My "Pub" Name'

async function errorOf(promise: Promise<unknown>): Promise<unknown> {
  return promise.then(
    () => {
      throw new Error('expected a rejection')
    },
    (error: unknown) => error,
  )
}

describe('PublicationManager', () => {
  beforeAll(async () => {
    await cluster.query(`CREATE SCHEMA "${SCHEMA.replaceAll('"', '""')}"`)
    await cluster.query(`CREATE TABLE "${SCHEMA.replaceAll('"', '""')}"."${TABLE.replaceAll('"', '""')}" (id int PRIMARY KEY, v text)`)
    await cluster.query('CREATE TABLE plain (id int PRIMARY KEY)')
  })

  it('defaults to sluice_publication and creates it empty', async () => {
    const manager = new PublicationManager(queryable(cluster))
    expect(manager.name).toBe(DEFAULT_PUBLICATION_NAME)
    expect(await manager.ensure()).toEqual({ created: true })
    expect(await manager.ensure()).toEqual({ created: false })
    expect(await manager.tables()).toEqual([])
    const { rows } = await cluster.query(`SELECT puballtables, pubinsert, pubupdate, pubdelete, pubtruncate FROM pg_publication WHERE pubname = $1`, [
      DEFAULT_PUBLICATION_NAME,
    ])
    expect(rows[0]).toEqual({ puballtables: false, pubinsert: true, pubupdate: true, pubdelete: true, pubtruncate: true })
    expect(await manager.drop()).toBe(true)
    expect(await manager.drop()).toBe(false)
  })

  it('adds a table with an awkward name once, setting REPLICA IDENTITY FULL first', async () => {
    const manager = new PublicationManager(queryable(cluster), { name: PUBLICATION })
    expect(await manager.addTable(SCHEMA, TABLE)).toEqual({ added: true, replicaIdentitySet: true })
    expect(await manager.addTable(SCHEMA, TABLE)).toEqual({ added: false, replicaIdentitySet: false })
    expect(await manager.tables()).toEqual([{ schema: SCHEMA, name: TABLE }])
    const { rows } = await cluster.query(
      `SELECT c.relreplident::text AS identity FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relname = $2`,
      [SCHEMA, TABLE],
    )
    expect(rows[0]?.['identity']).toBe('f')
    expect(await manager.removeTable(SCHEMA, TABLE)).toBe(true)
    expect(await manager.removeTable(SCHEMA, TABLE)).toBe(false)
    expect(await manager.tables()).toEqual([])
  })

  it('is safe to race with itself', async () => {
    const managers = Array.from({ length: 6 }, () => new PublicationManager(queryable(cluster), { name: 'raced' }))
    const results = await Promise.all(managers.map((m) => m.addTable('public', 'plain')))
    expect(results.filter((r) => r.added)).toHaveLength(1)
    expect(await managers[0]?.tables()).toEqual([{ schema: 'public', name: 'plain' }])
  })

  it('names a missing table', async () => {
    const error = await errorOf(new PublicationManager(queryable(cluster)).addTable('public', 'no such table'))
    expect(error).toBeInstanceOf(TableNotFoundError)
    expect(error).toMatchObject({ code: 'table_not_found', schema: 'public', table: 'no such table' })
  })

  it('rejects invalid names before touching the database', () => {
    expect(() => new PublicationManager(queryable(cluster), { name: '' })).toThrow(InvalidNameError)
    expect(() => new PublicationManager(queryable(cluster), { name: 'x'.repeat(64) })).toThrow(InvalidNameError)
  })
})

describe('SlotManager', () => {
  afterAll(async () => {
    await cluster.dropReplicationSlots()
  })

  it('creates the permanent pgoutput slot once and reports its position and retained WAL', async () => {
    const manager = new SlotManager(queryable(cluster))
    expect(manager.name).toBe(DEFAULT_SLOT_NAME)
    const first = await manager.ensure()
    expect(first.created).toBe(true)
    expect(first.slot).toMatchObject({ name: DEFAULT_SLOT_NAME, plugin: 'pgoutput', slotType: 'logical', temporary: false, active: false })
    expect((await manager.ensure()).created).toBe(false)
    const confirmed = await manager.confirmedFlushLsn()
    expect(confirmed).toBeGreaterThan(0n)

    await cluster.query(`CREATE TABLE filler AS SELECT g, repeat('x', 500) AS pad FROM generate_series(1, 2000) g`)
    const retained = await manager.retainedWalBytes()
    expect(retained).toBeGreaterThan(500n * 2000n)
    expect(await manager.drop()).toBe(true)
    expect(await manager.drop()).toBe(false)
    expect(await manager.info()).toBeUndefined()
    await expect(manager.confirmedFlushLsn()).rejects.toBeInstanceOf(SlotNotFoundError)
  })

  it('refuses a slot of another plugin under the same name', async () => {
    await cluster.query(`SELECT pg_create_logical_replication_slot('other_plugin', 'test_decoding')`)
    const error = await errorOf(new SlotManager(queryable(cluster), { name: 'other_plugin' }).ensure())
    expect(error).toBeInstanceOf(SlotMismatchError)
    expect((error as Error).message).toContain('test_decoding')
  })

  it('accepts only names Postgres accepts for slots', () => {
    for (const name of ['', 'Upper', 'with space', 'dash-ed', 'x'.repeat(64)]) {
      expect(() => new SlotManager(queryable(cluster), { name })).toThrow(InvalidNameError)
    }
    expect(new SlotManager(queryable(cluster), { name: 'ok_123' }).name).toBe('ok_123')
  })
})

describe('missing privileges give errors that say what to run', () => {
  let app: pg.Client

  beforeAll(async () => {
    await cluster.query('CREATE ROLE app_user LOGIN')
    await cluster.query('CREATE TABLE owned_by_admin (id int PRIMARY KEY)')
    app = new pg.Client({ connectionString: cluster.url.replace('postgres@', 'app_user@') })
    await app.connect()
  })

  afterAll(async () => {
    await app?.end()
    await cluster.dropReplicationSlots()
  })

  it('creating a publication without CREATE on the database', async () => {
    const manager = new PublicationManager(app, { name: 'app_pub' })
    const error = await errorOf(manager.ensure())
    expect(error).toBeInstanceOf(ReplicationPrivilegeError)
    expect(error).toMatchObject({ code: 'insufficient_privilege', role: 'app_user', fix: 'GRANT CREATE ON DATABASE "postgres" TO "app_user";' })
    expect((error as Error).message).toContain('GRANT CREATE ON DATABASE "postgres" TO "app_user";')
    // Running the fix is enough.
    await cluster.query((error as ReplicationPrivilegeError).fix)
    expect(await manager.ensure()).toEqual({ created: true })
  })

  it("altering a table it does not own", async () => {
    const manager = new PublicationManager(app, { name: 'app_pub' })
    const error = await errorOf(manager.addTable('public', 'owned_by_admin'))
    expect(error).toBeInstanceOf(ReplicationPrivilegeError)
    expect((error as ReplicationPrivilegeError).fix).toContain('ALTER TABLE "public"."owned_by_admin" OWNER TO "app_user";')
    expect((error as Error).message).toMatch(/must be owner/)
    await cluster.query('ALTER TABLE owned_by_admin OWNER TO app_user')
    expect(await manager.addTable('public', 'owned_by_admin')).toEqual({ added: true, replicaIdentitySet: true })
  })

  it('creating a slot without the REPLICATION attribute', async () => {
    const error = await errorOf(new SlotManager(app, { name: 'app_slot' }).ensure())
    expect(error).toBeInstanceOf(ReplicationPrivilegeError)
    expect(error).toMatchObject({ fix: 'ALTER ROLE "app_user" WITH REPLICATION;', fatal: true })
  })

  it('opening a replication connection without the REPLICATION attribute', async () => {
    await new SlotManager(queryable(cluster), { name: 'admin_slot' }).ensure()
    const client = new ReplicationClient({
      connection: cluster.url.replace('postgres@', 'app_user@'),
      slotName: 'admin_slot',
      publicationNames: ['app_pub'],
      sink: new CollectingSink(),
      durableLsn: () => 0n,
    })
    const errors: Error[] = []
    client.on('error', (e) => errors.push(e))
    const error = await errorOf(client.start())
    expect(error).toBeInstanceOf(ReplicationPrivilegeError)
    expect(error).toMatchObject({ fix: 'ALTER ROLE "app_user" WITH REPLICATION;' })
    expect(errors).toEqual([error])
    expect(await client.stopped).toBe(error)
  })
})

describe('ReplicationClient fatal setup errors', () => {
  afterAll(async () => {
    await cluster.dropReplicationSlots()
  })

  it('a missing slot stops the client instead of retrying', async () => {
    const client = new ReplicationClient({ connection: cluster.url, slotName: 'never_created', sink: new CollectingSink(), durableLsn: () => 0n })
    const disconnects: Array<number | undefined> = []
    client.on('disconnected', (d) => disconnects.push(d.retryInMs))
    const error = await errorOf(client.start())
    expect(error).toBeInstanceOf(SlotNotFoundError)
    expect(disconnects).toEqual([undefined])
  })

  it('a missing publication stops the client at the first change', async () => {
    await new SlotManager(queryable(cluster), { name: 'publess' }).ensure()
    const client = new ReplicationClient({
      connection: cluster.url,
      slotName: 'publess',
      publicationNames: ['does not exist'],
      sink: new CollectingSink(),
      durableLsn: () => 0n,
    })
    const started = client.start().then(
      () => undefined,
      (e: unknown) => e,
    )
    await cluster.query('CREATE TABLE IF NOT EXISTS anything (id int)')
    await cluster.query('INSERT INTO anything VALUES (1)')
    const reason = await client.stopped
    expect(reason).toBeInstanceOf(PublicationNotFoundError)
    expect(await started).toSatisfy((v: unknown) => v === undefined || v === reason)
    await waitFor(() => !client.connected, 'the client to stop')
  })
})
