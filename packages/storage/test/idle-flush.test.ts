/**
 * Group commit at a quiet moment: a change that arrives when the store has not
 * advanced for an interval is flushed at once (one fdatasync of latency, not
 * the interval too), and one that finds a flush running is flushed as that
 * one ends, while changes that arrive close behind another still wait for the
 * interval and share one flush.
 *
 * The interval here is a minute, so "at once" and "after the interval" cannot
 * be confused by a slow machine: the test's own timeout is far shorter.
 */
import { readFileSync } from 'node:fs'
import { basename } from 'node:path'
import { useTempDir } from '@sluice/test-utils'
import { afterEach, describe, expect, it } from 'vitest'
import { nodeFs, openFileLogStore } from '../src/index.js'
import type { FileLogStore, FlushResult, FsPort, ShapeLog } from '../src/index.js'
import { decodeWatermark } from '../src/format.js'
import { change, makeShape } from './contract-suite.js'

const tempDirs = useTempDir()
const MINUTE = 60_000
/** An interval to wait out between two idle changes (waiting longer only makes the store idler). */
const SHORT = 30

function nextFlush(s: FileLogStore): Promise<FlushResult> {
  return new Promise((resolve) => {
    const off = s.onFlush((r) => {
      off()
      resolve(r)
    })
  })
}

/** A few turns of the event loop: long enough for an immediate flush to start, far shorter than the interval. */
async function turns(n: number): Promise<void> {
  for (let i = 0; i < n; i++) await new Promise((r) => setImmediate(r))
}

describe('flushing an idle store at once', () => {
  let store: FileLogStore | undefined
  afterEach(async () => {
    await store?.close().catch(() => undefined)
    store = undefined
  })

  it('a lone change is made durable and published without waiting for the interval', { timeout: 10_000 }, async () => {
    const s = (store = await openFileLogStore({ dir: await tempDirs.make('idle'), flushIntervalMs: MINUTE }))
    const log = await makeShape(s, 'a', [])
    const flushed = nextFlush(s)
    log.appendTransaction([change(10n, 0, 1)])
    s.advance(10n)
    const result = await flushed
    expect(result.durableLsn).toBe(10n)
    expect(s.durableLsn).toBe(10n)
    expect(result.advanced).toEqual(['a'])
  })

  it('changes of one turn share the flush; a change that follows within the interval waits for it', { timeout: 10_000 }, async () => {
    const s = (store = await openFileLogStore({ dir: await tempDirs.make('busy'), flushIntervalMs: MINUTE }))
    const log = await makeShape(s, 'a', [])
    const flushes: FlushResult[] = []
    s.onFlush((r) => flushes.push(r))
    for (let i = 1; i <= 5; i++) {
      log.appendTransaction([change(BigInt(i * 10), 0, i)])
      s.advance(BigInt(i * 10))
    }
    while (flushes.length === 0) await turns(1)
    expect(flushes.map((f) => f.durableLsn)).toEqual([50n])
    // Close behind: the store is busy, so this one waits for the interval (or an explicit flush).
    log.appendTransaction([change(60n, 0, 6)])
    s.advance(60n)
    await turns(50)
    expect(flushes).toHaveLength(1)
    expect(s.durableLsn).toBe(50n)
    expect((await s.flush()).durableLsn).toBe(60n)
  })

  it('flushWhenIdle: false leaves a lone change to the interval', { timeout: 10_000 }, async () => {
    const s = (store = await openFileLogStore({ dir: await tempDirs.make('off'), flushIntervalMs: MINUTE, flushWhenIdle: false }))
    const log = await makeShape(s, 'a', [])
    log.appendTransaction([change(10n, 0, 1)])
    s.advance(10n)
    await turns(50)
    expect(s.durableLsn).toBe(0n)
    expect((await s.flush()).durableLsn).toBe(10n)
  })
})

