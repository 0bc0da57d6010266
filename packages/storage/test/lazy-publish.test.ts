/**
 * Lazy publishing: a timed flush that no listener asks `advanced` of leaves
 * its logs alone, and each log publishes what such flushes made durable when
 * it is next read or appended to. What readers see, what a later flush
 * reports, and what a failure keeps must be exactly as if every flush had
 * visited every log.
 */
import { createFaultyFs, useTempDir } from '@sluice/test-utils'
import { formatOffset, parseOffset } from '@sluice/protocol'
import { afterEach, describe, expect, it } from 'vitest'
import { FlushError, nodeFs, openFileLogStore } from '../src/index.js'
import type { FileLogStore, FlushResult, FsPort } from '../src/index.js'
import { body, change, makeShape } from './contract-suite.js'

const tempDirs = useTempDir()

describe('lazy publishing', () => {
  let store: FileLogStore | undefined
  afterEach(async () => {
    await store?.close().catch(() => undefined)
    store = undefined
  })

  async function open(dir?: string) {
    const at = dir ?? (await tempDirs.make('lazy'))
    const faulty = createFaultyFs<FsPort>(nodeFs)
    const s = await openFileLogStore({ dir: at, fs: faulty.fs, flushIntervalMs: 5 })
    store = s
    return { dir: at, rules: faulty.rules, s }
  }

  /** Waits for a timed flush to make `lsn` durable. */
  async function durable(s: FileLogStore, lsn: bigint): Promise<void> {
    for (let i = 0; i < 500 && s.durableLsn < lsn; i++) await new Promise((r) => setTimeout(r, 5))
    expect(s.durableLsn).toBe(lsn)
  }

  it('timed flushes nobody asks about name no log, yet readers see what they made durable', async () => {
    const { s } = await open()
    const a = await makeShape(s, 'a', [])
    const b = await makeShape(s, 'b', [])
    const heard: FlushResult[] = []
    s.onFlush((r) => heard.push(r), { advanced: false })
    a.appendTransaction([change(10n, 0, 1)])
    b.appendTransaction([change(10n, 0, 2)])
    s.advance(10n)
    await durable(s, 10n)
    expect(heard.length).toBeGreaterThan(0)
    expect(heard.flatMap((r) => r.advanced)).toEqual([])
    expect(formatOffset(a.head().lastOffset)).toBe('10_0')
    expect(body(b.read(parseOffset('0_0')))).toHaveLength(1)
  })

  it('a later flush that is asked names exactly the logs it moved, not those moved by the flushes before it', async () => {
    const { s } = await open()
    const a = await makeShape(s, 'a', [])
    const b = await makeShape(s, 'b', [])
    const c = await makeShape(s, 'c', [])
    // a: made durable by a timed flush and never read since; b: read since; c: appended after.
    a.appendTransaction([change(10n, 0, 1)])
    b.appendTransaction([change(10n, 0, 2)])
    s.advance(10n)
    await durable(s, 10n)
    expect(formatOffset(b.head().lastOffset)).toBe('10_0')
    c.appendTransaction([change(20n, 0, 3)])
    s.advance(20n)
    expect((await s.flush()).advanced).toEqual(['c'])
    expect(formatOffset(a.head().lastOffset)).toBe('10_0')
    // A transaction end waiting behind lazily published ones.
    a.appendTransaction([change(30n, 0, 4)])
    a.appendTransaction([change(40n, 0, 5)])
    s.advance(40n)
    expect((await s.flush()).advanced).toEqual(['a'])
    expect(body(a.read(parseOffset('0_0')))).toHaveLength(3)
  })

  it('a listener that asks gets every flush named from its first on; once it goes, flushes are lazy again', async () => {
    const { s } = await open()
    const a = await makeShape(s, 'a', [])
    a.appendTransaction([change(10n, 0, 1)])
    s.advance(10n)
    await durable(s, 10n)
    const heard: string[][] = []
    const off = s.onFlush((r) => heard.push([...r.advanced]))
    a.appendTransaction([change(20n, 0, 2)])
    s.advance(20n)
    await durable(s, 20n)
    expect(heard.flat()).toEqual(['a'])
    off()
    off() // twice: no effect
    const later: string[][] = []
    s.onFlush((r) => later.push([...r.advanced]), { advanced: false })
    a.appendTransaction([change(30n, 0, 3)])
    s.advance(30n)
    await durable(s, 30n)
    expect(later.flat()).toEqual([])
    expect(formatOffset(a.head().lastOffset)).toBe('30_0')
  })

  it('a failed commit after a lazy flush keeps what that flush made durable and drops only what no flush covered', async () => {
    const { rules, s } = await open()
    const a = await makeShape(s, 'a', [])
    a.appendTransaction([change(10n, 0, 1)])
    s.advance(10n)
    await durable(s, 10n)
    // Not read since, and the part of an open transaction does not publish either: the log still
    // holds transaction 10 as unpublished when the commit of the group with this part fails.
    a.appendTransaction([change(20n, 0, 2)], { more: true })
    const rule = rules.failNext('fdatasync', { code: 'EIO', times: 1 })
    let error: unknown
    await s.flush().catch((err: unknown) => (error = err))
    expect(rule.hits).toBe(1)
    expect(error).toBeInstanceOf(FlushError)
    expect(s.durableLsn).toBe(10n)
    expect(formatOffset(s.get('a')!.appendedHead().last)).toBe('10_0')
    expect(formatOffset(a.head().lastOffset)).toBe('10_0')
    expect(body(a.read(parseOffset('0_0')))).toHaveLength(1)
    // The replay goes in after the durable one.
    a.appendTransaction([change(20n, 0, 2)])
    s.advance(20n)
    expect((await s.flush()).advanced).toEqual(['a'])
    expect(body(a.read(parseOffset('0_0')))).toHaveLength(2)
  })

  it('a store closed after lazy flushes opens with every durable transaction published', async () => {
    const { dir, s } = await open()
    const logs = await Promise.all(['a', 'b', 'c'].map((id) => makeShape(s, id, [])))
    for (let t = 1; t <= 20; t++) logs[t % 3]!.appendTransaction([change(BigInt(t * 10), 0, t)])
    s.advance(200n)
    await durable(s, 200n)
    await s.close()
    store = undefined
    const { s: again } = await open(dir)
    const counts = ['a', 'b', 'c'].map((id) => body(again.get(id)!.read(parseOffset('0_0'))).length)
    expect(counts).toEqual([6, 7, 7])
    expect(formatOffset(again.get('b')!.head().lastOffset)).toBe('190_0')
  })
})
