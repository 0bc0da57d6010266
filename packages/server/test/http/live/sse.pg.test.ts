import { mkdtemp, rm } from 'node:fs/promises'
import { type IncomingHttpHeaders, type IncomingMessage, type Server, type ServerResponse, createServer, get } from 'node:http'
import type { AddressInfo } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import type { LogOffset } from '@sluice/protocol'
import { BEFORE_ALL, ResponseHeader, SSE_CONTENT_TYPE, liveSseCacheControl, upToDateMessage } from '@sluice/protocol'
import { MemoryLogStore, type ShapeLog, type ShapeLogStore, openFileLogStore } from '@sluice/storage'
import { afterEach, describe, expect, it } from 'vitest'
import { LiveWaiters, type ServeSseOptions, SharedReads, type SseOutcome, readFromStore, serveSse } from '../../../src/http/live/index.js'
import { SNAPSHOT_END, changeJson, commit, makeShape, rowJson } from './helpers.js'

const upToDate = (o: LogOffset): string => upToDateMessage(o.tx > 0n ? o.tx : 0n)
const ev = (json: string): string => `data: ${json}\n\n`
const KA = ': keep-alive\n\n'
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms))

interface Client {
  status: number
  headers: IncomingHttpHeaders
  /** Each chunk as it arrived, with its arrival time. */
  chunks: { at: number; text: string }[]
  body(): string
  /** Resolves with the whole body when the server ends the stream. */
  ended: Promise<string>
  destroy(): void
  resume(): void
  start: number
}

interface Harness {
  url: string
  server: Server
  outcomes: Promise<SseOutcome>[]
  lastRaw: ServerResponse | undefined
  raws: ServerResponse[]
}

let cleanups: (() => Promise<void> | void)[] = []
afterEach(async () => {
  for (const c of cleanups.reverse()) await c()
  cleanups = []
})

async function startServer(options: (req: IncomingMessage, res: ServerResponse) => Omit<ServeSseOptions, 'raw'>): Promise<Harness> {
  const h: Harness = { url: '', server: undefined as unknown as Server, outcomes: [], lastRaw: undefined, raws: [] }
  h.server = createServer((req, res) => {
    h.lastRaw = res
    h.raws.push(res)
    const outcome = serveSse({ ...options(req, res), raw: res })
    outcome.catch(() => {}) // asserted by the tests that expect a rejection
    h.outcomes.push(outcome)
  })
  await new Promise<void>((r) => h.server.listen(0, '127.0.0.1', r))
  h.url = `http://127.0.0.1:${(h.server.address() as AddressInfo).port}/v1/shape`
  cleanups.push(() => new Promise<void>((r) => { h.server.closeAllConnections(); h.server.close(() => r()) }))
  return h
}

function connect(url: string, options: { paused?: boolean } = {}): Promise<Client> {
  return new Promise((resolve, reject) => {
    const start = performance.now()
    const req = get(url, { headers: { accept: 'text/event-stream' } }, (res) => {
      const chunks: { at: number; text: string }[] = []
      res.setEncoding('utf8')
      res.on('data', (text: string) => chunks.push({ at: performance.now() - start, text }))
      if (options.paused) res.pause()
      const ended = new Promise<string>((done, fail) => {
        res.on('end', () => done(chunks.map((c) => c.text).join('')))
        res.on('error', fail)
      })
      ended.catch(() => {})
      resolve({
        status: res.statusCode!,
        headers: res.headers,
        chunks,
        body: () => chunks.map((c) => c.text).join(''),
        ended,
        destroy: () => req.destroy(),
        resume: () => res.resume(),
        start,
      })
    })
    req.on('error', reject)
  })
}

async function until(cond: () => boolean, ms = 5000): Promise<void> {
  const end = Date.now() + ms
  while (!cond()) {
    if (Date.now() > end) throw new Error('condition not met in time')
    await sleep(5)
  }
}

async function memoryStore(chunkBytes = 100_000): Promise<MemoryLogStore> {
  const store = new MemoryLogStore({ chunkBytes })
  cleanups.push(() => store.close())
  return store
}

