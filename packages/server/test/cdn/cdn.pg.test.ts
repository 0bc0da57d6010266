import { readFileSync } from 'node:fs'
import { setTimeout as sleep } from 'node:timers/promises'
import { type NginxServer, seededRandom as prng, startNginx, usePostgres, useTempDir } from '@sluice/test-utils'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { Pipeline } from '../../src/pipeline.js'
import { caughtUp, startPipeline } from '../pipeline/harness.js'
import { type CountingOrigin, DEPLOY_CONFIG_PATH, deployConfig, startCountingOrigin } from './cdn-harness.js'
import { eventually, openStream, shapeOf } from '../compat/compat-harness.js'
import { ShapeFollower } from './shape-follower.js'

/**
 * A real nginx, configured by the very file docs/operations.md documents
 * (deploy/nginx.conf), in front of a real Sluice on a real Postgres. The origin
 * counts every request that reaches it; nginx's access log says how each
 * client request was served. Many clients following one shape must cost the
 * origin one request per chunk and about one per live window, and all end
 * with what Postgres holds.
 */

const SOAK = process.env['SOAK'] === '1'
const CLIENTS = SOAK ? 300 : 100
const TRANSACTIONS = SOAK ? 150 : 20
/** Short, so the test sees long-poll timeouts (new cursor windows) without waiting 20 s. */
const LONG_POLL_MS = 3000
/** Small chunks: the initial sync of a few hundred rows spans several of them. */
const CHUNK_BYTES = 2048
const INITIAL_ROWS = 250
/** The writer's last insert; a client that holds it and is up to date has seen every write. */
const END_ID = '1000000'

const cluster = usePostgres()
const dirs = useTempDir('cdn')
let pipeline: Pipeline
let origin: CountingOrigin
let nginx: NginxServer

beforeAll(async () => {
  await cluster.query(`
    CREATE TABLE items (id int8 PRIMARY KEY, title text NOT NULL, n int4);
    INSERT INTO items SELECT i, 'item ' || i || ' ' || repeat('x', 30), i FROM generate_series(1, ${INITIAL_ROWS}) i;
  `)
  pipeline = await startPipeline(cluster, await dirs.make('store'), { chunkBytes: CHUNK_BYTES })
  origin = await startCountingOrigin(pipeline, { longPollTimeoutMs: LONG_POLL_MS, sseTimeoutMs: 30_000 })
  nginx = await startNginx({ upstreamPort: origin.port, config: deployConfig })
})

afterAll(async () => {
  await nginx?.stop()
  await origin?.close()
  await pipeline?.stop()
})

async function postgresRows(table: string): Promise<Array<Record<string, string | null>>> {
  const { rows } = await cluster.query<Record<string, string | null>>(`SELECT id::text AS id, title, n::text AS n FROM ${table} ORDER BY ${table}.id`)
  return rows
}

function sortedRows(follower: ShapeFollower): Array<Record<string, string | null>> {
  return [...follower.rows.values()].sort((a, b) => Number(a['id']) - Number(b['id']))
}

const isLive = (url: string): boolean => new URLSearchParams(url.split('?')[1]).get('live') === 'true'
const isShape = (url: string): boolean => url.startsWith('/v1/shape?')

/** The origin requests for shape URLs matching `filter`, counted per URL. */
function originCounts(filter: (url: string) => boolean): Map<string, number> {
  return origin.counts((r) => r.method === 'GET' && isShape(r.url) && filter(r.url))
}

function histogram(counts: Iterable<number>): Record<number, number> {
  const out: Record<number, number> = {}
  for (const n of counts) out[n] = (out[n] ?? 0) + 1
  return out
}

describe('the documented configuration', () => {
  it('is the one the operations guide shows, and the one running here', async () => {
    const file = readFileSync(DEPLOY_CONFIG_PATH, 'utf8')
    const guide = readFileSync(new URL('../../../../docs/operations.md', import.meta.url), 'utf8')
    const block = /```nginx\n([\s\S]*?)```/.exec(guide.slice(guide.indexOf('## An HTTP cache in front')))
    expect(block?.[1]).toBe(file)
    expect(readFileSync(`${nginx.dir}/nginx.conf`, 'utf8')).toContain(deployConfig({ port: nginx.port, upstreamPort: origin.port, dir: nginx.dir, cacheDir: `${nginx.dir}/cache` }))
  })
})