describe('an idle change that finds a flush running', () => {
  let store: FileLogStore | undefined
  afterEach(async () => {
    await store?.close().catch(() => undefined)
    store = undefined
  })

  it('is flushed as soon as the running flush ends, not after the interval', { timeout: 10_000 }, async () => {
    const s = (store = await openFileLogStore({ dir: await tempDirs.make('follows'), flushIntervalMs: MINUTE }))
    const log = await makeShape(s, 'a', [])
    // A flush is running (an explicit one here; a snapshot's or a slow fdatasync in a server) when the
    // first change in a minute arrives: nothing would share the interval with it.
    const running = s.flush()
    log.appendTransaction([change(10n, 0, 1)])
    s.advance(10n)
    expect((await running).durableLsn).toBe(0n)
    const next = nextFlush(s)
    expect((await next).durableLsn).toBe(10n)
    expect(s.durableLsn).toBe(10n)
  })
})

describe('an idle flush on the real file system', () => {
  let store: FileLogStore | undefined
  afterEach(async () => {
    await store?.close().catch(() => undefined)
    store = undefined
  })

  /**
   * For one idle change: whether the flush was told before an immediate queued
   * after the flush's own ran. A change made durable first opens the journal's
   * segment (whose first sync also syncs the directory, through the pool);
   * the store is idle again once the interval has passed without an advance.
   */
  async function toldWithinItsTurn(s: FileLogStore): Promise<boolean> {
    const log = await makeShape(s, 'a', [])
    log.appendTransaction([change(5n, 0, 1)])
    s.advance(5n)
    await s.flush()
    return idleChangeToldWithinItsTurn(s, log, 10n)
  }

  /** For one idle change to `log`, after the store has been idle for a while: whether the flush was told before an immediate queued after the flush's own ran. */
  async function idleChangeToldWithinItsTurn(s: FileLogStore, log: ShapeLog, lsn: bigint): Promise<boolean> {
    await new Promise((r) => setTimeout(r, 3 * SHORT))
    const order: string[] = []
    const off = s.onFlush((r) => {
      if (r.durableLsn === lsn) order.push('flushed')
    })
    log.appendTransaction([change(lsn, 0, 2)])
    s.advance(lsn)
    // Queued after the flush's own immediate: through the thread pool, the fdatasync would still be running then.
    setImmediate(() => order.push('next immediate'))
    while (order.length < 2) await turns(1)
    off()
    return order[0] === 'flushed'
  }

  it('syncs on the event loop\'s thread while the disk is fast: the flush is told in the turn that starts it, with no thread-pool hop', { timeout: 10_000 }, async () => {
    // Any disk counts as fast here, so the outcome does not depend on this machine's.
    const s = (store = await openFileLogStore({ dir: await tempDirs.make('inline'), flushIntervalMs: SHORT, idleSyncInlineMaxMs: Number.POSITIVE_INFINITY }))
    expect(await toldWithinItsTurn(s)).toBe(true)
  })

  it('an inline sync slower than idleSyncInlineMaxMs sends the next idle ones to the thread pool, until one is tried inline again a second later; 0 never syncs inline', { timeout: 10_000 }, async () => {
    // Every real sync takes longer than a picosecond: the first idle sync runs inline and is slow.
    const slow = (store = await openFileLogStore({ dir: await tempDirs.make('slow'), flushIntervalMs: SHORT, idleSyncInlineMaxMs: 1e-9 }))
    const log = await makeShape(slow, 'a', [])
    // The journal's first commit opens its segment, and syncs the directory too: through the pool.
    log.appendTransaction([change(5n, 0, 1)])
    slow.advance(5n)
    await slow.flush()
    expect(await idleChangeToldWithinItsTurn(slow, log, 10n)).toBe(true)
    expect(await idleChangeToldWithinItsTurn(slow, log, 11n)).toBe(false)
    await new Promise((r) => setTimeout(r, 1100))
    expect(await idleChangeToldWithinItsTurn(slow, log, 12n)).toBe(true)
    // Slow again: the next try waits twice as long.
    await new Promise((r) => setTimeout(r, 1100))
    expect(await idleChangeToldWithinItsTurn(slow, log, 13n)).toBe(false)
    await slow.close()
    const never = (store = await openFileLogStore({ dir: await tempDirs.make('never'), flushIntervalMs: SHORT, idleSyncInlineMaxMs: 0 }))
    expect(await toldWithinItsTurn(never)).toBe(false)
  })

  it('a slow sync through the thread pool (the hop, a busy loop) does not keep idle syncs off the loop: only inline syncs are timed', { timeout: 10_000 }, async () => {
    // The port's own fdatasync (the thread pool's) takes 250 ms; the disk's, inline, a fraction of the 100 ms
    // allowed even when other tests keep the disk busy (at 20 ms allowed, a loaded run's inline syncs were slower).
    const port: FsPort = { ...nodeFs, fdatasync: async (fd) => {
      await new Promise((r) => setTimeout(r, 250))
      return nodeFs.fdatasync(fd)
    } }
    const s = (store = await openFileLogStore({ dir: await tempDirs.make('pool-slow'), fs: port, flushIntervalMs: SHORT, idleSyncInlineMaxMs: 100 }))
    const log = await makeShape(s, 'a', [])
    for (let tx = 20n; tx < 23n; tx++) {
      // A caller's flush goes through the pool: 250 ms.
      log.appendTransaction([change(tx * 2n, 0, 1)])
      s.advance(tx * 2n)
      await s.flush()
      expect(await idleChangeToldWithinItsTurn(s, log, tx * 2n + 1n)).toBe(true)
    }
  })
})

