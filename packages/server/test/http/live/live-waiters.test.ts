import { getEventListeners, setMaxListeners } from 'node:events'
import { setFlagsFromString } from 'node:v8'
import { runInNewContext } from 'node:vm'
import { BEFORE_ALL, parseOffset } from '@sluice/protocol'
import { MemoryLogStore } from '@sluice/storage'
import { afterEach, describe, expect, it, vi } from 'vitest'
import { LiveWaiters, type WaitResult, Waiter, waitForData } from '../../../src/http/live/index.js'
import { FakeFlushes, changeJson, commit, makeShape, rowJson } from './helpers.js'

/** Tracks when each promise settled and with what. */
function track(p: Promise<WaitResult>): { result: WaitResult | undefined; at: number | undefined } {
  const t: { result: WaitResult | undefined; at: number | undefined } = { result: undefined, at: undefined }
  void p.then((r) => {
    t.result = r
    t.at = Date.now()
  })
  return t
}

afterEach(() => {
  vi.useRealTimers()
})

describe('LiveWaiters with a real MemoryLogStore', () => {
  it('wakes the waiters of exactly the shapes a flush advanced', async () => {
    const store = new MemoryLogStore({ chunkBytes: 10_000 })
    const a = await makeShape(store, 'a', [rowJson(1)])
    await makeShape(store, 'b', [rowJson(2)])
    const waiters = new LiveWaiters({ store, resolutionMs: 20 })
    const wa1 = track(waiters.wait('a', { timeoutMs: 5000 }))
    const wa2 = track(waiters.wait('a', { timeoutMs: 5000 }))
    const wb = track(waiters.wait('b', { timeoutMs: 5000 }))
    expect(waiters.size).toBe(3)
    const flushed = await commit(store, a, 100n, [changeJson(100n, 0, 1)])
    expect(flushed.advanced).toEqual(['a'])
    await Promise.resolve()
    expect(wa1.result).toBe('advanced')
    expect(wa2.result).toBe('advanced')
    expect(wb.result).toBeUndefined()
    expect(waiters.size).toBe(1)
    // A flush that advances nothing wakes nobody.
    store.advance(200n)
    await store.flush()
    await Promise.resolve()
    expect(wb.result).toBeUndefined()
    waiters.close()
    await Promise.resolve()
    expect(wb.result).toBe('aborted')
    await store.close()
  })

  it('waitForData: at once when data exists, waits for a flush otherwise, waits on past an advance that does not reach the offset', async () => {
    const store = new MemoryLogStore({ chunkBytes: 10_000 })
    const log = await makeShape(store, 's', [rowJson(1)])
    const waiters = new LiveWaiters({ store, resolutionMs: 10 })
    expect(await waitForData(log, BEFORE_ALL, waiters, 1000)).toBe('data')

    const head = log.head().lastOffset
    const pending = waitForData(log, head, waiters, 5000)
    expect(waiters.size).toBe(1)
    await commit(store, log, 10n, [changeJson(10n, 0, 1)])
    expect(await pending).toBe('data')

    // An offset beyond the head: the first advance does not get there, the second does.
    const ahead = waitForData(log, parseOffset('30_0'), waiters, 5000)
    let done = false
    void ahead.then(() => (done = true))
    await commit(store, log, 20n, [changeJson(20n, 0, 1)])
    await new Promise((r) => setTimeout(r, 30))
    expect(done).toBe(false)
    expect(waiters.size).toBe(1)
    await commit(store, log, 40n, [changeJson(40n, 0, 1)])
    expect(await ahead).toBe('data')

    const start = performance.now()
    expect(await waitForData(log, log.head().lastOffset, waiters, 120)).toBe('timeout')
    expect(performance.now() - start).toBeGreaterThanOrEqual(119)

    const ac = new AbortController()
    const aborted = waitForData(log, log.head().lastOffset, waiters, 5000, ac.signal)
    ac.abort()
    expect(await aborted).toBe('aborted')

    const inval = waitForData(log, log.head().lastOffset, waiters, 5000)
    waiters.invalidate('s')
    expect(await inval).toBe('invalidated')
    expect(waiters.size).toBe(0)
    waiters.close()
    await store.close()
  })

  it("a log whose head throws when a flush wakes its wait (deleted under it) ends the wait as invalidated, and the flush goes on", async () => {
    const store = new MemoryLogStore({ chunkBytes: 10_000 })
    const log = await makeShape(store, 'gone', [rowJson(1)])
    const other = await makeShape(store, 'other', [rowJson(1)])
    const waiters = new LiveWaiters({ store, resolutionMs: 10 })
    let deleted = false
    const held = { id: log.id, head: () => (deleted ? (() => { throw new Error('shape_deleted') })() : log.head()) }
    const waiting = waitForData(held, log.head().lastOffset, waiters, 5000)
    const alongside = waitForData(other, other.head().lastOffset, waiters, 5000)
    deleted = true
    await commit(store, log, 10n, [changeJson(10n, 0, 1)])
    await commit(store, other, 11n, [changeJson(11n, 0, 1)])
    expect(await waiting).toBe('invalidated')
    expect(await alongside).toBe('data')
    expect(waiters.size).toBe(0)
    waiters.close()
    await store.close()
  })

  it('times out on real timers within the wheel resolution, never early', async () => {
    const waiters = new LiveWaiters({ store: new FakeFlushes(), resolutionMs: 25 })
    const timeouts = [1, 24, 25, 26, 80, 150]
    const start = performance.now()
    const results = await Promise.all(
      timeouts.map(async (t) => {
        const r = await waiters.wait('x', { timeoutMs: t })
        return { t, r, took: performance.now() - start }
      }),
    )
    for (const { t, r, took } of results) {
      expect(r).toBe('timeout')
      expect(took).toBeGreaterThanOrEqual(t - 1) // timers may fire a hair early by the monotonic clock
      expect(took).toBeLessThan(t + 2 * 25 + 100) // slack for a loaded machine
    }
    expect(waiters.size).toBe(0)
  })
})

