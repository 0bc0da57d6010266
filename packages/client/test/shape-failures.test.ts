import { afterEach, describe, expect, it, vi } from 'vitest'
import {
  AbortedError,
  InvalidOptionsError,
  InvalidResponseError,
  InvalidTxidError,
  LocalStorageShapeStorage,
  MemoryShapeStorage,
  Shape,
  ShapeStream,
  type ShapeStreamOptions,
  StorageSaveError,
  SubscriberError,
} from '../src/index.js'

/**
 * What callers get back when something goes wrong around the stream rather
 * than on the wire: a bad argument, a stop, a callback's bad answer, a value
 * that does not parse. A fetch of the test's own answers each request; live
 * requests hang until aborted, as a long-poll with nothing new does.
 */

const SCHEMA = { id: { type: 'int8', pk_index: 0, not_null: true }, doc: { type: 'jsonb' } }

interface Answer {
  readonly status?: number
  readonly body?: readonly unknown[]
  readonly headers?: Record<string, string>
}

function snapshot(rows: ReadonlyArray<{ id: string; doc: string; txid?: number }>): Answer {
  return {
    headers: { 'electric-up-to-date': '' },
    body: [
      ...rows.map((r) => ({
        key: `"public"."t"/"${r.id}"`,
        value: { id: r.id, doc: r.doc },
        headers: { operation: 'insert', ...(r.txid === undefined ? {} : { txids: [r.txid] }) },
      })),
      { headers: { control: 'up-to-date' } },
    ],
  }
}

/** Answers non-live requests in turn from `answers`; live ones (and any past the list) are held until aborted. */
function scriptedFetch(answers: Answer[]): { fetch: typeof fetch; urls: URL[] } {
  const urls: URL[] = []
  const fetchImpl = (async (input: string | URL | Request, init?: RequestInit): Promise<Response> => {
    const url = new URL(String(input))
    urls.push(url)
    const answer = url.searchParams.get('live') === 'true' ? undefined : answers.shift()
    if (answer === undefined) {
      return new Promise<Response>((_resolve, reject) => {
        const signal = init?.signal
        if (signal?.aborted) return reject(signal.reason)
        signal?.addEventListener('abort', () => reject(signal.reason), { once: true })
      })
    }
    const status = answer.status ?? 200
    return new Response(answer.body === undefined ? '' : JSON.stringify(answer.body), {
      status,
      headers: {
        'content-type': 'application/json',
        'electric-handle': 'h1',
        'electric-offset': '0_0',
        'electric-schema': JSON.stringify(SCHEMA),
        'electric-cursor': '1',
        ...answer.headers,
      },
    })
  }) as typeof fetch
  return { fetch: fetchImpl, urls }
}

const streams: ShapeStream[] = []
afterEach(async () => {
  await Promise.all(streams.splice(0).map((s) => s.stop()))
})

function open(answers: Answer[], extra: Partial<ShapeStreamOptions> = {}): { stream: ShapeStream; urls: URL[] } {
  const { fetch, urls } = scriptedFetch(answers)
  const stream = new ShapeStream({ url: 'http://sluice.test/v1/shape', params: { table: 't' }, fetch, ...extra })
  streams.push(stream)
  return { stream, urls }
}

describe('waitForTxid with something that is not a transaction id', () => {
  it('rejects at once with InvalidTxidError, and a good waiter registered after it still resolves', async () => {
    const { stream } = open([snapshot([{ id: '1', doc: '{}', txid: 7 }])])
    const shape = new Shape(stream)
    // Both before the shape is up to date, when a bad waiter used to sit among the good ones.
    const bad = shape.waitForTxid(-1)
    const good = shape.waitForTxid(7)
    await expect(bad).rejects.toBeInstanceOf(InvalidTxidError)
    await good
    for (const txid of ['abc', 1.5, 2n ** 64n] as const) {
      await expect(shape.waitForTxid(txid)).rejects.toMatchObject({ code: 'invalid_txid' })
    }
    await expect(shape.waitForTxid('7')).resolves.toBeUndefined()
  })
})