describe('between the fdatasync and the listeners', () => {
  let store: FileLogStore | undefined
  afterEach(async () => {
    await store?.close().catch(() => undefined)
    store = undefined
  })

  it('an idle flush does one fdatasync, the journal\'s, before it tells its listeners; the followers\' notice is written before and synced after', { timeout: 10_000 }, async () => {
    // Every write and sync the store makes, in order, by file name: the listeners (the live requests a
    // flush wakes, in a server) must not wait for a second sync to be handed to the thread pool.
    const events: string[] = []
    const names = new Map<number, string>()
    const fs: FsPort = {
      ...nodeFs,
      openSync(path, flags, mode) {
        const fd = nodeFs.openSync(path, flags, mode)
        names.set(fd, basename(path))
        return fd
      },
      writeSync(fd, buffer, offset, length, position) {
        events.push(`write ${names.get(fd) ?? fd}`)
        return nodeFs.writeSync(fd, buffer, offset, length, position)
      },
      fdatasync(fd) {
        events.push(`fdatasync ${names.get(fd) ?? fd}`)
        return nodeFs.fdatasync(fd)
      },
    }
    const dir = await tempDirs.make('order')
    const s = (store = await openFileLogStore({ dir, flushIntervalMs: MINUTE, fs }))
    const log = await makeShape(s, 'a', [])
    // Settled: the shape's own flushes and their notices are done.
    await s.flush()
    await turns(5)
    events.length = 0
    let liveAtListener: bigint | undefined
    const flushed = new Promise<void>((resolve) => {
      const off = s.onFlush((r) => {
        if (r.durableLsn !== 10n) return
        off()
        events.push('listener')
        const w = decodeWatermark(readFileSync(`${dir}/watermark.live`))
        liveAtListener = typeof w === 'string' ? undefined : w.lsn
        resolve()
      })
    })
    log.appendTransaction([change(10n, 0, 1)])
    s.advance(10n)
    await flushed
    const before = events.slice(0, events.indexOf('listener'))
    expect(before.filter((e) => e.startsWith('fdatasync'))).toEqual(['fdatasync 00000001.jnl'])
    // A follower never learns of a watermark later than the listeners do.
    expect(liveAtListener).toBe(10n)
    await turns(2)
    expect(events.slice(events.indexOf('listener'))).toContain('fdatasync watermark.live')
  })
})
