/**
 * The bucketed layout of shapes/ (shape-dirs.ts), on real files: where logs
 * live, that a drained store's shapes/ is back to its first size (a flat
 * directory never shrinks on ext4), moving a flat-layout store's logs into
 * their buckets at open (a crash part-way included, with a journal left to
 * replay), read-only stores over either layout, and creations and deletions
 * racing in one bucket.
 */
import { cpSync, existsSync, readFileSync, readdirSync, renameSync, rmSync, rmdirSync, statSync, writeFileSync } from 'node:fs'
import { BEFORE_ALL } from '@sluice/protocol'
import type { LogOffset } from '@sluice/protocol'
import { useTempDir } from '@sluice/test-utils'
import { afterEach, describe, expect, it } from 'vitest'
import { bucketOf, bucketPath, isBucketName, listBuckets, shapeDir, shapesRoot } from '../src/index.js'
import { decodeWatermark, encodeWatermark } from '../src/format.js'
import { nodeFs, openFileLogStore, openReadOnlyLogStore, readSpans } from '../src/index.js'
import type { FileLogStore, FsPort, LogRead } from '../src/index.js'
import { change, makeShape, row } from './contract-suite.js'
import { storedIds } from './fixtures/log-dirs.js'

const tempDirs = useTempDir('shape-dirs')
const open: Array<{ close(): Promise<void> }> = []
afterEach(async () => {
  for (const s of open.splice(0).reverse()) await s.close().catch(() => undefined)
})

async function openStore(dir: string, fs?: FsPort): Promise<FileLogStore> {
  const s = await openFileLogStore({ dir, chunkBytes: 2048, flushIntervalMs: 60_000, flushWhenIdle: false, ...(fs ? { fs } : {}) })
  open.push(s)
  return s
}

function readAll(log: { read(after: LogOffset): LogRead }): Buffer {
  const parts: Buffer[] = []
  let at = BEFORE_ALL
  for (;;) {
    const r = log.read(at)
    if (r.entryCount === 0) break
    parts.push(readSpans(r))
    r.release()
    at = r.nextOffset
  }
  return Buffer.concat(parts)
}

/** Ids that all fall in one bucket. */
function sameBucket(count: number, prefix: string): string[] {
  const want = bucketOf(`${prefix}0`)
  const out: string[] = []
  for (let i = 0; out.length < count; i++) if (bucketOf(`${prefix}${i}`) === want) out.push(`${prefix}${i}`)
  return out
}

/** Turns a closed store into what the build before buckets left: the flat `shapes/<id>/`, a version-1 watermark. */
function flatten(dir: string): void {
  for (const bucket of readdirSync(`${dir}/shapes`)) {
    for (const id of readdirSync(`${dir}/shapes/${bucket}`)) renameSync(`${dir}/shapes/${bucket}/${id}`, `${dir}/shapes/${id}`)
    rmdirSync(`${dir}/shapes/${bucket}`)
  }
  const w = decodeWatermark(readFileSync(`${dir}/watermark`))
  if (typeof w === 'string') throw new Error(`watermark: ${w}`)
  writeFileSync(`${dir}/watermark`, encodeWatermark(w, 1))
}

const versionOf = (dir: string): number => readFileSync(`${dir}/watermark`)[4]!

/** Logs with a snapshot and some transactions each, flushed; their bytes by id. */
async function fill(s: FileLogStore, ids: readonly string[]): Promise<Map<string, Buffer>> {
  const logs = await Promise.all(ids.map((id, i) => makeShape(s, id, [row(i), row(i + 1000)])))
  for (let tx = 1; tx <= 3; tx++) for (const [i, log] of logs.entries()) log.appendTransaction([change(BigInt(tx * 10), 0, i)])
  s.advance(30n)
  await s.flush()
  return new Map(logs.map((log) => [log.id, readAll(log)]))
}