describe('waits when the stream is stopped', () => {
  it("stop() rejects pending waits with AbortedError, and so does every later wait for rows that can't come", async () => {
    const { stream } = open([snapshot([{ id: '1', doc: '{}', txid: 7 }])])
    const shape = new Shape(stream)
    await shape.ready()
    const pending = shape.waitForTxid(99)
    await shape.stop()
    await expect(pending).rejects.toBeInstanceOf(AbortedError)
    await expect(shape.waitForTxid(100)).rejects.toBeInstanceOf(AbortedError)
    // Rows already synced stay synced.
    await expect(shape.ready()).resolves.toBeUndefined()
    await expect(shape.waitForTxid(7)).resolves.toBeUndefined()
  })

  it('a stream stopped by its own stop() or signal, before it was ever up to date, rejects ready()', async () => {
    const controller = new AbortController()
    const first = open([], { signal: controller.signal })
    const viaSignal = new Shape(first.stream)
    const ready = viaSignal.ready()
    controller.abort()
    await expect(ready).rejects.toBeInstanceOf(AbortedError)

    const second = open([])
    const viaStop = new Shape(second.stream)
    const waiting = [viaStop.ready(), viaStop.waitForTxid(5)]
    await second.stream.stop()
    for (const wait of waiting) await expect(wait).rejects.toBeInstanceOf(AbortedError)
    await expect(viaStop.ready()).rejects.toBeInstanceOf(AbortedError)
  })
})

describe('onError answering with params the stream cannot send', () => {
  it('stops the stream with InvalidOptionsError, told to subscribers, with no unhandled rejection', async () => {
    const { stream, urls } = open([{ status: 400, body: [{ message: 'Invalid request' }] }], {
      onError: () => ({ params: { offset: '5_0' } }),
    })
    const errors: unknown[] = []
    stream.subscribe(
      () => {},
      (error) => void errors.push(error),
    )
    await stream.done
    expect(stream.state).toMatchObject({ kind: 'stopped', reason: 'error' })
    expect(errors).toHaveLength(1)
    expect(errors[0]).toBeInstanceOf(InvalidOptionsError)
    expect(urls).toHaveLength(1)
  })
})

describe('a value its column parser refuses', () => {
  for (const [column, value] of [
    ['doc', '{not json'],
    ['id', 'twelve'],
  ] as const) {
    it(`${column} = ${JSON.stringify(value)}: InvalidResponseError naming the column, the parser's error as cause`, async () => {
      const row = column === 'doc' ? { id: '1', doc: value } : { id: value, doc: '{}' }
      const { stream } = open([snapshot([row])])
      const shape = new Shape(stream)
      await expect(shape.ready()).rejects.toBeInstanceOf(InvalidResponseError)
      const error = shape.error as InvalidResponseError
      expect(error.code).toBe('invalid_response')
      expect(error.message).toContain(`column "${column}"`)
      expect(error.cause).toBeInstanceOf(SyntaxError)
      expect(stream.state).toMatchObject({ kind: 'stopped', reason: 'error' })
    })
  }
})