describe(`${CLIENTS} clients following one shape through nginx`, () => {
  it('cost the origin one request per chunk and about one per live window; every client ends with what Postgres holds', async () => {
    const seed = Number(process.env['SEED'] ?? Date.now() % 1_000_000)
    const random = prng(seed)
    const start = origin.requests.length
    const followers = Array.from(
      { length: CLIENTS },
      () => new ShapeFollower({ baseUrl: nginx.url, table: 'items', done: (f) => f.byId(END_ID) !== undefined }),
    )
    const running = followers.map((f) => f.run())
    // Writes start once every client is live, so the initial chunks are the same for all of them.
    await Promise.race([Promise.all(followers.map((f) => f.reachedLive)), Promise.all(running)])
    const initialOrigin = origin.requests.length - start

    let nextId = INITIAL_ROWS + 1
    const ids = Array.from({ length: INITIAL_ROWS }, (_, i) => i + 1)
    for (let t = 0; t < TRANSACTIONS; t++) {
      const client = await cluster.connect()
      try {
        await client.query('BEGIN')
        const statements = 1 + Math.floor(random() * 4)
        for (let s = 0; s < statements; s++) {
          const pick = random()
          if (pick < 0.4 || ids.length < 10) {
            const id = nextId++
            ids.push(id)
            await client.query('INSERT INTO items VALUES ($1, $2, $3)', [id, `new ${id} ${'y'.repeat(Math.floor(random() * 40))}`, t])
          } else if (pick < 0.8) {
            const id = ids[Math.floor(random() * ids.length)]!
            await client.query('UPDATE items SET n = n + 1, title = title || $2 WHERE id = $1', [id, `+${t}`])
          } else {
            const id = ids.splice(Math.floor(random() * ids.length), 1)[0]!
            await client.query('DELETE FROM items WHERE id = $1', [id])
          }
        }
        await client.query('COMMIT')
      } finally {
        await client.end()
      }
      // Mostly quick writes; now and then a pause past the long-poll timeout, so windows also end by cursor.
      await sleep(t % 7 === 3 ? LONG_POLL_MS + 500 : 50 + random() * 300)
    }
    await cluster.query('INSERT INTO items VALUES ($1, $2, $3)', [END_ID, 'the end', 0])
    await Promise.all(running)

    // Every client holds exactly what Postgres holds.
    const expected = await postgresRows('items')
    for (const follower of followers) {
      expect(follower.refetches).toBe(0)
      expect(sortedRows(follower)).toEqual(expected)
    }

    // Non-live URLs (offset=-1 and every chunk after it): exactly one origin request each.
    const chunkCounts = originCounts((url) => !isLive(url))
    const clientChunkRequests = followers.reduce((sum, f) => sum + f.urls.filter((u) => !isLive(u)).length, 0)
    expect(chunkCounts.size).toBeGreaterThan(3)
    expect([...chunkCounts.values()].every((n) => n === 1), JSON.stringify([...chunkCounts])).toBe(true)
    // All clients walked the same chunk URLs.
    const firstChunks = followers[0]!.urls.filter((u) => !isLive(u))
    for (const f of followers) expect(f.urls.filter((u) => !isLive(u))).toEqual(firstChunks)

    // Live URLs: each distinct window at most twice (once, plus a possible stale-while-revalidate refresh).
    const liveCounts = originCounts(isLive)
    const clientLiveRequests = followers.reduce((sum, f) => sum + f.urls.filter(isLive).length, 0)
    const distinctClientLive = new Set(followers.flatMap((f) => f.urls.filter(isLive)))
    expect(Math.max(...liveCounts.values())).toBeLessThanOrEqual(2)
    // Nothing reached the origin that no client asked for, and every window a client used reached it.
    for (const url of liveCounts.keys()) expect(distinctClientLive.has(url.slice('GET '.length))).toBe(true)
    expect(liveCounts.size).toBe(distinctClientLive.size)

    // nginx's own view: requests passed upstream per URL never exceed the origin's count.
    const log = await nginx.accessLog()
    const upstreamByUri = new Map<string, number>()
    for (const entry of log) if (entry.upstreamStatus !== '') upstreamByUri.set(entry.uri, (upstreamByUri.get(entry.uri) ?? 0) + 1)
    for (const [uri, n] of upstreamByUri) {
      if (!isShape(uri)) continue
      expect(n, uri).toBeLessThanOrEqual(origin.counts((r) => r.url === uri).get(`GET ${uri}`) ?? 0)
    }
    const cacheStatuses = histogramOf(log.filter((e) => isShape(e.uri)).map((e) => e.cacheStatus || '-'))

    const report = {
      seed,
      clients: CLIENTS,
      transactions: TRANSACTIONS,
      initialOriginRequests: initialOrigin,
      chunks: { distinctUrls: chunkCounts.size, clientRequests: clientChunkRequests, originRequests: sum(chunkCounts.values()) },
      live: {
        distinctUrls: liveCounts.size,
        clientRequests: clientLiveRequests,
        originRequests: sum(liveCounts.values()),
        originRequestsPerUrl: histogram(liveCounts.values()),
      },
      nginxCacheStatus: cacheStatuses,
    }
    console.log(`CDN report: ${JSON.stringify(report)}`)
  }, SOAK ? 900_000 : 120_000)
})

