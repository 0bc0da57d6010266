/**
 * Read replicas (`--read-only`), each behaviour on its own, with a real
 * writer and a real replica on one storage directory in this process (the
 * deployment test runs them as separate processes behind nginx): the same
 * handles, offsets, ETags and bytes; live requests woken by the writer's
 * publication through the store watch, with the fallback timer off; a shape
 * the writer deletes answers 409 on the replica, parked requests included;
 * what only the writer can do answers 503 with retry-after; the replica
 * writes nothing and replicates nothing.
 */
import { chmod, readdir, stat } from 'node:fs/promises'
import { existsSync } from 'node:fs'
import { join } from 'node:path'
import { bucketOf } from '@sluice/storage'
import { usePostgres, useTempDir } from '@sluice/test-utils'
import { afterEach, describe, expect, it } from 'vitest'
import { loadConfig } from '../../src/config.js'
import { type ReplicaServer, createReplicaServer } from '../../src/replica/replica-server.js'
import { type SluiceServer, createServer } from '../../src/server.js'
import { eventually } from '../compat/compat-harness.js'
import { type Res, call, messages } from '../http/http-harness.js'

const cluster = usePostgres()
const dirs = useTempDir('replica')

const running: Array<{ close(): Promise<void> }> = []
afterEach(async () => {
  for (const s of running.splice(0).reverse()) await s.close().catch(() => {})
})

async function storage(): Promise<string> {
  const dir = await dirs.make('store')
  await chmod(dir, 0o755)
  return dir
}

function config(dir: string, extra: readonly string[] = []): ReturnType<typeof loadConfig> {
  const timeout = extra.includes('--long-poll-timeout') ? [] : ['--long-poll-timeout', '20s']
  return loadConfig(['--database-url', cluster.url, '--storage-dir', dir, '--port', '0', '--log-level', 'silent', ...timeout, ...extra])
}

async function writer(dir: string, extra: readonly string[] = []): Promise<SluiceServer> {
  const server = await createServer(config(dir, extra))
  running.push(server)
  return server
}

async function replica(dir: string, extra: readonly string[] = []): Promise<ReplicaServer> {
  const server = await createReplicaServer(config(dir, ['--read-only', ...extra]))
  running.push(server)
  return server
}

function get(server: { port: number }, query: string, options: { signal?: AbortSignal; method?: string } = {}): Promise<Res> {
  return call(server.port, `/v1/shape?${query}`, options)
}

/** The rows of a body, without its control messages (whose LSN is the answering server's watermark). */
function rows(res: Res): unknown[] {
  return messages(res).filter((m) => m.value !== undefined)
}

/** Follows a shape on `server` until up-to-date; the handle and offset reached. */
async function catchUp(server: { port: number }, table: string): Promise<{ handle: string; offset: string }> {
  let res = await get(server, `table=${table}&offset=-1`)
  expect(res.status).toBe(200)
  const handle = res.header('electric-handle')!
  let offset = res.header('electric-offset')!
  while (res.header('electric-up-to-date') === undefined) {
    res = await get(server, `table=${table}&handle=${handle}&offset=${offset}`)
    expect(res.status).toBe(200)
    offset = res.header('electric-offset')!
  }
  return { handle, offset }
}