describe('a malformed message from the server', () => {
  const good = { key: '"public"."t"/"1"', value: { id: '1', doc: '{}' }, headers: { operation: 'insert', txids: [7] } }
  const bad: ReadonlyArray<readonly [string, unknown]> = [
    ['a snapshot-end whose xmin is not a number', { headers: { control: 'snapshot-end', xmin: 'abc', xmax: '10', xip_list: [] } }],
    ['a snapshot-end without xip_list', { headers: { control: 'snapshot-end', xmin: '5', xmax: '10' } }],
    ['a change without a key', { value: { id: '2', doc: '{}' }, headers: { operation: 'insert' } }],
    ['a change of an unknown operation', { key: 'k', value: { id: '2', doc: '{}' }, headers: { operation: 'upsert' } }],
    ['a change whose txids is a number', { key: 'k', value: { id: '2', doc: '{}' }, headers: { operation: 'insert', txids: 7 } }],
    ['a move-out whose patterns is not a list', { headers: { event: 'move-out', patterns: 'all' } }],
  ]
  for (const [name, message] of bad) {
    it(`${name}: the stream stops with InvalidResponseError and no message of its body is applied`, async () => {
      const { stream } = open([{ headers: { 'electric-up-to-date': '' }, body: [good, message, { headers: { control: 'up-to-date' } }] }])
      const shape = new Shape(stream)
      const txid = shape.waitForTxid(7)
      await expect(shape.ready()).rejects.toBeInstanceOf(InvalidResponseError)
      await expect(txid).rejects.toBeInstanceOf(InvalidResponseError)
      expect((shape.error as InvalidResponseError).message).toContain('malformed message')
      expect(shape.value.size).toBe(0)
      expect(stream.state).toMatchObject({ kind: 'stopped', reason: 'error' })
    })
  }

  it('a message of a kind this client does not know is passed over', async () => {
    const { stream } = open([{ headers: { 'electric-up-to-date': '' }, body: [good, { headers: { note: 'from a newer server' } }, { headers: { control: 'up-to-date' } }] }])
    const shape = new Shape(stream)
    await shape.ready()
    expect(shape.value.size).toBe(1)
  })

  it("one the shape's own processing cannot take (tags that are not strings) stops the shape and rejects its waits instead of leaving them pending", async () => {
    const tagged = { ...good, headers: { ...good.headers, tags: [5] } }
    const { stream } = open([{ headers: { 'electric-up-to-date': '' }, body: [tagged, { headers: { control: 'up-to-date' } }] }])
    const shape = new Shape(stream)
    const txid = shape.waitForTxid(7)
    await expect(shape.ready()).rejects.toBeInstanceOf(TypeError)
    await expect(txid).rejects.toBeInstanceOf(TypeError)
    expect(shape.error).toBeInstanceOf(TypeError)
    await stream.done
    expect(stream.state).toMatchObject({ kind: 'stopped' })
    // Later waits are told at once rather than left pending.
    await expect(shape.waitForTxid(8)).rejects.toBeInstanceOf(TypeError)
  })
})

describe('a subscriber that throws, or a storage that cannot save', () => {
  it('the other subscribers, ready() and waitForTxid are still told, and the error is reported, not swallowed', async () => {
    const { stream } = open([snapshot([{ id: '1', doc: '{}', txid: 7 }])])
    const reported: unknown[] = []
    const shape = new Shape(stream, { reportError: (error) => void reported.push(error) })
    const told: number[] = []
    shape.subscribe(() => {
      throw new Error('a broken view')
    })
    shape.subscribe((data) => void told.push(data.value.size))
    const ready = shape.ready()
    const txid = shape.waitForTxid(7)
    await ready
    await txid
    expect(told).toEqual([1])
    expect(reported).toHaveLength(1)
    expect(reported[0]).toBeInstanceOf(SubscriberError)
    expect((reported[0] as SubscriberError).code).toBe('subscriber_failed')
    expect(((reported[0] as SubscriberError).cause as Error).message).toBe('a broken view')
    expect(shape.error).toBeUndefined()
    expect(stream.state.kind).toBe('live')
  })

  it("a save that rejects (a full IndexedDB quota) leaves the rows current and tells subscribers and waits", async () => {
    const { fetch } = scriptedFetch([snapshot([{ id: '1', doc: '{}', txid: 7 }])])
    const storage = new MemoryShapeStorage()
    storage.save = async () => {
      throw new DOMException('quota', 'QuotaExceededError')
    }
    const reported: unknown[] = []
    const shape = await Shape.open({ url: 'http://sluice.test/v1/shape', params: { table: 't' }, fetch, storage, reportError: (error) => void reported.push(error) })
    streams.push(shape.stream)
    const told: number[] = []
    shape.subscribe((data) => void told.push(data.value.size))
    await shape.ready()
    await shape.waitForTxid(7)
    expect(told).toEqual([1])
    expect(shape.value.size).toBe(1)
    expect(reported).toHaveLength(1)
    expect(reported[0]).toBeInstanceOf(StorageSaveError)
    expect((reported[0] as StorageSaveError).cause).toBeInstanceOf(DOMException)
  })

  it('a state listener that throws stops nothing and rejects nothing; it is reported to the console', async () => {
    const logged = vi.spyOn(console, 'error').mockImplementation(() => {})
    try {
      const { stream } = open([{ status: 503 }, snapshot([{ id: '1', doc: '{}' }])], { backoff: { initialDelayMs: 1, maxDelayMs: 1 } })
      const broken = new Error('a broken listener')
      stream.onStateChange(() => {
        throw broken
      })
      const shape = new Shape(stream)
      await shape.ready()
      expect(shape.value.size).toBe(1)
      expect(stream.state.kind).toBe('live')
      expect(logged).toHaveBeenCalledWith(broken)
    } finally {
      logged.mockRestore()
    }
  })
})