function sum(values: Iterable<number>): number {
  let total = 0
  for (const v of values) total += v
  return total
}

function histogramOf(values: readonly string[]): Record<string, number> {
  const out: Record<string, number> = {}
  for (const v of values) out[v] = (out[v] ?? 0) + 1
  return out
}

describe('the official @electric-sql/client through nginx', () => {
  it('20 Shapes sync and follow live writes; the origin sees each chunk once and each live window at most twice', async () => {
    await cluster.query(`
      CREATE TABLE official (id int8 PRIMARY KEY, title text NOT NULL, n int4);
      INSERT INTO official SELECT i, 'official ' || i || ' ' || repeat('o', 30), i FROM generate_series(1, 120) i;
    `)
    const clients = 20
    const opened = Array.from({ length: clients }, () => openStream(`${nginx.url}/v1/shape`, { params: { table: 'official' } }))
    const shapes = opened.map(({ stream }) => shapeOf(stream))
    try {
      await Promise.all(shapes.map((shape) => shape.rows))
      for (let t = 0; t < 8; t++) {
        await cluster.query('INSERT INTO official VALUES ($1, $2, $3)', [1000 + t, `live ${t}`, t])
        await cluster.query('UPDATE official SET n = n + 100 WHERE id = $1', [t + 1])
        if (t % 3 === 0) await cluster.query('DELETE FROM official WHERE id = $1', [50 + t])
        await sleep(200)
      }
      const expected = await postgresRows('official')
      const asText = (rows: ReadonlyArray<Record<string, unknown>>): Array<Record<string, string | null>> =>
        rows
          .map((r) => ({ id: String(r['id']), title: r['title'] as string, n: r['n'] === null ? null : String(r['n']) }))
          .sort((a, b) => Number(a.id) - Number(b.id))
      await eventually(
        () => shapes.every((shape) => JSON.stringify(asText(shape.currentRows)) === JSON.stringify(expected)),
        'every official client to hold what Postgres holds',
      )
    } finally {
      for (const { abort } of opened) abort.abort()
    }
    const mine = (url: string): boolean => url.includes('table=official')
    const chunks = originCounts((url) => mine(url) && !isLive(url))
    const live = originCounts((url) => mine(url) && isLive(url))
    expect(chunks.size).toBeGreaterThan(3)
    expect([...chunks.values()].every((n) => n === 1), JSON.stringify([...chunks])).toBe(true)
    expect(Math.max(...live.values())).toBeLessThanOrEqual(2)
    const served = (await nginx.accessLog()).filter((e) => mine(e.uri))
    console.log(
      `CDN report (official client): ${JSON.stringify({
        clients,
        clientRequests: served.length,
        chunks: { distinctUrls: chunks.size, originRequests: sum(chunks.values()) },
        live: { distinctUrls: live.size, originRequests: sum(live.values()), originRequestsPerUrl: histogram(live.values()) },
        nginxCacheStatus: histogramOf(served.map((e) => e.cacheStatus || '-')),
      })}`,
    )
  })
})