function liveWaiters(store: ShapeLogStore, resolutionMs = 10): LiveWaiters {
  const waiters = new LiveWaiters({ store, resolutionMs })
  cleanups.push(() => waiters.close())
  return waiters
}

describe('serveSse on a real node:http server', () => {
  it('data already past the offset: headers, one event per message, up-to-date, and the stream stays open for the next batch', async () => {
    const store = await memoryStore()
    const rows = [rowJson(1, { text: 'a,b},{"c' }), rowJson(2, { text: '\\"é😀' }), rowJson(3)]
    const log = await makeShape(store, 'h1', rows)
    const waiters = liveWaiters(store)
    const h = await startServer(() => ({
      headers: { [ResponseHeader.handle]: 'h1', [ResponseHeader.offset]: '0_0', [ResponseHeader.cursor]: '123', 'Cache-Control': 'overridden' },
      handle: 'h1',
      after: BEFORE_ALL,
      read: readFromStore(store, 'h1'),
      upToDate,
      waiters,
      timeoutMs: 60_000,
    }))
    const c = await connect(h.url)
    expect(c.status).toBe(200)
    expect(c.headers['content-type']).toBe(SSE_CONTENT_TYPE)
    expect(c.headers['connection']).toBe('keep-alive')
    expect(c.headers['cache-control']).toBe(liveSseCacheControl(60_000))
    expect(c.headers['cache-control']).toBe('public, max-age=59')
    expect(c.headers['electric-handle']).toBe('h1')
    expect(c.headers['electric-offset']).toBe('0_0')
    expect(c.headers['electric-cursor']).toBe('123')
    const first = [...rows, SNAPSHOT_END].map(ev).join('') + ev(upToDate({ tx: 0n, op: 0n }))
    await until(() => c.body() === first)
    // Still open: it waits on the shape, and the next commit arrives on the same stream.
    await until(() => waiters.size === 1)
    const tx = [changeJson(10n, 0, 4)]
    await commit(store, log, 10n, tx)
    await until(() => c.body().length > first.length)
    await until(() => c.body() === first + tx.map(ev).join('') + ev(upToDate({ tx: 10n, op: 0n })))
    c.destroy()
    expect(await h.outcomes[0]).toBe('disconnected')
    expect(waiters.size).toBe(0)
  })

  it('holds the stream: one event per message per batch, up-to-date at the head, ends at the timeout', async () => {
    const store = await memoryStore()
    const log = await makeShape(store, 'h2', [rowJson(1)])
    const waiters = liveWaiters(store)
    const h = await startServer(() => ({
      headers: {},
      handle: 'h2',
      after: log.head().lastOffset,
      read: readFromStore(store, 'h2'),
      upToDate,
      waiters,
      timeoutMs: 700,
      keepAliveMs: 60_000,
    }))
    const c = await connect(h.url)
    expect(c.headers['cache-control']).toBe('public, max-age=1')
    await until(() => waiters.size === 1)
    const tx1 = [changeJson(10n, 0, 1, { s: ',' }), changeJson(10n, 2, 2, { s: '}"\\' })]
    await commit(store, log, 10n, tx1)
    await until(() => c.body().length > 0)
    const tx2 = [changeJson(20n, 0, 3)]
    await sleep(30)
    await commit(store, log, 20n, tx2)
    const body = await c.ended
    expect(body).toBe(tx1.map(ev).join('') + ev(upToDate({ tx: 10n, op: 2n })) + tx2.map(ev).join('') + ev(upToDate({ tx: 20n, op: 0n })))
    expect(await h.outcomes[0]).toBe('timeout')
    expect(c.chunks.at(-1)!.at).toBeGreaterThanOrEqual(0) // arrived
    expect(performance.now() - c.start).toBeGreaterThanOrEqual(690)
    expect(performance.now() - c.start).toBeLessThan(2000)
    expect(waiters.size).toBe(0)
  })

  it('a batch spanning several chunks is sent whole with one up-to-date at its end', async () => {
    const store = await memoryStore(300)
    const log = await makeShape(store, 'h3', [rowJson(1)])
    const waiters = liveWaiters(store)
    const h = await startServer(() => ({
      headers: {},
      handle: 'h3',
      after: log.head().lastOffset,
      read: readFromStore(store, 'h3'),
      upToDate,
      waiters,
      timeoutMs: 400,
      keepAliveMs: 60_000,
    }))
    const c = await connect(h.url)
    await until(() => waiters.size === 1)
    const tx = Array.from({ length: 12 }, (_, k) => changeJson(50n, 2 * k, k, { pad: 'x'.repeat(40) }))
    await commit(store, log, 50n, tx)
    expect(log.head().closedChunks).toBeGreaterThan(2)
    const body = await c.ended
    expect(body).toBe(tx.map(ev).join('') + ev(upToDate({ tx: 50n, op: 22n })))
    expect(await h.outcomes[0]).toBe('timeout')
  })

  it('sends keep-alive comments after each keepAliveMs of silence, and restarts the count after data', async () => {
    const store = await memoryStore()
    const log = await makeShape(store, 'h4', [rowJson(1)])
    const waiters = liveWaiters(store, 10)
    const h = await startServer(() => ({
      headers: {},
      handle: 'h4',
      after: log.head().lastOffset,
      read: readFromStore(store, 'h4'),
      upToDate,
      waiters,
      timeoutMs: 1000,
      keepAliveMs: 200,
    }))
    const c = await connect(h.url)
    await until(() => c.body() === KA)
    const firstKa = c.chunks[0]!.at
    expect(firstKa).toBeGreaterThanOrEqual(190)
    await sleep(50)
    const tx = [changeJson(7n, 0, 1)]
    await commit(store, log, 7n, tx)
    const dataAt = performance.now() - c.start
    const body = await c.ended
    expect(await h.outcomes[0]).toBe('timeout')
    // Byte-exact: keep-alives, then the batch, then keep-alives again until the end.
    const prefix = KA + tx.map(ev).join('') + ev(upToDate({ tx: 7n, op: 0n }))
    expect(body.startsWith(prefix)).toBe(true)
    const rest = body.slice(prefix.length)
    expect(rest).toMatch(/^(: keep-alive\n\n)+$/)
    const kaAfter = rest.length / KA.length
    // Data at ~250 ms, then a comment every 200 ms until 1000 ms: 3 of them (±1 for scheduling).
    expect(kaAfter).toBeGreaterThanOrEqual(2)
    expect(kaAfter).toBeLessThanOrEqual(4)
    const kaTimes = c.chunks.filter((ch) => ch.text === KA).map((ch) => ch.at)
    const afterData = kaTimes.filter((t) => t > dataAt)
    expect(afterData[0]! - dataAt).toBeGreaterThanOrEqual(180) // silence counted from the data, not the last comment
    expect(waiters.size).toBe(0)
  })

  it('ends silently when the shape is invalidated while the stream waits', async () => {
    const store = await memoryStore()
    const log = await makeShape(store, 'h5', [rowJson(1)])
    const waiters = liveWaiters(store)
    let invalid = false
    const h = await startServer(() => ({
      headers: {},
      handle: 'h5',
      after: log.head().lastOffset,
      read: readFromStore(store, 'h5'),
      upToDate,
      waiters,
      isInvalidated: () => invalid,
      timeoutMs: 10_000,
    }))
    const c = await connect(h.url)
    await until(() => waiters.size === 1)
    invalid = true
    waiters.invalidate('h5')
    expect(await c.ended).toBe('')
    expect(await h.outcomes[0]).toBe('invalidated')

    // Invalidated before it could wait: ends at once, nothing sent.
    const d = await connect(h.url)
    expect(await d.ended).toBe('')
    expect(await h.outcomes[1]).toBe('invalidated')

    // The shape deleted (read gives undefined) between a wake and the read.
    invalid = false
    await store.deleteShape('h5')
    const e = await connect(h.url)
    expect(await e.ended).toBe('')
    expect(await h.outcomes[2]).toBe('invalidated')
    expect(waiters.size).toBe(0)
  })

  it('stops cleanly when the client disconnects: no waiter, no listener left', async () => {
    const store = await memoryStore()
    const log = await makeShape(store, 'h6', [rowJson(1)])
    const waiters = liveWaiters(store)
    const h = await startServer(() => ({
      headers: {},
      handle: 'h6',
      after: log.head().lastOffset,
      read: readFromStore(store, 'h6'),
      upToDate,
      waiters,
      timeoutMs: 10_000,
      keepAliveMs: 10_000,
    }))
    const c = await connect(h.url)
    await until(() => waiters.size === 1)
    const raw = h.lastRaw!
    const closeListenersWhileOpen = raw.listenerCount('close')
    c.destroy()
    expect(await h.outcomes[0]).toBe('disconnected')
    expect(waiters.size).toBe(0)
    expect(raw.listenerCount('close')).toBeLessThan(closeListenersWhileOpen)
    expect(raw.listenerCount('drain')).toBe(0)
    // A later flush finds nothing to wake and writes nothing.
    await commit(store, log, 5n, [changeJson(5n, 0, 1)])
  })

  it('ends with aborted when the server signal fires (shutdown) or the waiters close', async () => {
    const store = await memoryStore()
    const log = await makeShape(store, 'h7', [rowJson(1)])
    const waiters = new LiveWaiters({ store, resolutionMs: 10 })
    const shutdown = new AbortController()
    const h = await startServer(() => ({
      headers: {},
      handle: 'h7',
      after: log.head().lastOffset,
      read: readFromStore(store, 'h7'),
      upToDate,
      waiters,
      signal: shutdown.signal,
      timeoutMs: 10_000,
    }))
    const c = await connect(h.url)
    await until(() => waiters.size === 1)
    shutdown.abort()
    expect(await c.ended).toBe('')
    expect(await h.outcomes[0]).toBe('aborted')

    const h2 = await startServer(() => ({
      headers: {},
      handle: 'h7',
      after: log.head().lastOffset,
      read: readFromStore(store, 'h7'),
      upToDate,
      waiters,
      timeoutMs: 10_000,
    }))
    const d = await connect(h2.url)
    await until(() => waiters.size === 1)
    waiters.close()
    expect(await d.ended).toBe('')
    expect(await h2.outcomes[0]).toBe('aborted')
  })

  it('serves file spans from a FileLogStore, immediate and held', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'sluice-sse-'))
    cleanups.push(() => rm(dir, { recursive: true, force: true }))
    const store = await openFileLogStore({ dir, chunkBytes: 100_000, flushIntervalMs: 1000 })
    cleanups.push(() => store.close())
    const rows = [rowJson(1, { t: '{"nested":"json,in,a,string"}' }), rowJson(2, { t: '\u2028' })]
    const log: ShapeLog = await makeShape(store, 'f1', rows)
    const waiters = liveWaiters(store)
    let after: LogOffset = BEFORE_ALL
    const h = await startServer(() => ({
      headers: {},
      handle: 'f1',
      after,
      read: readFromStore(store, 'f1'),
      upToDate,
      waiters,
      timeoutMs: 500,
      keepAliveMs: 60_000,
    }))
    const c = await connect(h.url)
    expect(await c.ended).toBe([...rows, SNAPSHOT_END].map(ev).join('') + ev(upToDate({ tx: 0n, op: 0n })))
    after = log.head().lastOffset
    const d = await connect(h.url)
    await until(() => waiters.size === 1)
    const tx = [changeJson(99n, 0, 1, { t: 'é,"}' }), changeJson(99n, 2, 2)]
    await commit(store, log, 99n, tx)
    expect(await d.ended).toBe(tx.map(ev).join('') + ev(upToDate({ tx: 99n, op: 2n })))
    expect(h.outcomes.length).toBe(2)
    expect(await h.outcomes[1]).toBe('timeout')
  })

  it('many concurrent streams on one shape: each gets the batch; no timer per stream', async () => {
    const timers = (): number => process.getActiveResourcesInfo().filter((r) => r === 'Timeout').length
    const store = await memoryStore()
    const log = await makeShape(store, 'h8', [rowJson(1)])
    const waiters = liveWaiters(store)
    const h = await startServer(() => ({
      headers: {},
      handle: 'h8',
      after: log.head().lastOffset,
      read: readFromStore(store, 'h8'),
      upToDate,
      waiters,
      timeoutMs: 600,
      keepAliveMs: 60_000,
    }))
    const before = timers()
    const clients = await Promise.all(Array.from({ length: 50 }, () => connect(h.url)))
    await until(() => waiters.size === 50)
    expect(timers()).toBeLessThanOrEqual(before + 1) // the wheel's own interval is unref'd and not even counted here
    expect((waiters as unknown as { timer: unknown }).timer).toBeDefined()
    const tx = [changeJson(3n, 0, 1)]
    await commit(store, log, 3n, tx)
    const bodies = await Promise.all(clients.map((c) => c.ended))
    for (const b of bodies) expect(b).toBe(tx.map(ev).join('') + ev(upToDate({ tx: 3n, op: 0n })))
    expect(await Promise.all(h.outcomes)).toEqual(Array(50).fill('timeout'))
  })

  it('streams woken by one write send it, up-to-date line included, with one socket write each, all from one shared buffer', async () => {
    const store = await memoryStore()
    const log = await makeShape(store, 'h9', [rowJson(1)])
    const waiters = liveWaiters(store)
    const shared = new SharedReads()
    const h = await startServer(() => ({
      headers: {},
      handle: 'h9',
      after: log.head().lastOffset,
      read: readFromStore(store, 'h9', shared),
      upToDate,
      waiters,
      timeoutMs: 600,
      keepAliveMs: 60_000,
    }))
    const clients = await Promise.all(Array.from({ length: 20 }, () => connect(h.url)))
    await until(() => waiters.size === 20)
    // Every write each stream hands its socket from now on (the headers went out already).
    const writes = h.raws.map((raw) => {
      const seen: Uint8Array[] = []
      const write = raw.write.bind(raw) as (chunk: Uint8Array) => boolean
      raw.write = ((chunk: Uint8Array) => {
        seen.push(chunk)
        return write(chunk)
      }) as typeof raw.write
      return seen
    })
    const tx = [changeJson(3n, 0, 1), changeJson(3n, 1, 2)]
    await commit(store, log, 3n, tx)
    const bodies = await Promise.all(clients.map((c) => c.ended))
    const expected = tx.map(ev).join('') + ev(upToDate({ tx: 3n, op: 1n }))
    for (const b of bodies) expect(b).toBe(expected)
    for (const seen of writes) expect(seen).toHaveLength(1)
    const first = writes[0]![0]!
    expect(Buffer.from(first).toString('utf8')).toBe(expected)
    for (const seen of writes) expect(seen[0]).toBe(first)
  })

  it('a flush landing while a read is in flight is not missed (hasDataAfter checked right before each wait)', async () => {
    const store = await memoryStore()
    const log = await makeShape(store, 'r1', [rowJson(1)])
    const waiters = liveWaiters(store)
    const inner = readFromStore(store, 'r1')
    const tx = [changeJson(30n, 0, 1)]
    let raced = false
    // The first read sees an empty range, then a flush lands before serveSse gets to wait.
    const read = Object.assign(
      async (after: LogOffset) => {
        const batch = await inner(after)
        if (!raced) {
          raced = true
          await commit(store, log, 30n, tx)
        }
        return batch
      },
      { hasDataAfter: inner.hasDataAfter },
    )
    const h = await startServer(() => ({
      headers: {}, handle: 'r1', after: log.head().lastOffset, read, upToDate, waiters, timeoutMs: 5_000, keepAliveMs: 60_000,
    }))
    const c = await connect(h.url)
    const expected = tx.map(ev).join('') + ev(upToDate({ tx: 30n, op: 0n }))
    await until(() => c.body() === expected, 1000)
    expect(c.chunks[0]!.at).toBeLessThan(500)
    c.destroy()
    expect(await h.outcomes[0]).toBe('disconnected')
  })

  it('without hasDataAfter, such a batch still goes out by the next keep-alive tick, instead of a comment', async () => {
    const store = await memoryStore()
    const log = await makeShape(store, 'r2', [rowJson(1)])
    const waiters = liveWaiters(store)
    const inner = readFromStore(store, 'r2')
    const tx = [changeJson(40n, 0, 1)]
    let raced = false
    const read = async (after: LogOffset) => {
      const batch = await inner(after)
      if (!raced) {
        raced = true
        await commit(store, log, 40n, tx)
      }
      return batch
    }
    const h = await startServer(() => ({
      headers: {}, handle: 'r2', after: log.head().lastOffset, read, upToDate, waiters, timeoutMs: 5_000, keepAliveMs: 200,
    }))
    const c = await connect(h.url)
    const expected = tx.map(ev).join('') + ev(upToDate({ tx: 40n, op: 0n }))
    await until(() => c.body() === expected, 1000)
    expect(c.chunks[0]!.at).toBeGreaterThanOrEqual(190)
    c.destroy()
    expect(await h.outcomes[0]).toBe('disconnected')
  })

  it('backpressure: a paused client gets the whole batch once it reads; a client that leaves mid-drain ends the stream', async () => {
    const store = await memoryStore(1 << 20)
    const log = await makeShape(store, 'b1', [rowJson(1)])
    const waiters = liveWaiters(store)
    const h = await startServer(() => ({
      headers: {}, handle: 'b1', after: log.head().lastOffset, read: readFromStore(store, 'b1'), upToDate, waiters, timeoutMs: 1500, keepAliveMs: 60_000,
    }))
    const tx = Array.from({ length: 1500 }, (_, k) => changeJson(60n, 2 * k, k, { pad: 'é'.repeat(1500) }))
    const expected = tx.map(ev).join('') + ev(upToDate({ tx: 60n, op: BigInt(2 * 1499) }))

    const slow = await connect(h.url, { paused: true })
    const leaving = await connect(h.url, { paused: true })
    await until(() => waiters.size === 2)
    await commit(store, log, 60n, tx)
    // Both responses are now blocked on 'drain'.
    await until(() => h.raws.every((r) => r.writableNeedDrain))
    leaving.destroy()
    await until(() => h.outcomes.length === 2)
    expect(await h.outcomes[1]).toBe('disconnected')
    expect(h.raws[1]!.listenerCount('drain')).toBe(0)
    slow.resume()
    const slowBody = await slow.ended
    expect(slowBody.length).toBe(expected.length)
    expect(slowBody === expected).toBe(true)
    const outcomes = await Promise.all(h.outcomes)
    expect(outcomes.sort()).toEqual(['disconnected', 'timeout'])
    expect(waiters.size).toBe(0)
  })

  it('a client that stops reading for good is cut once the stream has outlived its timeout, not held for ever', async () => {
    const store = await memoryStore(1 << 20)
    const log = await makeShape(store, 'b2', [rowJson(1)])
    const waiters = liveWaiters(store)
    const h = await startServer(() => ({
      headers: {}, handle: 'b2', after: log.head().lastOffset, read: readFromStore(store, 'b2'), upToDate, waiters, timeoutMs: 600, keepAliveMs: 300,
    }))
    const stalled = await connect(h.url, { paused: true })
    await until(() => waiters.size === 1)
    await commit(store, log, 70n, Array.from({ length: 1500 }, (_, k) => changeJson(70n, 2 * k, k, { pad: 'é'.repeat(1500) })))
    await until(() => h.raws[0]!.writableNeedDrain)
    const blockedAt = performance.now()
    // The stream is blocked on 'drain' and parked nowhere: the cut is what ends it.
    expect(await h.outcomes[0]).toBe('disconnected')
    expect(performance.now() - blockedAt).toBeLessThan(5_000)
    expect(h.raws[0]!.destroyed).toBe(true)
    expect(h.raws[0]!.listenerCount('drain')).toBe(0)
    expect(waiters.size).toBe(0)
    stalled.destroy()
  })

  it('a store/scan disagreement destroys the stream and rejects', async () => {
    const store = await memoryStore()
    await makeShape(store, 'h9', [rowJson(1)])
    const waiters = liveWaiters(store)
    const h = await startServer(() => ({
      headers: {},
      handle: 'h9',
      after: BEFORE_ALL,
      read: () => ({ bytes: Buffer.from('{"a":1},{"b":2},'), entryCount: 3, nextOffset: { tx: 0n, op: 0n }, reachedHead: true }),
      upToDate,
      waiters,
    }))
    const c = await connect(h.url)
    await expect(c.ended).rejects.toThrow()
    await expect(h.outcomes[0]).rejects.toThrow(/2 entries by scan, 3 by the store/)
  })
})