describe('read replica', () => {
  it("answers with the writer's handle, offsets, ETags and stored bytes", async () => {
    const dir = await storage()
    await cluster.query('CREATE TABLE r_same (id int PRIMARY KEY, title text)')
    await cluster.query("INSERT INTO r_same SELECT g, 'row ' || g FROM generate_series(1, 50) g")
    const w = await writer(dir, ['--chunk-bytes', '2KiB'])
    const first = await get(w, 'table=r_same&offset=-1')
    expect(first.status).toBe(200)
    await cluster.query("INSERT INTO r_same SELECT g, 'later ' || g FROM generate_series(51, 80) g")
    // Replication is asynchronous: catch up until the insert is in the log (its offset is past the snapshot's).
    let head = (await catchUp(w, 'r_same')).offset
    while (head.startsWith('0_')) {
      await new Promise((resolve) => setTimeout(resolve, 50))
      head = (await catchUp(w, 'r_same')).offset
    }
    const r = await replica(dir)
    // Walk the log chunk by chunk on both, offset=-1 included.
    let offset = '-1'
    const handle = first.header('electric-handle')!
    for (let i = 0; i < 100; i++) {
      const query = `table=r_same&offset=${offset}${offset === '-1' ? '' : `&handle=${handle}`}`
      const [a, b] = [await get(w, query), await get(r, query)]
      expect(b.status).toBe(200)
      for (const name of ['electric-handle', 'electric-offset', 'etag', 'electric-schema', 'cache-control', 'electric-up-to-date']) {
        expect(b.header(name), name).toBe(a.header(name))
      }
      if (offset === '-1') expect(b.body.equals(a.body)).toBe(true)
      else expect(rows(b)).toEqual(rows(a))
      offset = a.header('electric-offset')!
      if (offset === head && a.header('electric-up-to-date') !== undefined) break
    }
    expect(offset).toBe(head)
  })

  it('wakes live requests when the writer publishes, with no timer (--replica-poll 0)', async () => {
    const dir = await storage()
    await cluster.query('CREATE TABLE r_wake (id int PRIMARY KEY, title text)')
    await cluster.query("INSERT INTO r_wake VALUES (1, 'one')")
    const w = await writer(dir)
    const { handle, offset } = await catchUp(w, 'r_wake')
    const r = await replica(dir, ['--replica-poll', '0'])
    expect(r.shapes.stats().watching).toBe(true)
    const waiting = Array.from({ length: 20 }, () => get(r, `table=r_wake&handle=${handle}&offset=${offset}&live=true`))
    // Every long-poll is parked once the replica has opened the shape's log; nothing is written meanwhile.
    await new Promise((resolve) => setTimeout(resolve, 300))
    await cluster.query("INSERT INTO r_wake VALUES (2, 'two')")
    const answers = await Promise.all(waiting)
    for (const res of answers) {
      expect(res.status).toBe(200)
      expect(rows(res)).toEqual([expect.objectContaining({ value: { id: '2', title: 'two' } })])
    }
    // An SSE stream on the replica gets the next write the same way.
    const abort = new AbortController()
    const after = answers[0]!.header('electric-offset')!
    const sse = await fetch(`http://127.0.0.1:${r.port}/v1/shape?table=r_wake&handle=${handle}&offset=${after}&live=true&live_sse=true`, { signal: abort.signal })
    expect(sse.status).toBe(200)
    expect(sse.headers.get('content-type')).toMatch(/text\/event-stream/)
    await cluster.query("INSERT INTO r_wake VALUES (3, 'three')")
    const reader = sse.body!.getReader()
    let text = ''
    while (!text.includes('"three"')) {
      const { value, done } = await reader.read()
      if (done) break
      text += Buffer.from(value).toString('utf8')
    }
    abort.abort()
    expect(text).toContain('"title":"three"')
    const stats = r.shapes.stats()
    // Woken by notifications alone: no timer ran, and the watermark was re-read once per notification at most, not per request.
    expect(stats.fallbackTicks).toBe(0)
    expect(stats.notices).toBeGreaterThan(0)
    expect(stats.polls).toBeLessThanOrEqual(stats.notices)
  })

  it('answers 409 for a shape the writer deletes, to parked long-polls too', async () => {
    const dir = await storage()
    await cluster.query('CREATE TABLE r_gone (id int PRIMARY KEY)')
    await cluster.query('INSERT INTO r_gone VALUES (1)')
    const w = await writer(dir, ['--allow-delete'])
    const { handle, offset } = await catchUp(w, 'r_gone')
    const r = await replica(dir, ['--replica-poll', '0'])
    expect((await get(r, `table=r_gone&handle=${handle}&offset=${offset}`)).status).toBe(200)
    const parked = get(r, `table=r_gone&handle=${handle}&offset=${offset}&live=true`)
    await new Promise((resolve) => setTimeout(resolve, 200))
    expect((await call(w.port, `/v1/shape?table=r_gone&handle=${handle}`, { method: 'DELETE' })).status).toBe(202)
    expect((await parked).status).toBe(409)
    expect((await get(r, `table=r_gone&handle=${handle}&offset=${offset}`)).status).toBe(409)
    // The writer's next shape for the definition is served by the replica once the writer has made it.
    const next = await get(w, 'table=r_gone&offset=-1')
    expect(next.header('electric-handle')).not.toBe(handle)
    const again = await get(r, 'table=r_gone&offset=-1')
    expect(again.status).toBe(200)
    expect(again.header('electric-handle')).toBe(next.header('electric-handle'))
  })

  it("learns of shapes renamed into new buckets and into watched ones, and of one leaving a bucket that keeps others, by notifications alone (--replica-poll 0)", async () => {
    const dir = await storage()
    await cluster.query('CREATE TABLE r_buckets (id int PRIMARY KEY, n int)')
    await cluster.query('INSERT INTO r_buckets SELECT g, g FROM generate_series(1, 300) g')
    const w = await writer(dir, ['--allow-delete'])
    const r = await replica(dir, ['--replica-poll', '0'])
    const where = (i: number): string => encodeURIComponent(`n > ${i}`)
    // Shapes made one at a time until one shares its bucket with another: the replica must index each without a request of its own.
    const byBucket = new Map<string, Array<{ handle: string; i: number }>>()
    let pair: Array<{ handle: string; i: number }> | undefined
    let newBuckets = 0
    // Until both happened: a shape in a bucket of its own after the first (the second shape can share the first's bucket).
    for (let i = 0; (pair === undefined || newBuckets < 2) && i < 200; i++) {
      const made = await get(w, `table=r_buckets&offset=-1&where=${where(i)}`)
      expect(made.status).toBe(200)
      const handle = made.header('electric-handle')!
      const bucket = bucketOf(handle)
      const inBucket = byBucket.get(bucket) ?? []
      if (inBucket.length === 0) newBuckets++
      inBucket.push({ handle, i })
      byBucket.set(bucket, inBucket)
      if (inBucket.length === 2) pair ??= inBucket
      await eventually(() => r.shapes.stats().shapes === i + 1, `the replica to index shape ${i + 1} (${inBucket.length === 1 ? 'a new bucket' : 'a watched bucket'})`)
    }
    expect(pair).toBeDefined()
    expect(newBuckets).toBeGreaterThan(1)
    const [gone, stays] = pair!
    const at = await get(r, `table=r_buckets&offset=-1&where=${where(gone!.i)}`)
    expect(at.header('electric-handle')).toBe(gone!.handle)
    const parked = get(r, `table=r_buckets&handle=${gone!.handle}&offset=${at.header('electric-offset')}&where=${where(gone!.i)}&live=true`)
    await new Promise((resolve) => setTimeout(resolve, 200))
    expect((await call(w.port, `/v1/shape?table=r_buckets&handle=${gone!.handle}&where=${where(gone!.i)}`, { method: 'DELETE' })).status).toBe(202)
    expect((await parked).status).toBe(409)
    expect(existsSync(join(dir, 'logs', 'shapes', bucketOf(stays!.handle), stays!.handle))).toBe(true)
    const kept = await get(r, `table=r_buckets&offset=-1&where=${where(stays!.i)}`)
    expect(kept.status).toBe(200)
    expect(kept.header('electric-handle')).toBe(stays!.handle)
    expect(r.shapes.stats().fallbackTicks).toBe(0)
  })

  it('answers 503 with retry-after for what only the writer can do: a new shape, a subset, a DELETE', async () => {
    const dir = await storage()
    await cluster.query('CREATE TABLE r_new (id int PRIMARY KEY, n int)')
    await cluster.query('INSERT INTO r_new SELECT g, g FROM generate_series(1, 5) g')
    const w = await writer(dir)
    await catchUp(w, 'r_new')
    const r = await replica(dir, ['--allow-delete'])
    const unknown = await get(r, `table=r_new&offset=-1&where=${encodeURIComponent('n > 2')}`)
    expect(unknown.status).toBe(503)
    expect(unknown.header('retry-after')).toBe('1')
    expect(unknown.json()).toEqual({ message: 'The shape is not on this read-only server yet, please retry' })
    // A table that does not exist is the same 400 as on the writer.
    expect((await get(r, 'table=r_nowhere&offset=-1')).status).toBe(400)
    const made = await get(w, `table=r_new&offset=-1&where=${encodeURIComponent('n > 2')}`)
    const served = await get(r, `table=r_new&offset=-1&where=${encodeURIComponent('n > 2')}`)
    expect(served.status).toBe(200)
    expect(served.header('electric-handle')).toBe(made.header('electric-handle'))
    expect(rows(served)).toHaveLength(3)
    const handle = made.header('electric-handle')!
    const subset = await get(r, `table=r_new&handle=${handle}&offset=-1&log=changes_only&where=${encodeURIComponent('n > 2')}&subset__where=${encodeURIComponent('n > 3')}`)
    expect(subset.status).toBe(503)
    expect(subset.header('retry-after')).toBe('1')
    const deleted = await call(r.port, `/v1/shape?table=r_new&handle=${handle}&where=${encodeURIComponent('n > 2')}`, { method: 'DELETE' })
    expect(deleted.status, deleted.text).toBe(503)
    expect((await get(r, `table=r_new&offset=-1&where=${encodeURIComponent('n > 2')}`)).status).toBe(200)
  })

  it('answers an offset past what it has seen with 503 and retry-after, where the writer answers 400, and serves one the writer publishes during the wait', async () => {
    const dir = await storage()
    await cluster.query('CREATE TABLE r_ahead (id int PRIMARY KEY, title text)')
    await cluster.query("INSERT INTO r_ahead VALUES (1, 'one')")
    // Half of a 2 s long-poll timeout: the wait for an offset past the head.
    const w = await writer(dir, ['--long-poll-timeout', '2s'])
    const { handle, offset: snapshot } = await catchUp(w, 'r_ahead')
    await cluster.query("INSERT INTO r_ahead VALUES (2, 'two')")
    const live = await get(w, `table=r_ahead&handle=${handle}&offset=${snapshot}&live=true`)
    expect(rows(live)).toHaveLength(1)
    const [lsn, op] = live.header('electric-offset')!.split('_').map(BigInt) as [bigint, bigint]
    const r = await replica(dir, ['--long-poll-timeout', '2s', '--replica-poll', '0'])

    const farAhead = `${lsn + 1_000_000_000n}_0`
    const fromWriter = await get(w, `table=r_ahead&handle=${handle}&offset=${farAhead}`)
    expect(fromWriter.status).toBe(400)
    expect(fromWriter.json()).toEqual({ message: 'Invalid request', errors: { offset: ['out of bounds for this shape'] } })
    for (const liveParam of ['', '&live=true']) {
      const fromReplica = await get(r, `table=r_ahead&handle=${handle}&offset=${farAhead}${liveParam}`)
      expect(fromReplica.status, fromReplica.text).toBe(503)
      expect(fromReplica.header('retry-after')).toBe('1')
      expect(fromReplica.json()).toEqual({ message: 'This read-only server has not caught up to that offset yet, please retry' })
    }

    // Just past the head (no entry has this offset): the next commit's entries are after it.
    const waiting = get(r, `table=r_ahead&handle=${handle}&offset=${lsn}_${op + 1n}`)
    await cluster.query("INSERT INTO r_ahead VALUES (3, 'three')")
    const reached = await waiting
    expect(reached.status, reached.text).toBe(200)
    expect(rows(reached)).toEqual([expect.objectContaining({ value: { id: '3', title: 'three' } })])
  })

  it("keeps serving across the writer's restart, and wakes when the new writer publishes", async () => {
    const dir = await storage()
    await cluster.query('CREATE TABLE r_restart (id int PRIMARY KEY, title text)')
    await cluster.query("INSERT INTO r_restart VALUES (1, 'one')")
    const first = await writer(dir)
    const { handle, offset } = await catchUp(first, 'r_restart')
    const r = await replica(dir, ['--replica-poll', '0'])
    const parked = get(r, `table=r_restart&handle=${handle}&offset=${offset}&live=true`)
    await first.close()
    // Committed while no writer runs: the next writer streams it from the slot.
    await cluster.query("INSERT INTO r_restart VALUES (2, 'two')")
    const second = await writer(dir)
    const woken = await parked
    expect(woken.status).toBe(200)
    const seen = rows(woken)
    // The parked request may have timed out up-to-date while no writer ran; then the next one gets the row.
    const next = seen.length > 0 ? woken : await get(r, `table=r_restart&handle=${handle}&offset=${woken.header('electric-offset')}&live=true`)
    expect(next.header('electric-handle')).toBe(handle)
    expect(rows(next)).toEqual([expect.objectContaining({ value: { id: '2', title: 'two' } })])
    expect((await get(second, `table=r_restart&handle=${handle}&offset=${offset}`)).status).toBe(200)
  })

  it('writes nothing to the store and opens no replication connection', async () => {
    const dir = await storage()
    await cluster.query('CREATE TABLE r_quiet (id int PRIMARY KEY)')
    await cluster.query('INSERT INTO r_quiet VALUES (1), (2)')
    const w = await writer(dir, ['--allow-delete'])
    const { handle, offset } = await catchUp(w, 'r_quiet')
    await w.close()
    const before = await listing(join(dir, 'logs'))
    const r = await replica(dir, ['--allow-delete'])
    expect((await get(r, 'table=r_quiet&offset=-1')).status).toBe(200)
    expect((await get(r, `table=r_quiet&handle=${handle}&offset=${offset}`)).status).toBe(200)
    expect((await get(r, 'table=r_quiet&offset=-1&where=id%3D1')).status).toBe(503)
    expect((await call(r.port, `/v1/shape?table=r_quiet&handle=${handle}`, { method: 'DELETE' })).status).toBe(503)
    const live = await get(r, `table=r_quiet&handle=${handle}&offset=${offset}&live=true`, { signal: AbortSignal.timeout(500) }).catch(() => undefined)
    expect(live).toBeUndefined()
    const { rows: walsenders } = await cluster.query("SELECT count(*)::int AS n FROM pg_stat_activity WHERE backend_type = 'walsender'")
    expect(walsenders[0]?.n).toBe(0)
    await r.close()
    expect(await listing(join(dir, 'logs'))).toEqual(before)
  })
})

/** Every file under `dir` with its size and modification time. */
async function listing(dir: string): Promise<string[]> {
  const out: string[] = []
  for (const entry of await readdir(dir, { recursive: true, withFileTypes: true })) {
    const path = join(entry.parentPath, entry.name)
    const st = await stat(path)
    out.push(`${path} ${entry.isDirectory() ? 'dir' : st.size} ${st.mtimeMs}`)
  }
  return out.sort()
}