describe('what the cache must not keep, or keep wrongly', () => {
  it('a rotated shape: one 409 per live window reaches the origin, every client refetches once and converges, and a late client recovers from the cached old handle', async () => {
    await cluster.query(`
      CREATE TABLE rot (id int8 PRIMARY KEY, title text NOT NULL, n int4);
      INSERT INTO rot SELECT i, 'before ' || i || ' ' || repeat('r', 40), i FROM generate_series(1, 60) i;
    `)
    const clients = 20
    const done = (f: ShapeFollower): boolean => f.byId(END_ID) !== undefined
    const followers = Array.from({ length: clients }, () => new ShapeFollower({ baseUrl: nginx.url, table: 'rot', done }))
    const running = followers.map((f) => f.run())
    await Promise.race([Promise.all(followers.map((f) => f.reachedLive)), Promise.all(running)])
    const oldHandle = followers[0]!.handle!
    expect(followers.every((f) => f.handle === oldHandle)).toBe(true)
    // A short wait lets every client's live request reach nginx, so they are held on one URL.
    await sleep(300)
    const liveUrlsBefore = new Set(followers.map((f) => f.nextUrl()))

    await cluster.query(`TRUNCATE rot`)
    await cluster.query(`INSERT INTO rot SELECT i, 'after ' || i, -i FROM generate_series(1, 30) i`)
    await cluster.query('INSERT INTO rot VALUES ($1, $2, $3)', [END_ID, 'the end', 0])
    await Promise.all(running)

    const expected = await postgresRows('rot')
    const newHandle = followers[0]!.handle!
    expect(newHandle).not.toBe(oldHandle)
    for (const f of followers) {
      expect(f.refetches).toBe(1)
      expect(f.handle).toBe(newHandle)
      expect(sortedRows(f)).toEqual(expected)
    }
    // The live URLs held at the rotation: each reached the origin once and its 409 was shared.
    const log = await nginx.accessLog()
    for (const url of liveUrlsBefore) {
      expect(origin.counts((r) => r.url === url).get(`GET ${url}`)).toBe(1)
      const served = log.filter((e) => e.uri === url)
      expect(served.map((e) => e.status).every((s) => s === 409)).toBe(true)
      expect(served.filter((e) => e.upstreamStatus !== '')).toHaveLength(1)
    }
    // The refetch (offset=-1&handle=<new>) reached the origin once for all of them.
    const refetchUrl = `/v1/shape?${new URLSearchParams({ table: 'rot', offset: '-1', handle: newHandle }).toString()}`
    expect(origin.counts((r) => r.url === refetchUrl).get(`GET ${refetchUrl}`)).toBe(1)

    // The cached 409 names the current handle, and is only ever served for the dead one.
    const heldUrl = [...liveUrlsBefore][0]!
    const again = await fetch(`${nginx.url}${heldUrl}`)
    expect(again.status).toBe(409)
    expect(again.headers.get('x-cache-status')).toBe('HIT')
    expect(again.headers.get('electric-handle')).toBe(newHandle)
    expect(await again.json()).toEqual([{ headers: { control: 'must-refetch' } }])
    const fresh = await fetch(`${nginx.url}${refetchUrl}`)
    expect(fresh.status).toBe(200)
    expect(fresh.headers.get('electric-handle')).toBe(newHandle)

    // A client arriving now gets the week-long cached offset=-1 of the old handle, follows it into a
    // cached 409, and still ends where Postgres is.
    const late = new ShapeFollower({ baseUrl: nginx.url, table: 'rot', done })
    await late.run()
    expect(late.urls[0]).toBe('/v1/shape?table=rot&offset=-1')
    expect(late.refetches).toBe(1)
    expect(late.handle).toBe(newHandle)
    expect(sortedRows(late)).toEqual(expected)
  })

  it('an error (400, no-store) is never served from the cache: the same URL answers 200 once the table exists', async () => {
    const url = '/v1/shape?table=later&offset=-1'
    const count = (): number => origin.counts((r) => r.url === url).get(`GET ${url}`) ?? 0
    for (let i = 1; i <= 2; i++) {
      const res = await fetch(`${nginx.url}${url}`)
      expect(res.status).toBe(400)
      expect(res.headers.get('cache-control')).toBe('no-store')
      expect(res.headers.get('x-cache-status')).toBe('MISS')
      expect(await res.json()).toEqual({
        message: 'Invalid request',
        errors: { table: ['Table "public"."later" does not exist. If the table name contains capitals or special characters you must quote it.'] },
      })
      expect(count()).toBe(i)
    }
    await cluster.query(`CREATE TABLE later (id int8 PRIMARY KEY, title text NOT NULL, n int4); INSERT INTO later VALUES (1, 'one', 1)`)
    const res = await fetch(`${nginx.url}${url}`)
    expect(res.status).toBe(200)
    expect(res.headers.get('x-cache-status')).toBe('MISS')
    const rows = (await res.json()) as Array<{ key?: string; value?: unknown }>
    expect(rows.filter((m) => m.key !== undefined)).toEqual([expect.objectContaining({ key: '"public"."later"/"1"', value: { id: '1', title: 'one', n: '1' } })])
    expect(count()).toBe(3)
    // Now it is a cacheable answer, and it is cached.
    const again = await fetch(`${nginx.url}${url}`)
    expect(again.headers.get('x-cache-status')).toBe('HIT')
    expect(count()).toBe(3)
  })
})

