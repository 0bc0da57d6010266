/**
 * The journal under faults the other journal tests do not reach: a full disk
 * just as a new segment starts (its header write fails). A "power cut"
 * abandons the writer without closing it and opens the directory again with
 * plain node:fs, which sees only what was synced.
 */
import { readdirSync, readlinkSync } from 'node:fs'
import { createFaultyFs, useTempDir } from '@sluice/test-utils'
import { describe, expect, it } from 'vitest'
import { FlushError, nodeFs, openFileLogStore } from '../src/index.js'
import type { FileLogStore, FsPort, ShapeLog } from '../src/index.js'
import { change, makeShape, readAllEntries } from './contract-suite.js'
import { powerCut } from './fixtures/files.js'

const tempDirs = useTempDir()

function lsnsOf(log: ShapeLog): string[] {
  return (readAllEntries(log) as Array<{ headers?: { lsn?: string } }>).flatMap((m) => (m.headers?.lsn === undefined ? [] : [m.headers.lsn]))
}

/** The path behind a descriptor argument ('' for anything else). */
function pathOf(fd: unknown): string {
  try {
    return readlinkSync(`/proc/self/fd/${String(fd)}`)
  } catch {
    return ''
  }
}

async function round(s: FileLogStore, ids: string[], tx: bigint): Promise<void> {
  ids.forEach((id, i) => s.get(id)!.appendTransaction([change(tx, 0, i), change(tx, 1, i + 1)]))
  s.advance(tx)
  await s.flush()
}

describe('a full disk as a journal segment starts', () => {
  it('fails that flush only: the groups acknowledged after it survive a power cut', async () => {
    const dir = await tempDirs.make('journal-header-enospc')
    const faulty = createFaultyFs<FsPort>(nodeFs)
    const s = await openFileLogStore({ dir, fs: faulty.fs, flushIntervalMs: 60_000, flushWhenIdle: false })
    const ids = ['a', 'b']
    for (const id of ids) await makeShape(s, id, [])
    await round(s, ids, 11n)
    // The next commit starts a new segment; its 16-byte header is the write at offset 0 that fails.
    expect(s.journal!.seal()).toBe(true)
    const header = faulty.rules.failNext('writeSync', { code: 'ENOSPC', match: (args) => pathOf(args[0]).endsWith('.jnl') && args[4] === 0 })
    ids.forEach((id, i) => s.get(id)!.appendTransaction([change(21n, 0, i), change(21n, 1, i + 1)]))
    s.advance(21n)
    const err = (await s.flush().catch((e: unknown) => e)) as FlushError
    expect(header.hits).toBe(1)
    expect(err).toBeInstanceOf(FlushError)
    expect(err.durableLsn).toBe(11n)
    // Space again: the caller replays from the watermark, and these flushes are acknowledged.
    await round(s, ids, 21n)
    await round(s, ids, 31n)
    expect(s.durableLsn).toBe(31n)
    // A checkpoint of a closed segment runs in this process (a real crash would stop it): let it end first.
    while (s.journal!.running !== undefined) await s.journal!.running
    powerCut(dir)
    const again = await openFileLogStore({ dir, flushIntervalMs: 60_000, flushWhenIdle: false })
    try {
      expect(again.durableLsn).toBe(31n)
      for (const id of ids) expect(lsnsOf(again.get(id)!)).toEqual(['11', '11', '21', '21', '31', '31'])
      // Every segment left has its header: none took a group where its header should be.
      for (const name of readdirSync(`${dir}/journal`).filter((n) => n.endsWith('.jnl'))) expect(name).toMatch(/^\d+\.jnl$/)
    } finally {
      await again.close()
    }
  })
})
