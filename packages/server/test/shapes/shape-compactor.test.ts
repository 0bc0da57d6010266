import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { type ShapeLog, type ShapeLogStore, openFileLogStore } from '@sluice/storage'
import { afterEach, describe, expect, it } from 'vitest'
import type { LiveShape } from '../../src/shapes/live-shape.js'
import type { ShapeTarget } from '../../src/shapes/route-contracts.js'
import { ShapeCompactor } from '../../src/shapes/compaction/shape-compactor.js'
import { changeJson, commit, makeShape, rowJson } from '../http/live/helpers.js'

/**
 * The compactor's scheduler on a real file store: after a start it checks
 * every ready shape once (a slice per turn), then only the shapes whose logs
 * a flush reported grown, so a server of 100,000 mostly quiet shapes does
 * not walk them all every interval.
 */

const cleanups: Array<() => Promise<unknown>> = []
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c()
})

async function store(): Promise<ShapeLogStore> {
  const dir = await mkdtemp(join(tmpdir(), 'sluice-compactor-'))
  cleanups.push(() => rm(dir, { recursive: true, force: true }))
  const s = await openFileLogStore({ dir, chunkBytes: 4096, flushIntervalMs: 5 })
  cleanups.push(() => s.close())
  return s
}

/** The shape manager and router as far as the compactor sees them: each shape's target is its log until a tee replaces it. */
function world(logs: readonly ShapeLog[]) {
  const shapes = new Map<string, LiveShape>()
  const targets = new Map<string, ShapeTarget>()
  for (const log of logs) {
    shapes.set(log.id, { handle: log.id, log, ready: undefined, cancelled: undefined } as unknown as LiveShape)
    targets.set(log.id, log as unknown as ShapeTarget)
  }
  return {
    shapes: {
      readyShapes: () => shapes.values(),
      readyShape: (handle: string) => shapes.get(handle),
      holds: (shape: LiveShape, log: ShapeLog) => shapes.get(shape.handle) === shape && shape.log === log,
    },
    router: {
      retargetBetween: async (handle: string, make: (current: ShapeTarget) => ShapeTarget | undefined) => {
        const next = make(targets.get(handle)!)
        if (next === undefined) return false
        targets.set(handle, next)
        return true
      },
      advanceHeld: false,
    },
    shape: (handle: string) => shapes.get(handle)!,
  }
}

/** A started compactor over `logs`, stopped after the test. */
function started(s: ShapeLogStore, logs: readonly ShapeLog[], options: { ratio: number; minEntries: number; intervalMs: number; retireAfterMs: number }) {
  const w = world(logs)
  const compactor = new ShapeCompactor({ store: s, router: w.router, shapes: w.shapes, ...options })
  compactor.start()
  cleanups.push(() => compactor.stop())
  return { w, compactor }
}

