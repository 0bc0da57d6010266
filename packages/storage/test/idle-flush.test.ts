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
import type { FileLogStore, FlushResult, FsPort } from '../src/index.js'
import { decodeWatermark } from '../src/format.js'
import { change, makeShape } from './contract-suite.js'

const tempDirs = useTempDir()
const MINUTE = 60_000

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

describe('between the fdatasync and the listeners', () => {
  let store: FileLogStore | undefined
  afterEach(async () => {
    await store?.close().catch(() => undefined)
    store = undefined
  })

  it('an idle flush does one fdatasync and no other file write before it tells its listeners; the followers\' notice comes after', { timeout: 10_000 }, async () => {
    // Every write and sync the store makes, in order, by file name: the listeners (the live requests a
    // flush wakes, in a server) must come right after the journal's fdatasync.
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
    const told = events.indexOf('listener')
    const before = events.slice(0, told)
    expect(before.filter((e) => e.startsWith('fdatasync'))).toHaveLength(1)
    const sync = before.findIndex((e) => e.startsWith('fdatasync'))
    expect(before[sync]).toMatch(/^fdatasync /)
    expect(before.slice(sync + 1)).toEqual([])
    // The followers' notice still moves, a turn later.
    expect(liveAtListener).not.toBe(10n)
    await turns(2)
    const w = decodeWatermark(readFileSync(`${dir}/watermark.live`))
    expect(typeof w === 'string' ? undefined : w.lsn).toBe(10n)
  })
})
