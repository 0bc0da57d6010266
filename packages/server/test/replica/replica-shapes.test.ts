import { readFileSync, rmSync, writeFileSync } from 'node:fs'
import { bucketOf, nodeFs, openFileLogStore, openReadOnlyLogStore, shapeDir } from '@sluice/storage'
import { useTempDir } from '@sluice/test-utils'
import { describe, expect, it } from 'vitest'
import { ReplicaShapes } from '../../src/replica/replica-shapes.js'
import { type ShapeDefinition, encodeShapeMeta } from '../../src/shapes/definition/index.js'

/**
 * The replica's registry over a store where the writer's logs were damaged
 * while it was down: a log with its meta.bin cut short or gone is skipped and
 * reported, not thrown out of a scan (a scan runs from the store watch, where
 * a throw would end the process), and every other shape is still found.
 */

const dirs = useTempDir('replica-shapes')

const definition = (table: string): ShapeDefinition => ({ schema: 'public', table, where: undefined, params: {}, columns: undefined, replica: 'default', log: 'full' })
const SNAPSHOT_END = new TextEncoder().encode('{"headers":{"control":"snapshot-end","xmin":"1","xmax":"2","xip_list":[]}}')
const HANDLES = { intact: '11-1000', cut: '12-1000', gone: '13-1000' } as const

describe('the replica registry over damaged logs', () => {
  it('skips and reports a log whose meta.bin is cut short or missing, and indexes the others', async () => {
    const dir = await dirs.make('store')
    const writer = await openFileLogStore({ dir, flushWhenIdle: false })
    for (const [table, handle] of Object.entries(HANDLES)) {
      const snapshot = writer.createShape(handle, { meta: encodeShapeMeta(definition(table), handle) })
      await snapshot.finish(SNAPSHOT_END)
    }
    await writer.close()
    const meta = `${shapeDir(dir, HANDLES.cut)}/meta.bin`
    writeFileSync(meta, readFileSync(meta).subarray(0, 30))
    rmSync(`${shapeDir(dir, HANDLES.gone)}/meta.bin`)

    const store = openReadOnlyLogStore({ dir, pollIntervalMs: 0 })
    const bad: Array<[string, unknown]> = []
    const shapes = new ReplicaShapes({ store, dir, fs: nodeFs, onGone: () => {}, onBadMeta: (handle, error) => bad.push([handle, error]) })
    try {
      expect(() => shapes.rescan(true)).not.toThrow()
      expect(shapes.size).toBe(1)
      expect(shapes.lookup(definition('intact'))).toBe(HANDLES.intact)
      expect(shapes.status(HANDLES.cut)).toBe('unknown')
      expect(shapes.status(HANDLES.gone)).toBe('unknown')
      expect(bad.map(([handle]) => handle)).toEqual([HANDLES.cut])
      expect(bad[0]![1]).toMatchObject({ name: 'StorageError', code: 'corrupt_log' })
    } finally {
      await store.close()
    }
  })
})

describe('the replica registry on a filesystem with coarse timestamps', () => {
  it('scans again, once, a stamp too recent to trust: a shape renamed into a bucket in the same clock tick is found', async () => {
    const dir = await dirs.make('coarse')
    const writer = await openFileLogStore({ dir, flushWhenIdle: false })
    const make = async (handle: string, table: string): Promise<void> => {
      await writer.createShape(handle, { meta: encodeShapeMeta(definition(table), handle) }).finish(SNAPSHOT_END)
    }
    // Two handles in one bucket: the second rename changes only that bucket's times.
    const first = '21-1000'
    let second = ''
    for (let n = 22; second === ''; n++) if (bucketOf(`${n}-1000`) === bucketOf(first)) second = `${n}-1000`
    await make(first, 'first')
    // Directory times frozen at one instant, as a filesystem whose clock has not ticked between two renames.
    const frozen = Date.now()
    const fs = {
      ...nodeFs,
      statSync: ((path: string) => {
        const st = nodeFs.statSync(path)
        return { ino: st.ino, mtimeMs: frozen, ctimeMs: frozen }
      }) as unknown as typeof nodeFs.statSync,
    }
    const store = openReadOnlyLogStore({ dir, pollIntervalMs: 0 })
    const shapes = new ReplicaShapes({ store, dir, fs, onGone: () => {} })
    try {
      shapes.rescan(true)
      expect(shapes.size).toBe(1)
      await make(second, 'second')
      // Same stamp, and still inside its window: not scanned (calls in the window cost a few stats).
      const scans = shapes.scanCount
      shapes.rescan()
      expect(shapes.scanCount).toBe(scans)
      expect(shapes.lookup(definition('second'))).toBeUndefined()
      // Once the window is over the unchanged stamp is scanned once more, by a timer of the registry's own (with no
      // fallback timer, the one notification of the rename may already have been spent), and the second shape is there.
      await new Promise((r) => setTimeout(r, 2_100))
      expect(shapes.size).toBe(2)
      expect(shapes.lookup(definition('second'))).toBe(second)
      // Old enough now: the same stamp is not scanned again.
      const settled = shapes.scanCount
      shapes.rescan()
      shapes.rescan()
      expect(shapes.scanCount).toBe(settled)
    } finally {
      shapes.close()
      await store.close()
      await writer.close()
    }
  })
})
