import { readFileSync, rmSync, writeFileSync } from 'node:fs'
import { nodeFs, openFileLogStore, openReadOnlyLogStore, shapeDir } from '@sluice/storage'
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