describe('shapes/ in buckets', () => {
  it('keeps each log in its bucket, names only buckets in shapes/, and removes a bucket with its last log', async () => {
    const dir = await tempDirs.make('layout')
    const s = await openStore(dir)
    const [a, b] = sameBucket(2, 'pair')
    const bytes = await fill(s, [a!, b!, 'lone', 'x_c1'])
    for (const id of bytes.keys()) {
      expect(existsSync(`${dir}/shapes/${bucketOf(id)}/${id}/log.dat`), id).toBe(true)
      expect(shapeDir(dir, id)).toBe(`${dir}/shapes/${bucketOf(id)}/${id}`)
    }
    expect(readdirSync(`${dir}/shapes`).every(isBucketName)).toBe(true)
    expect(storedIds(dir).sort()).toEqual([...bytes.keys()].sort())
    // The layout as a follower from outside reads it (the read replica's watch and stamp).
    expect(shapesRoot(dir)).toBe(`${dir}/shapes`)
    expect(listBuckets(nodeFs, dir).sort()).toEqual([...new Set([...bytes.keys()].map(bucketOf))].sort())
    for (const id of bytes.keys()) expect(readdirSync(bucketPath(dir, bucketOf(id)))).toContain(id)
    writeFileSync(`${dir}/shapes/stray`, '')
    expect(listBuckets(nodeFs, dir)).not.toContain('stray')
    rmSync(`${dir}/shapes/stray`)
    // A follower finds every log where the writer put it.
    const ro = openReadOnlyLogStore({ dir, pollIntervalMs: 0 })
    open.push(ro)
    expect(ro.ids().sort()).toEqual([...bytes.keys()].sort())
    for (const [id, want] of bytes) expect(readAll(ro.get(id)!).equals(want), id).toBe(true)
    // The bucket stays while one of its logs does.
    await s.deleteShape(a!)
    expect(existsSync(`${dir}/shapes/${bucketOf(a!)}`)).toBe(true)
    await s.deleteShape(b!)
    expect(existsSync(`${dir}/shapes/${bucketOf(a!)}`)).toBe(false)
    await s.deleteShape('lone')
    await s.deleteShape('x_c1')
    expect(readdirSync(`${dir}/shapes`)).toEqual([])
  })

  it("gives a drained store's shapes/ back its first size, however many logs it held", async () => {
    const dir = await tempDirs.make('drain')
    const s = await openStore(dir)
    const initial = statSync(`${dir}/shapes`)
    // Long ids, as handles are: a flat shapes/ of these grows by ~110 bytes an entry.
    const ids = Array.from({ length: 2000 }, (_, i) => `${String(i).padStart(5, '0')}-${'h'.repeat(96)}`)
    await Promise.all(ids.map((id) => makeShape(s, id, [row(1)])))
    await makeShape(s, 'kept', [row(2)])
    for (const id of ids) await s.deleteShape(id)
    // One live log: shapes/ as small as when the store was made, and one bucket left.
    const after = statSync(`${dir}/shapes`)
    expect(after.size).toBeLessThanOrEqual(initial.size)
    expect(after.blocks).toBeLessThanOrEqual(initial.blocks)
    expect(readdirSync(`${dir}/shapes`)).toEqual([bucketOf('kept')])
    expect(statSync(`${dir}/shapes/${bucketOf('kept')}`).size).toBeLessThanOrEqual(initial.size)
    await s.deleteShape('kept')
    expect(readdirSync(`${dir}/shapes`)).toEqual([])
    expect(statSync(`${dir}/shapes`).blocks).toBeLessThanOrEqual(initial.blocks)
  })

  it('creations and deletions racing in one bucket lose no log and leave no empty bucket', async () => {
    const dir = await tempDirs.make('race')
    // A bucket that vanishes between its mkdir and the rename into it (removed by hand, say) is made again.
    let vanish = true
    const fs: FsPort = {
      ...nodeFs,
      renameSync(from, to) {
        const bucket = to.slice(0, to.lastIndexOf('/'))
        if (vanish && from.includes('/tmp/') && isBucketName(bucket.slice(bucket.lastIndexOf('/') + 1))) {
          vanish = false
          nodeFs.rmdirSync(bucket)
        }
        nodeFs.renameSync(from, to)
      },
    }
    const s = await openStore(dir, fs)
    const ids = sameBucket(40, 'r')
    const bucket = `${dir}/shapes/${bucketOf(ids[0]!)}`
    const kept = new Map<string, Buffer>()
    for (let round = 0; round < 4; round++) {
      const batch = ids.slice(round * 10, round * 10 + 10)
      // Each round deletes the previous round's logs while this round's are created and finished.
      const previous = round === 0 ? [] : ids.slice((round - 1) * 10, round * 10)
      const made = Promise.all(batch.map((id, i) => makeShape(s, id, [row(round * 100 + i)])))
      const gone = Promise.all(previous.map((id) => s.deleteShape(id)))
      const [logs] = await Promise.all([made, gone])
      for (const id of previous) kept.delete(id)
      for (const log of logs) kept.set(log.id, readAll(log))
      expect(readdirSync(bucket).sort()).toEqual([...kept.keys()].sort())
    }
    expect(vanish).toBe(false)
    await s.close()
    const again = await openStore(dir)
    expect(again.ids().sort()).toEqual([...kept.keys()].sort())
    for (const [id, want] of kept) expect(readAll(again.get(id)!).equals(want), id).toBe(true)
    for (const id of kept.keys()) await again.deleteShape(id)
    expect(existsSync(bucket)).toBe(false)
  })
})