describe('what passes through', () => {
  it('a cached chunk is byte-identical to the origin, with every electric-* header, etag and cache-control', async () => {
    await cluster.query(`CREATE TABLE hdr (id int8 PRIMARY KEY, title text NOT NULL, n int4); INSERT INTO hdr SELECT i, 't' || i, i FROM generate_series(1, 40) i`)
    const first = `/v1/shape?table=hdr&offset=-1`
    const direct = await fetch(`http://127.0.0.1:${origin.port}${first}`)
    const directBody = Buffer.from(await direct.arrayBuffer())
    const names = ['electric-handle', 'electric-offset', 'electric-schema', 'etag', 'cache-control', 'content-type', 'electric-has-data']
    for (const expectedStatus of ['MISS', 'HIT']) {
      const res = await fetch(`${nginx.url}${first}`)
      expect(res.headers.get('x-cache-status')).toBe(expectedStatus)
      expect(Buffer.from(await res.arrayBuffer()).equals(directBody)).toBe(true)
      for (const name of names) expect(res.headers.get(name), name).toBe(direct.headers.get(name))
    }
    // The live headers too: electric-cursor and electric-up-to-date (present, empty) on a cached live
    // answer; at the head with no writes it is the long-poll timeout's answer.
    const synced = new ShapeFollower({ baseUrl: nginx.url, table: 'hdr', done: () => true })
    await synced.run()
    const liveUrl = synced.nextUrl()
    const live = await fetch(`${nginx.url}${liveUrl}`)
    const liveHit = await fetch(`${nginx.url}${liveUrl}`)
    expect(live.status).toBe(200)
    expect(liveHit.headers.get('x-cache-status')).toBe('HIT')
    for (const res of [live, liveHit]) {
      expect(res.headers.get('electric-cursor')).toMatch(/^\d+$/)
      expect(res.headers.get('electric-up-to-date')).toBe('')
      expect(res.headers.get('cache-control')).toBe('public, max-age=5, stale-while-revalidate=5')
    }
    expect(liveHit.headers.get('electric-cursor')).toBe(live.headers.get('electric-cursor'))
    expect(await liveHit.text()).toBe(await live.text())
  })

  it('a wide table: an electric-schema header of several KB is not a 502', async () => {
    const columns = Array.from({ length: 200 }, (_, i) => `a_rather_long_column_name_number_${i} text`).join(', ')
    await cluster.query(`CREATE TABLE wide (id int8 PRIMARY KEY, ${columns}); INSERT INTO wide (id) VALUES (1)`)
    const res = await fetch(`${nginx.url}/v1/shape?table=wide&offset=-1`)
    expect(res.status).toBe(200)
    const schema = res.headers.get('electric-schema')!
    expect(schema.length).toBeGreaterThan(8192)
    expect(Object.keys(JSON.parse(schema) as object)).toHaveLength(201)
  })

  it('SSE is neither buffered nor cached: each stream reaches the origin and an event arrives while the stream is open', async () => {
    await cluster.query(`CREATE TABLE sse_items (id int8 PRIMARY KEY, title text NOT NULL, n int4); INSERT INTO sse_items VALUES (1, 'one', 1)`)
    const reader = new ShapeFollower({ baseUrl: nginx.url, table: 'sse_items', done: () => true })
    await reader.run()
    const base = { table: 'sse_items', offset: reader.offset, handle: reader.handle!, live: 'true', cursor: '' }
    // Every spelling the map in deploy/nginx.conf must recognise (docs/protocol.md §2, §5.5).
    const variants = [{ live_sse: 'true' }, { live_sse: 'true', experimental_live_sse: 'true' }, { live_sse: '' }, { experimental_live_sse: '1' }]
    const controller = new AbortController()
    try {
      const streams = await Promise.all(
        variants.map(async (extra) => {
          const url = `/v1/shape?${new URLSearchParams({ ...base, ...extra })}`
          const res = await fetch(`${nginx.url}${url}`, { signal: controller.signal, headers: { accept: 'text/event-stream' } })
          // The headers came through before any body byte was written: a buffering proxy holds them
          // until the first body bytes (here the keep-alive, 21 s later).
          expect(origin.sseWrites.get(url), url).toEqual([])
          return { url, res }
        }),
      )
      for (const { url, res } of streams) {
        expect(res.status, url).toBe(200)
        expect(res.headers.get('content-type')).toBe('text/event-stream')
        expect(res.headers.get('x-cache-status')).toBeNull()
      }
      await cluster.query(`INSERT INTO sse_items VALUES (2, 'two arrives live', 2)`)
      for (const { url, res } of streams) {
        const body = res.body!.getReader()
        let text = ''
        // The batch: the change, then its up-to-date event.
        const batchSeen = (): boolean => text.includes('two arrives live') && text.indexOf('"up-to-date"', text.indexOf('two arrives live')) >= 0
        while (!batchSeen()) {
          const { value, done } = await body.read()
          if (done) throw new Error(`${url}: the stream ended before the event arrived: ${text}`)
          text += Buffer.from(value).toString('utf8')
        }
        // nginx passed the batch on as it came: the origin is still streaming, and has written nothing
        // since the batch (a buffering proxy holds it until more arrives: the next keep-alive, 21 s later).
        expect(origin.open.get(url) ?? 0, url).toBeGreaterThan(0)
        const writes = origin.sseWrites.get(url)!
        const event = writes.findIndex((w) => w.includes('two arrives live'))
        expect(event, url).toBeGreaterThanOrEqual(0)
        expect(writes.slice(event).findLastIndex((w) => w.includes('"up-to-date"')) + event, url).toBe(writes.length - 1)
        expect(origin.counts((r) => r.url === url).get(`GET ${url}`)).toBe(1)
      }
    } finally {
      controller.abort()
    }
    // live_sse=false is a plain long-poll, which is cached.
    const longPoll = `/v1/shape?${new URLSearchParams({ ...base, live_sse: 'false' })}`
    const res = await fetch(`${nginx.url}${longPoll}`)
    expect(res.status).toBe(200)
    expect(res.headers.get('x-cache-status')).toBe('MISS')
    expect((await fetch(`${nginx.url}${longPoll}`)).headers.get('x-cache-status')).toBe('HIT')
  })
})
