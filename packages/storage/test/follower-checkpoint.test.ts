/**
 * A read-only follower's poll while the writer checkpoints: it looks at the
 * logs the journal wrote, not at every log it holds, and serves every log
 * whole across the segments a checkpoint deletes.
 */
import { readdirSync } from 'node:fs'
import { join } from 'node:path'
import { createFaultyFs, useTempDir } from '@sluice/test-utils'
import { describe, expect, it } from 'vitest'
import { type FsPort, nodeFs, openFileLogStore, openReadOnlyLogStore } from '../src/index.js'
import { change } from './contract-suite.js'

const tempDirs = useTempDir()

describe("a read-only follower across the writer's checkpoints", () => {
  it('a poll after a checkpoint looks at the logs written, not at every log held, and serves every log whole', async () => {
    const dir = await tempDirs.make('ro-checkpoint')
    // Segments of 1 KiB: a few flushes close one, and its checkpoint deletes it.
    const w = await openFileLogStore({ dir, flushIntervalMs: 60_000, flushWhenIdle: false, journalSegmentBytes: 1024 })
    const LOGS = 200
    for (let i = 0; i < LOGS; i++) await w.createShape(`s${i}`).finish(Buffer.from('{"headers":{"control":"snapshot-end"}}'))
    let tx = 5n
    const write = async (id: string): Promise<void> => {
      w.get(id)!.appendTransaction([change(tx, 0, Number(tx))])
      w.advance(tx)
      await w.flush()
      tx += 1n
    }
    await write('s0')
    const faulty = createFaultyFs<FsPort>(nodeFs)
    const reader = openReadOnlyLogStore({ dir, pollIntervalMs: 0, fs: faulty.fs })
    for (let i = 0; i < LOGS; i++) reader.get(`s${i}`)!.head()
    const seen: Array<readonly string[]> = []
    const off = reader.onFlush((r) => seen.push(r.advanced))
    reader.poll()
    const segments = (): string[] => readdirSync(join(dir, 'journal')).filter((n) => n.endsWith('.jnl'))
    const before = new Set(segments())
    // Flushes to s1, polled one by one, until a segment the follower has read is checkpointed away.
    let checkpointed = false
    let written = 0
    for (let i = 0; i < 200 && !checkpointed; i++) {
      await write('s1')
      written++
      const held = segments().length
      faulty.rules.resetCalls()
      reader.poll()
      expect(seen.at(-1)).toEqual(['s1'])
      const calls = faulty.rules.callCounts()
      // Looking at all 200 logs made a stat and three fstats each. What a poll does
      // stat is the journal: a stat and an fstat per segment held, and how many
      // segments are held depends on when the writer's checkpoint gets to run.
      const stats = (calls['fstatSync'] ?? 0) + (calls['statSync'] ?? 0)
      expect(stats).toBeLessThanOrEqual(2 * (held + 1) + 8)
      expect(stats).toBeLessThan(LOGS)
      checkpointed = [...before].some((n) => !segments().includes(n))
    }
    expect(checkpointed).toBe(true)
    // And after it, a write to a log the follower last saw long ago is reported and served in full.
    await write('s150')
    reader.poll()
    expect(seen.at(-1)).toEqual(['s150'])
    expect(reader.get('s1')!.head().entryCount).toBe(1 + written)
    expect(reader.get('s150')!.head().entryCount).toBe(2)
    off()
    await reader.close()
    await w.close()
  })
})