describe('a store of the flat layout', () => {
  it('opens with every log moved into its bucket, byte for byte the same', async () => {
    const dir = await tempDirs.make('flat')
    const s = await openStore(dir)
    const ids = Array.from({ length: 300 }, (_, i) => `h${i}-${i * 7919}`)
    const bytes = await fill(s, ids)
    await s.close()
    flatten(dir)
    expect(readdirSync(`${dir}/shapes`).sort()).toEqual([...ids].sort())
    // A follower of a writer that has not moved them yet serves them where they are.
    const ro = openReadOnlyLogStore({ dir, pollIntervalMs: 0 })
    open.push(ro)
    expect(ro.ids().sort()).toEqual([...ids].sort())
    const early = ro.get(ids[0]!)!
    expect(readAll(early).equals(bytes.get(ids[0]!)!)).toBe(true)

    expect(versionOf(dir)).toBe(1)
    const again = await openStore(dir)
    expect(readdirSync(`${dir}/shapes`).every(isBucketName)).toBe(true)
    // Marked as bucketed only now: a build that knows only the flat layout refuses it from here on.
    expect(versionOf(dir)).toBe(2)
    expect(storedIds(dir).sort()).toEqual([...ids].sort())
    expect(again.ids().sort()).toEqual([...ids].sort())
    expect(again.quarantined).toEqual([])
    // The clean close's heads still describe the moved files: nothing is scanned.
    expect(again.cleanOpened).toBe(ids.length)
    for (const [id, want] of bytes) expect(readAll(again.get(id)!).equals(want), id).toBe(true)
    // The follower finds them in their buckets now, the one it had opened too.
    for (const [id, want] of bytes) expect(readAll(ro.get(id)!).equals(want), id).toBe(true)
    expect(ro.get(ids[0]!)).not.toBe(early)
  })

  it('finishes a move a crash cut short, and replays a journal left behind into the moved logs', async () => {
    const dir = await tempDirs.make('flat-crash')
    const s = await openStore(dir)
    const ids = Array.from({ length: 120 }, (_, i) => `c${i}`)
    const bytes = await fill(s, ids)
    // Durable only in the journal (write-behind): a copy now is what a kill -9 leaves.
    const crash = await tempDirs.make('flat-crash-copy')
    cpSync(dir, crash, { recursive: true })
    expect(readdirSync(`${crash}/journal`).length).toBeGreaterThan(0)
    writeFileSync(`${crash}/LOCK`, '999999999') // the "crashed" writer's pid
    flatten(crash)
    // Its transactions are in the journal only: the open must replay them into the moved files.
    expect(statSync(`${crash}/shapes/c0/log.dat`).size).toBeLessThan(16 + bytes.get('c0')!.length)
    // The writer dies after 50 of its moves (each one rename: a crash falls between two).
    let renames = 0
    const dying: FsPort = {
      ...nodeFs,
      renameSync(from, to) {
        if (from.startsWith(`${crash}/shapes/`) && ++renames > 50) throw Object.assign(new Error('killed'), { code: 'EIO' })
        nodeFs.renameSync(from, to)
      },
    }
    await expect(openFileLogStore({ dir: crash, fs: dying, flushWhenIdle: false })).rejects.toThrow(/killed/)
    // Not marked bucketed while logs are left to move.
    expect(versionOf(crash)).toBe(1)
    const top = readdirSync(`${crash}/shapes`)
    expect(top.filter(isBucketName).length).toBeGreaterThan(0)
    expect(top.filter((n) => !isBucketName(n)).length).toBe(ids.length - 50)
    // A follower of the half-moved store still sees every log.
    const ro = openReadOnlyLogStore({ dir: crash, pollIntervalMs: 0 })
    open.push(ro)
    expect(ro.ids().sort()).toEqual([...ids].sort())

    const again = await openStore(crash)
    expect(readdirSync(`${crash}/shapes`).every(isBucketName)).toBe(true)
    expect(versionOf(crash)).toBe(2)
    expect(again.ids().sort()).toEqual([...ids].sort())
    expect(again.quarantined).toEqual([])
    expect(again.durableLsn).toBe(30n)
    for (const [id, want] of bytes) expect(readAll(again.get(id)!).equals(want), id).toBe(true)
    for (const [id, want] of bytes) expect(readAll(ro.get(id)!).equals(want), id).toBe(true)
  })
})