describe('LiveWaiters on fake timers', () => {
  it('resolves each timeout in [timeout, timeout + 2 × resolution] and keeps one timer', async () => {
    vi.useFakeTimers({ now: 1_000_000 })
    const base = vi.getTimerCount()
    const waiters = new LiveWaiters({ store: new FakeFlushes(), resolutionMs: 100, now: () => Date.now() })
    const start = Date.now()
    const timeouts = [1, 50, 99, 100, 101, 199, 200, 250, 1000, 20_000]
    const tracked = timeouts.map((t) => ({ t, w: track(waiters.wait('x', { timeoutMs: t })) }))
    expect(vi.getTimerCount()).toBe(base + 1)
    for (let step = 0; step < 20_400 / 10; step++) await vi.advanceTimersByTimeAsync(10)
    for (const { t, w } of tracked) {
      expect(w.result).toBe('timeout')
      expect(w.at! - start).toBeGreaterThanOrEqual(t)
      expect(w.at! - start).toBeLessThanOrEqual(t + 200)
    }
    expect(waiters.size).toBe(0)
    expect(vi.getTimerCount()).toBe(base)
  })

  it('10k concurrent waiters over 100 shapes cost one timer; a flush wakes only its shape', async () => {
    vi.useFakeTimers({ now: 5_000_000 })
    const base = vi.getTimerCount()
    const flushes = new FakeFlushes()
    const waiters = new LiveWaiters({ store: flushes, now: () => Date.now() })
    const tracked: { shape: number; timeout: number; w: ReturnType<typeof track> }[] = []
    for (let i = 0; i < 10_000; i++) {
      const shape = i % 100
      const timeout = 1000 + (i % 37) * 500
      tracked.push({ shape, timeout, w: track(waiters.wait(`shape-${shape}`, { timeoutMs: timeout })) })
    }
    expect(waiters.size).toBe(10_000)
    expect(vi.getTimerCount()).toBe(base + 1)

    flushes.emit(['shape-7', 'shape-42', 'not-a-waited-shape'])
    await vi.advanceTimersByTimeAsync(0)
    for (const { shape, w } of tracked) expect(w.result).toBe(shape === 7 || shape === 42 ? 'advanced' : undefined)
    expect(waiters.size).toBe(9_800)

    waiters.invalidate('shape-9')
    await vi.advanceTimersByTimeAsync(0)
    expect(waiters.size).toBe(9_700)
    expect(vi.getTimerCount()).toBe(base + 1)

    await vi.advanceTimersByTimeAsync(30_000)
    for (const { shape, timeout, w } of tracked) {
      if (shape === 7 || shape === 42) expect(w.result).toBe('advanced')
      else if (shape === 9) expect(w.result).toBe('invalidated')
      else {
        expect(w.result).toBe('timeout')
        expect(w.at! - 5_000_000).toBeGreaterThanOrEqual(timeout)
        expect(w.at! - 5_000_000).toBeLessThanOrEqual(timeout + 200)
      }
    }
    expect(waiters.size).toBe(0)
    expect(vi.getTimerCount()).toBe(base)
  })

  it('a flush that advances many shapes wakes their waiters slice by slice, one slice per turn, in the order it named them', async () => {
    const flushes = new FakeFlushes()
    const waiters = new LiveWaiters({ store: flushes, wakeSlice: 100 })
    const handles = Array.from({ length: 1000 }, (_, i) => `s${i}`)
    const order: string[] = []
    const results = handles.map((h) => waiters.wait(h, { timeoutMs: 60_000 }).then((r) => (order.push(h), r)))
    const aborter = new AbortController()
    const aborted = waiters.wait('s950', { timeoutMs: 60_000, signal: aborter.signal })
    flushes.emit(handles)
    // One slice at once; the rest wait for later turns of the event loop.
    expect(waiters.size).toBe(1001 - 100)
    await Promise.resolve()
    expect(order).toEqual(handles.slice(0, 100))
    await new Promise((r) => setImmediate(r))
    expect(waiters.size).toBe(1001 - 200)
    // A waiter still to be woken can be resolved otherwise meanwhile; its turn then skips it.
    aborter.abort()
    expect(await aborted).toBe('aborted')
    // A waiter that comes after the flush read the head after it: not woken by it.
    const late = track(waiters.wait('s999', { timeoutMs: 60_000 }))
    expect(await Promise.all(results)).toEqual(handles.map(() => 'advanced'))
    expect(order).toEqual(handles)
    expect(late.result).toBeUndefined()
    expect(waiters.size).toBe(1)
    waiters.close()
    await Promise.resolve()
    expect(late.result).toBe('aborted')
  })

  it('never splits the waiters of one shape across turns: they wake together, to share one read', () => {
    const flushes = new FakeFlushes()
    const waiters = new LiveWaiters({ store: flushes, wakeSlice: 100 })
    for (let i = 0; i < 500; i++) void waiters.wait('busy', { timeoutMs: 60_000 })
    for (let i = 0; i < 300; i++) void waiters.wait(`s${i}`, { timeoutMs: 60_000 })
    flushes.emit(['s0', 'busy', ...Array.from({ length: 299 }, (_, i) => `s${i + 1}`)])
    // s0 (1) is under the slice, so 'busy' (500) goes with it; the rest wait.
    expect(waiters.size).toBe(800 - 501)
    waiters.close()
  })

  it('resolves due waiters a slice per turn, so a flush between slices wakes its waiter before the rest expire', () => {
    vi.useFakeTimers({ now: 1_000_000 })
    const base = vi.getTimerCount()
    const flushes = new FakeFlushes()
    const waiters = new LiveWaiters({ store: flushes, resolutionMs: 100, expireSlice: 3, now: () => Date.now() })
    const woken: string[] = []
    class Recorded extends Waiter {
      constructor(readonly name: string) {
        super()
      }
      wake(result: WaitResult): void {
        woken.push(`${this.name} ${result}`)
      }
    }
    for (let i = 0; i < 10; i++) expect(waiters.park(new Recorded(`s${i}`), `s${i}`, 1000)).toBeUndefined()
    expect(waiters.park(new Recorded('hot'), 'hot', 60_000)).toBeUndefined()
    vi.advanceTimersByTime(999)
    expect(woken).toEqual([])
    // The tick at the deadline: three expire, the rest wait for the next turn.
    vi.advanceTimersToNextTimer()
    expect(woken).toEqual(['s0 timeout', 's1 timeout', 's2 timeout'])
    flushes.emit(['hot'])
    expect(woken.at(-1)).toBe('hot advanced')
    // One turn each, none early and none twice.
    vi.advanceTimersToNextTimer()
    expect(woken.slice(4)).toEqual(['s3 timeout', 's4 timeout', 's5 timeout'])
    vi.advanceTimersToNextTimer()
    vi.advanceTimersToNextTimer()
    expect(woken.slice(4)).toEqual(Array.from({ length: 7 }, (_, i) => `s${i + 3} timeout`))
    expect(waiters.size).toBe(0)
    // Nobody left: neither the interval nor a turn of expiry is scheduled.
    expect(vi.getTimerCount()).toBe(base)
    expect(() => new LiveWaiters({ store: flushes, expireSlice: 0 })).toThrow(RangeError)
  })

  it('a waiter cancelled while its slice waits is not woken, and close() drops the pending turn', () => {
    vi.useFakeTimers({ now: 2_000_000 })
    const base = vi.getTimerCount()
    const waiters = new LiveWaiters({ store: new FakeFlushes(), resolutionMs: 100, expireSlice: 2, now: () => Date.now() })
    const woken: string[] = []
    const all = Array.from({ length: 6 }, (_, i) => {
      const w = new (class extends Waiter {
        wake(result: WaitResult): void {
          woken.push(`w${i} ${result}`)
        }
      })()
      waiters.park(w, `s${i}`, 500)
      return w
    })
    vi.advanceTimersByTime(500)
    expect(woken).toEqual(['w0 timeout', 'w1 timeout'])
    waiters.cancel(all[2]!)
    expect(woken.at(-1)).toBe('w2 aborted')
    vi.advanceTimersToNextTimer()
    expect(woken.slice(3)).toEqual(['w3 timeout', 'w4 timeout'])
    waiters.close()
    expect(woken.slice(5)).toEqual(['w5 aborted'])
    expect(vi.getTimerCount()).toBe(base)
  })

  it('the timer and the flush listener are there only while waiters exist, and close() stops everything', async () => {
    vi.useFakeTimers()
    const base = vi.getTimerCount()
    const flushes = new FakeFlushes()
    const waiters = new LiveWaiters({ store: flushes, now: () => Date.now() })
    // Nobody waits: the store need not find which logs a flush moved.
    expect(flushes.listeners.size).toBe(0)
    expect(vi.getTimerCount()).toBe(base)
    const p = waiters.wait('a', { timeoutMs: 10_000 })
    const p2 = waiters.wait('a', { timeoutMs: 10_000 })
    expect(vi.getTimerCount()).toBe(base + 1)
    expect(flushes.listeners.size).toBe(1)
    flushes.emit(['a'])
    expect(await p).toBe('advanced')
    expect(await p2).toBe('advanced')
    expect(vi.getTimerCount()).toBe(base)
    expect(flushes.listeners.size).toBe(0)
    const q = waiters.wait('b', { timeoutMs: 10_000 })
    const r = waiters.wait('c', { timeoutMs: 10_000 })
    waiters.close()
    expect(await q).toBe('aborted')
    expect(await r).toBe('aborted')
    expect(vi.getTimerCount()).toBe(base)
    expect(flushes.listeners.size).toBe(0)
    expect(await waiters.wait('d', { timeoutMs: 10_000 })).toBe('aborted')
    expect(waiters.size).toBe(0)
  })
})