describe('changes that arrive over several responses', () => {
  it('a live response of changes without up-to-date, then one of up-to-date alone: subscribers are told and the rows saved', async () => {
    const row = (id: string): unknown => ({ key: `"public"."t"/"${id}"`, value: { id, doc: '{}' }, headers: { operation: 'insert' } })
    const upToDate = { headers: { control: 'up-to-date' } }
    // Answered in turn whatever the request; past the list, held until aborted.
    const bodies: Array<{ body: unknown[]; upToDate: boolean }> = [
      { body: [row('1'), upToDate], upToDate: true },
      // A live answer that is a chunk of a catch-up, the client being behind: no up-to-date.
      { body: [row('2')], upToDate: false },
      // The catch-up's last request: the chunk ended at the head, so only the up-to-date is left.
      { body: [upToDate], upToDate: true },
    ]
    const fetchImpl = (async (_input: string | URL | Request, init?: RequestInit): Promise<Response> => {
      const next = bodies.shift()
      if (next === undefined) {
        return new Promise<Response>((_resolve, reject) => init?.signal?.addEventListener('abort', () => reject(init.signal!.reason), { once: true }))
      }
      return new Response(JSON.stringify(next.body), {
        headers: {
          'content-type': 'application/json',
          'electric-handle': 'h1',
          'electric-offset': `${3 - bodies.length}_0`,
          'electric-schema': JSON.stringify(SCHEMA),
          'electric-cursor': '1',
          ...(next.upToDate ? { 'electric-up-to-date': '' } : {}),
        },
      })
    }) as typeof fetch
    const storage = new MemoryShapeStorage()
    const shape = await Shape.open({ url: 'http://sluice.test/v1/shape', params: { table: 't' }, fetch: fetchImpl, storage, storageKey: 'k' })
    streams.push(shape.stream)
    const told: number[] = []
    shape.subscribe((data) => void told.push(data.value.size))
    await vi.waitFor(() => expect(bodies).toHaveLength(0))
    await vi.waitFor(() => expect(told).toEqual([1, 2]))
    expect((await storage.load('k'))?.rows.map(([key]) => key)).toEqual(['"public"."t"/"1"', '"public"."t"/"2"'])
  })
})

/** A shape opened from a LocalStorage adapter over `entries` (key `k`), its server answering one row. */
async function openFromStore(entries: Map<string, string>): Promise<{ storage: LocalStorageShapeStorage; shape: Shape; urls: URL[] }> {
  const storage = new LocalStorageShapeStorage({
    storage: {
      getItem: (key) => entries.get(key) ?? null,
      setItem: (key, value) => void entries.set(key, value),
      removeItem: (key) => void entries.delete(key),
    },
  })
  const { fetch, urls } = scriptedFetch([snapshot([{ id: '1', doc: '{}' }])])
  const shape = await Shape.open({ url: 'http://sluice.test/v1/shape', params: { table: 't' }, fetch, storage, storageKey: 'k' })
  streams.push(shape.stream)
  return { storage, shape, urls }
}

describe('a stored record that cannot be decoded', () => {
  it('is removed, and the shape syncs afresh instead of failing to open on every load', async () => {
    const entries = new Map<string, string>([['sluice:shape:k', '{"version":1,"handle":"h0","off']])
    const { storage, shape, urls } = await openFromStore(entries)
    await shape.ready()
    expect(urls[0]!.searchParams.get('offset')).toBe('-1')
    expect(shape.value.size).toBe(1)
    // Saved again at the up-to-date, readable this time.
    expect((await storage.load('k'))?.handle).toBe('h1')
  })

  it("one of another format version (another tab's client) is left alone, even with value tags this version does not know", async () => {
    const newer = JSON.stringify({ version: 99, handle: 'h0', offset: '5_0', rows: [['k', { id: { '\u0000': 'decimal128', v: '1' } }]] })
    const entries = new Map<string, string>([['sluice:shape:k', newer]])
    const { shape, urls } = await openFromStore(entries)
    expect(entries.get('sluice:shape:k')).toBe(newer)
    await shape.ready()
    expect(urls[0]!.searchParams.get('offset')).toBe('-1')
  })
})