describe('ShapeCompactor scheduling', () => {
  it('checks every shape after a start, then only those whose logs grew, and compacts one grown past the ratio', async () => {
    const s = await store()
    // Made together, so that they share the store's flushes.
    const logs = await Promise.all(Array.from({ length: 1_200 }, (_, i) => makeShape(s, `s${i}`, [rowJson(i)])))
    const { w, compactor } = started(s, logs, { ratio: 2, minEntries: 20, intervalMs: 60_000, retireAfterMs: 10 })

    // The first check looks at all 1,200 (in two slices): none is due.
    expect(await compactor.runDue()).toBe(0)
    expect(compactor.stats.checked).toBe(1_200)

    // Nothing written since: nothing to look at.
    expect(await compactor.runDue()).toBe(0)
    expect(compactor.stats.checked).toBe(1_200)

    // Two logs grow a little: only they are checked, and neither is due yet.
    await commit(s, logs[7]!, 1000n, [changeJson(1000n, 0, 7, { v: 'a' })])
    await commit(s, logs[1_100]!, 1001n, [changeJson(1001n, 0, 1_100, { v: 'a' })])
    expect(await compactor.runDue()).toBe(0)
    expect(compactor.stats.checked).toBe(1_202)

    // One grows past twice its snapshot's entries and 20 more: the check compacts it, and only it.
    for (let k = 0; k < 30; k++) await commit(s, logs[7]!, BigInt(2000 + k), [changeJson(BigInt(2000 + k), 0, 7, { v: `b${k}` })])
    expect(await compactor.runDue()).toBe(1)
    expect(compactor.stats.checked).toBe(1_203)
    expect(compactor.stats.compactions).toBe(1)
    expect(w.shape('s7').log!.id).toBe('s7_c1')

    // The old log's growth is not the shape's any more; the new log's is.
    await commit(s, w.shape('s7').log!, 5000n, [changeJson(5000n, 0, 7, { v: 'c' })])
    expect(await compactor.runDue()).toBe(0)
    expect(compactor.stats.checked).toBe(1_204)
  })

  it('keeps looking at a due log whose last compaction is still retiring, written to or not', async () => {
    const s = await store()
    const log = await makeShape(s, 'hot', [rowJson(1)])
    const { w, compactor } = started(s, [log], { ratio: 2, minEntries: 20, intervalMs: 60_000, retireAfterMs: 60_000 })
    const grow = async (from: number): Promise<void> => {
      for (let k = 0; k < 30; k++) await commit(s, w.shape('hot').log!, BigInt(from + k), [changeJson(BigInt(from + k), 0, 1, { v: `v${from + k}` })])
    }
    await grow(1000)
    expect(await compactor.runDue()).toBe(1)
    expect(w.shape('hot').log!.id).toBe('hot_c1')

    // Due again at once, but the old log has a minute to go: not compacted, and not forgotten.
    await grow(2000)
    expect(await compactor.runDue()).toBe(0)
    const checked = compactor.stats.checked
    expect(await compactor.runDue()).toBe(0)
    expect(compactor.stats.checked).toBe(checked + 1)
    expect(compactor.stats.compactions).toBe(1)
  })

  it('does not compact while routed transactions are held back from the store (a move-in runs), and does once they are not', async () => {
    const s = await store()
    const log = await makeShape(s, 'held', [rowJson(1)])
    const { w, compactor } = started(s, [log], { ratio: 2, minEntries: 5, intervalMs: 60_000, retireAfterMs: 10 })
    for (let k = 0; k < 20; k++) await commit(s, log, BigInt(100 + k), [changeJson(BigInt(100 + k), 0, 1, { v: `v${k}` })])
    // Held: a transaction routed to the log before the tee may not be published by the compaction's flush.
    w.router.advanceHeld = true
    // (Compared as a flag: a failure's diff of a compacted log, buffers and all, runs the worker out of memory.)
    expect((await compactor.compact(w.shape('held'))) === undefined).toBe(true)
    expect(w.shape('held').log!.id).toBe(log.id)
    expect(compactor.stats.compactions).toBe(0)
    w.router.advanceHeld = false
    expect((await compactor.compact(w.shape('held'))) !== undefined).toBe(true)
    expect(w.shape('held').log!.id).toBe('held_c1')
  })

  it('stops a compaction whose shape goes meanwhile before its new log is finished (a finished one could outlive the shape after a crash)', async () => {
    const s = await store()
    const log = await makeShape(s, 'going', [rowJson(1)])
    const { w, compactor } = started(s, [log], { ratio: 2, minEntries: 5, intervalMs: 60_000, retireAfterMs: 10 })
    for (let k = 0; k < 20; k++) await commit(s, log, BigInt(100 + k), [changeJson(BigInt(100 + k), 0, 1, { v: `v${k}` })])
    const finished: string[] = []
    const off = s.onFlush((r) => void finished.push(...r.advanced))
    // The shape is there when the compaction starts, and gone (invalidated, say) once the merge is under way.
    let looks = 0
    const holds = w.shapes.holds
    w.shapes.holds = (shape, of) => looks++ < 1 && holds(shape, of)
    expect((await compactor.compact(w.shape('going'))) === undefined).toBe(true)
    await s.flush()
    off()
    expect(finished).not.toContain('going_c1')
    expect(s.get('going_c1')).toBeUndefined()
  })

  it('with compaction off (ratio 0) neither listens to flushes nor checks', async () => {
    const s = await store()
    const log = await makeShape(s, 'only', [rowJson(1)])
    const { compactor } = started(s, [log], { ratio: 0, minEntries: 1, intervalMs: 5, retireAfterMs: 10 })
    for (let k = 0; k < 5; k++) await commit(s, log, BigInt(100 + k), [changeJson(BigInt(100 + k), 0, 1, { v: `x${k}` })])
    await new Promise((resolve) => setTimeout(resolve, 30))
    expect(compactor.stats.checked).toBe(0)
    expect(compactor.stats.compactions).toBe(0)
  })
})