describe('LiveWaiters: abort and invalidation', () => {
  it('abort resolves with aborted; an already aborted signal resolves at once; listeners go with the waiter', async () => {
    const waiters = new LiveWaiters({ store: new FakeFlushes(), resolutionMs: 10 })
    const ac = new AbortController()
    const p = waiters.wait('a', { timeoutMs: 10_000, signal: ac.signal })
    expect(getEventListeners(ac.signal, 'abort')).toHaveLength(1)
    ac.abort()
    expect(await p).toBe('aborted')
    expect(getEventListeners(ac.signal, 'abort')).toHaveLength(0)
    expect(waiters.size).toBe(0)
    expect(await waiters.wait('a', { timeoutMs: 10_000, signal: ac.signal })).toBe('aborted')
    expect(waiters.size).toBe(0)

    // Resolved another way: the listener is removed too.
    const other = new AbortController()
    const q = waiters.wait('b', { timeoutMs: 20, signal: other.signal })
    expect(await q).toBe('timeout')
    expect(getEventListeners(other.signal, 'abort')).toHaveLength(0)
    waiters.close()
  })

  it('invalidate wakes only that shape; a zero timeout resolves at once', async () => {
    const waiters = new LiveWaiters({ store: new FakeFlushes(), resolutionMs: 10 })
    const a = track(waiters.wait('a', { timeoutMs: 10_000 }))
    const b = track(waiters.wait('b', { timeoutMs: 10_000 }))
    waiters.invalidate('a')
    waiters.invalidate('never-waited')
    await Promise.resolve()
    expect(a.result).toBe('invalidated')
    expect(b.result).toBeUndefined()
    expect(await waiters.wait('c', { timeoutMs: 0 })).toBe('timeout')
    expect(waiters.size).toBe(1)
    waiters.close()
    await Promise.resolve()
    expect(b.result).toBe('aborted')
  })

  it('first resolution wins: a flush then an abort then a timeout leave one result and no residue', async () => {
    const flushes = new FakeFlushes()
    const waiters = new LiveWaiters({ store: flushes, resolutionMs: 10 })
    const ac = new AbortController()
    const p = waiters.wait('a', { timeoutMs: 15, signal: ac.signal })
    flushes.emit(['a'])
    ac.abort()
    waiters.invalidate('a')
    expect(await p).toBe('advanced')
    await new Promise((r) => setTimeout(r, 40))
    expect(waiters.size).toBe(0)
    waiters.close()
  })

  it('100k waits in a loop leave listener counts, internal maps and the heap at baseline', async () => {
    setFlagsFromString('--expose-gc')
    const gc = runInNewContext('gc') as () => void
    const flushes = new FakeFlushes()
    const waiters = new LiveWaiters({ store: flushes, resolutionMs: 50 })
    const shared = new AbortController()
    setMaxListeners(0, shared.signal) // a signal shared by many waits on purpose
    const internals = waiters as unknown as { byHandle: Map<string, unknown>; buckets: Map<number, unknown>; timer: unknown }

    const round = async (n: number): Promise<void> => {
      for (let done = 0; done < n; done += 1000) {
        const batch: Promise<WaitResult>[] = []
        for (let i = 0; i < 1000; i++) {
          const mode = i % 4
          const own = mode === 3 ? new AbortController() : undefined
          const p = waiters.wait(`h${(done + i) % 257}`, { timeoutMs: 5_000 + i, signal: own?.signal ?? shared.signal })
          if (own) own.abort()
          batch.push(p)
        }
        expect(getEventListeners(shared.signal, 'abort').length).toBeGreaterThan(0)
        // Wake half by flush, the rest by invalidation.
        const handles = Array.from({ length: 257 }, (_, k) => `h${k}`)
        flushes.emit(handles.filter((_, k) => k % 2 === 0))
        for (const h of handles) waiters.invalidate(h)
        const results = await Promise.all(batch)
        expect(results.every((r) => r === 'advanced' || r === 'invalidated' || r === 'aborted')).toBe(true)
      }
    }

    await round(10_000) // warm up
    gc()
    const heapBefore = process.memoryUsage().heapUsed
    await round(100_000)
    gc()
    const heapAfter = process.memoryUsage().heapUsed
    expect(waiters.size).toBe(0)
    expect(getEventListeners(shared.signal, 'abort')).toHaveLength(0)
    expect(internals.byHandle.size).toBe(0)
    expect(internals.buckets.size).toBe(0)
    expect(internals.timer).toBeUndefined()
    // 100k retained waiters would be well over 10 MB; allow noise.
    expect(heapAfter - heapBefore).toBeLessThan(4 * 1024 * 1024)
    waiters.close()
  })
})
