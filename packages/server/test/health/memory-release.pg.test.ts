import { chmod } from 'node:fs/promises'
import { setTimeout as sleep } from 'node:timers/promises'
import { usePostgres, useTempDir } from '@sluice/test-utils'
import { afterEach, describe, expect, it } from 'vitest'
import { loadConfig } from '../../src/config.js'
import { RETIRED_SHAPES_FOR_COLLECTION } from '../../src/defaults.js'
import { pooledBodies } from '../../src/http/log-body.js'
import { parsedClausesKept } from '../../src/where/parse-clause.js'
import { type SluiceServer, createServer } from '../../src/server.js'
import { call, shapeUrl } from '../http/http-harness.js'
import { ShapeClient, selectRows, until } from './health-harness.js'

/**
 * After a large transaction the server gives its buffers' memory back at once
 * (heap-trim.ts): the real `sluice start` server (createServer, with the
 * native addon) on the test cluster, a transaction big enough to be spilled
 * (past the assembler's limit of an eighth of `--memory-budget`), and the
 * release seen in /metrics once the transaction is durable and a client of
 * its shape holds it.
 */
const cluster = usePostgres()
const dirs = useTempDir('memory-release')
const running: SluiceServer[] = []

afterEach(async () => {
  for (const s of running.splice(0)) await s.close().catch(() => {})
})

async function releases(port: number): Promise<Record<string, number>> {
  const text = (await call(port, '/metrics')).text
  const counts: Record<string, number> = {}
  for (const m of text.matchAll(/^sluice_memory_releases_total\{reason="(\w+)"\} (\S+)$/gm)) counts[m[1]!] = Number(m[2])
  return counts
}

describe('memory release after a large transaction', () => {
  it('asks for one collection and trim once a spilled transaction is durable, none for small ones', { timeout: 120_000 }, async () => {
    await cluster.query('CREATE TABLE burst_rows (id int4 PRIMARY KEY, v text)')
    const dir = await dirs.make('store')
    await chmod(dir, 0o755)
    const server = await createServer(
      loadConfig(['--database-url', cluster.url, '--storage-dir', dir, '--port', '0', '--log-level', 'silent', '--memory-budget', '16MiB']),
    )
    running.push(server)
    const client = new ShapeClient(server.port, 'burst_rows')
    await client.catchUp()

    // Small transactions, made durable and read: no release.
    for (let i = 1; i <= 5; i++) await cluster.query(`INSERT INTO burst_rows VALUES (${i}, 'small')`)
    await until('the small rows at the client', async () => {
      await client.catchUp()
      return client.rows.size === 5 ? true : undefined
    })
    expect(await releases(server.port)).toEqual({ large_transaction: 0, idle_after_transaction: 0, retired_shapes: 0, compacted_after_retirement: 0, idle_after_creation: 0 })

    // About 6 MB in one transaction: more than the 2 MiB the assembler holds whole.
    await cluster.query(`INSERT INTO burst_rows SELECT i, repeat(md5(i::text), 6) FROM generate_series(6, 30005) i`)
    const after = await until('a release for the large transaction', async () => {
      const counts = await releases(server.port)
      return (counts['large_transaction'] ?? 0) > 0 ? counts : undefined
    })
    expect(after['large_transaction']).toBe(1)
    expect(after['retired_shapes']).toBe(0)
    await client.catchUp()
    expect(client.sorted()).toEqual(await selectRows(cluster, 'burst_rows'))
    // Once the client has read it and the server is idle, once more (asked for rarely: this test shares the server's event loop).
    let idle = 0
    for (let i = 0; i < 120 && idle === 0; i++) {
      await sleep(500)
      idle = (await releases(server.port))['idle_after_transaction'] ?? 0
    }
    expect(idle).toBe(1)
  })
})

describe('memory release after an expiry sweep', () => {
  it('empties the request caches before collecting, once a sweep has retired a thousand shapes', { timeout: 180_000 }, async () => {
    const shapes = RETIRED_SHAPES_FOR_COLLECTION
    await cluster.query(`CREATE TABLE swept_rows (id int4 PRIMARY KEY); INSERT INTO swept_rows SELECT generate_series(1, ${shapes})`)
    const dir = await dirs.make('swept')
    await chmod(dir, 0o755)
    const server = await createServer(
      loadConfig([
        ...['--database-url', cluster.url, '--storage-dir', dir, '--port', '0', '--log-level', 'silent'],
        ...['--shape-ttl', '20s', '--client-shapes-per-minute', '0', '--max-creating-shapes', '0'],
      ]),
    )
    running.push(server)
    // One shape per where clause, as a client making many shapes does; this test's process is the server's.
    let next = 0
    const worker = async (): Promise<void> => {
      for (let i = next++; i < shapes; i = next++) {
        const res = await call(server.port, shapeUrl({ table: 'swept_rows', offset: '-1', where: `id = ${i + 1}` }))
        expect(res.status).toBe(200)
      }
    }
    await Promise.all(Array.from({ length: 8 }, worker))
    expect(parsedClausesKept()).toBeGreaterThan(0)
    expect(pooledBodies()).toBeGreaterThan(0)
    expect((await releases(server.port))['retired_shapes']).toBe(0)

    // The release waits for an idle event loop, and this process is the server's: scraping /metrics every 50 ms
    // (as `until` polls) would keep it busy, so the count is read every two seconds.
    const deadline = Date.now() + 150_000
    while (((await releases(server.port))['retired_shapes'] ?? 0) === 0) {
      if (Date.now() > deadline) throw new Error('timed out waiting for every shape expired and the release after the sweep')
      await new Promise((r) => setTimeout(r, 2_000))
    }
    expect(parsedClausesKept()).toBe(0)
    expect(pooledBodies()).toBe(0)
  })
})
