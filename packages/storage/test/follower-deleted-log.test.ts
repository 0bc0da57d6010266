/**
 * A read-only follower holding a log that the writer deletes. The writer never
 * writes a deleted log's tail back into its files, so once the follower's view
 * of the journal loses that log's records (at its tombstone, or with a segment
 * checkpointed away), its files, still open here, lack what the watermark
 * covers. The follower must then answer as the writer's own handle does,
 * `shape_deleted`, never a head the watermark has passed (an empty read though
 * entries after it were published) or a range its files do not hold. Logs
 * still live across the same events are served whole, and an id created again
 * is served anew.
 *
 * The writer and the follower run in this process and take turns by hand, so
 * each ordering is forced: real files, a real writer and a real follower.
 */
import { existsSync, readdirSync, readlinkSync } from 'node:fs'
import { join } from 'node:path'
import type { LogOffset } from '@sluice/protocol'
import { formatOffset, parseOffset } from '@sluice/protocol'
import { useTempDir } from '@sluice/test-utils'
import { describe, expect, it } from 'vitest'
import { openFileLogStore, openReadOnlyLogStore, readSpans } from '../src/index.js'
import type { FileLogStore, ShapeLog } from '../src/index.js'
import { change, makeShape, readAllEntries, row } from './contract-suite.js'
import { until } from './fixtures/until.js'

const tempDirs = useTempDir()

/** Small segments: a few flushes close one, and its checkpoint deletes it. */
const SEGMENT_BYTES = 1024

function segments(dir: string): string[] {
  return readdirSync(join(dir, 'journal'))
    .filter((n) => n.endsWith('.jnl'))
    .sort()
}

/** Files this process holds open under `dir` (moved there or removed since: the kernel still names the path). */
function heldUnder(dir: string): string[] {
  const held: string[] = []
  for (const fd of readdirSync('/proc/self/fd')) {
    try {
      const target = readlinkSync(`/proc/self/fd/${fd}`)
      if (target.startsWith(`${dir}/`)) held.push(target)
    } catch {
      // Closed meanwhile (readdir's own descriptor).
    }
  }
  return held
}

/** One transaction of two entries at `tx` to `log`. */
function append(log: ShapeLog, tx: bigint, i: number): void {
  log.appendTransaction([change(tx, 0, i), change(tx, 1, i + 1)])
}

/** Flushes transactions to `y` until the segments in `gone` were checkpointed away. */
async function checkpointAway(s: FileLogStore, y: ShapeLog, gone: string[], fromTx: bigint): Promise<bigint> {
  let tx = fromTx
  for (let i = 0; i < 100 && gone.some((n) => existsSync(join(s.root, 'journal', n))); i++) {
    append(y, tx, i)
    s.advance(tx)
    await s.flush()
    tx += 2n
    await new Promise((r) => setTimeout(r, 2))
  }
  await until(() => gone.every((n) => !existsSync(join(s.root, 'journal', n))))
  return tx
}

/** The LSNs y holds after transaction 5 and a `checkpointAway` from 11 that stopped before `tx`: two entries each. */
function yLsns(tx: bigint): string[] {
  return ['5', ...Array.from({ length: Number((tx - 11n) / 2n) }, (_, i) => String(11 + 2 * i))].flatMap((l) => [l, l])
}

/** What `read(after)` of a follower's log gives: its code if it throws, else the entries and whether its bytes are all there. */
function attempt(log: ShapeLog, after: LogOffset): string {
  let r
  try {
    r = log.read(after)
  } catch (err) {
    return (err as { code?: string }).code ?? String(err)
  }
  try {
    const bytes = readSpans(r)
    return `${r.entryCount} entries to ${formatOffset(r.nextOffset)}${r.reachedHead ? ' (head)' : ''}, ${bytes.length} bytes`
  } catch (err) {
    return `${r.entryCount} entries of ${r.byteLength} bytes, unreadable: ${String(err)}`
  } finally {
    r.release()
  }
}

const lsnsOf = (log: ShapeLog): string[] =>
  (readAllEntries(log) as Array<{ headers?: { lsn?: string } }>).flatMap((m) => (m.headers?.lsn === undefined ? [] : [m.headers.lsn]))

/**
 * A writer with logs x and y, each holding transaction 5 (durable), and a
 * follower that has read x: the state every case below starts from.
 */
async function followedPair(name: string) {
  const dir = await tempDirs.make(name)
  const s = await openFileLogStore({ dir, flushIntervalMs: 60_000, flushWhenIdle: false, journalSegmentBytes: SEGMENT_BYTES })
  const x = await makeShape(s, 'x', [row(1)])
  const y = await makeShape(s, 'y', [row(1)])
  append(x, 5n, 1)
  append(y, 5n, 1)
  s.advance(5n)
  await s.flush()
  const ro = openReadOnlyLogStore({ dir, pollIntervalMs: 0 })
  const rx = ro.get('x')!
  const ry = ro.get('y')!
  expect(lsnsOf(rx)).toEqual(['5', '5'])
  return { dir, s, x, y, ro, rx, ry }
}

describe('a read-only follower holding a log the writer deletes', () => {
  it('throws shape_deleted once it reads the tombstone, though the deleted log never got its last transaction', async () => {
    const { dir, s, x, y, ro, rx, ry } = await followedPair('ro-deleted-tombstone')

    // Transaction 7 goes to x and y; x is deleted before any flush made it
    // durable, as the server drops a shape between two transactions. The next
    // group holds x's records of 7, then its tombstone, and watermark 7.
    append(x, 7n, 3)
    append(y, 7n, 3)
    s.advance(7n)
    await s.deleteShape('x')
    await s.flush()
    expect(ro.durableLsn).toBe(7n)

    // The old code answered an empty range at the head after 5_1, with 7 published.
    expect(attempt(rx, parseOffset('5_1'))).toBe('shape_deleted')
    // Found deleted, it lets go of the files (in trash/, or removed: their space is freed). A descriptor
    // pinned by an operation still on the thread pool closes when that ends.
    await until(() => heldUnder(join(dir, 'trash')).length === 0)
    expect(heldUnder(join(dir, 'trash'))).toEqual([])
    expect(() => rx.head()).toThrow(expect.objectContaining({ code: 'shape_deleted' }))
    expect(ro.get('x')).toBeUndefined()
    expect(lsnsOf(ry)).toEqual(['5', '5', '7', '7'])

    // The id created again is another log, served anew; the old handle stays deleted.
    const x2 = await makeShape(s, 'x', [row(9)])
    append(x2, 9n, 9)
    s.advance(9n)
    await s.flush()
    expect(lsnsOf(ro.get('x')!)).toEqual(['9', '9'])
    expect(attempt(rx, parseOffset('-1'))).toBe('shape_deleted')
    await ro.close()
    await s.close()
  })

  it('serves an id deleted and created again, with no flush between, as the new log: never through the old one\'s journaled writes', async () => {
    const { s, x, ro, rx } = await followedPair('ro-recreated')
    // x's transaction 7 is in the journal only (the follower reads it through the view).
    append(x, 7n, 3)
    s.advance(7n)
    await s.flush()
    expect(lsnsOf(rx)).toEqual(['5', '5', '7', '7'])
    // Deleted and made again at once: the tombstone's group moves no watermark, so no poll reads it.
    await s.deleteShape('x')
    const x2 = await makeShape(s, 'x', [row(40), row(41), row(42)])
    expect(x2.head().entryCount).toBe(4)
    const again = ro.get('x')!
    expect(again).not.toBe(rx)
    // The old code read the new files through x's old extents: torn, unparseable bytes.
    const parsed = readAllEntries(again) as Array<{ value?: { id?: string } }>
    expect(parsed.filter((m) => m.value !== undefined).map((m) => m.value!.id)).toEqual(['40', '41', '42'])
    expect(attempt(rx, parseOffset('5_1'))).toBe('shape_deleted')
    await ro.close()
    await s.close()
  })

  it('throws shape_deleted when the segment with its records and tombstone was checkpointed away before the follower looked again', async () => {
    // The follower reads x through the journal: transaction 5 is only there and in the writer's memory.
    const { dir, s, y, ro, rx, ry } = await followedPair('ro-deleted-reset')
    const first = segments(dir)
    expect(first).toHaveLength(1)

    // x is deleted (its tombstone joins the same segment), then y's flushes
    // close that segment and a checkpoint deletes it: x's transaction 5 is now
    // in no file and no segment.
    await s.deleteShape('x')
    await s.flush()
    expect(segments(dir)).toEqual(first)
    const tx = await checkpointAway(s, y, first, 11n)

    // The old code served x's head at 5, the range after the snapshot with bytes its data file never got (a short read).
    expect(attempt(rx, parseOffset('0_0'))).toBe('shape_deleted')
    expect(attempt(rx, parseOffset('-1'))).toBe('shape_deleted')
    expect(ro.get('x')).toBeUndefined()
    // y lost nothing: the checkpoint wrote its tail back.
    expect(lsnsOf(ry)).toEqual(yLsns(tx))
    await ro.close()
    await s.close()
  })

  it('throws shape_deleted when the writer deleted it and closed, checkpointing away every segment the follower had read', async () => {
    const dir = await tempDirs.make('ro-deleted-closed')
    const s = await openFileLogStore({ dir, flushIntervalMs: 60_000, flushWhenIdle: false })
    const x = await makeShape(s, 'x', [row(1)])
    append(x, 5n, 1)
    s.advance(5n)
    await s.flush()
    const ro = openReadOnlyLogStore({ dir, pollIntervalMs: 0 })
    const rx = ro.get('x')!
    expect(lsnsOf(rx)).toEqual(['5', '5'])

    // No watermark moves: the close's checkpoint replaces the watermark file
    // (same value) and deletes the segment, tombstone and all.
    await s.deleteShape('x')
    await s.close()
    expect(segments(dir)).toEqual([])
    expect(ro.durableLsn).toBe(5n)

    // The old code kept x's head at 5 and gave the range after the snapshot from bytes its data file never got.
    expect(attempt(rx, parseOffset('0_0'))).toBe('shape_deleted')
    expect(ro.get('x')).toBeUndefined()
    await ro.close()
  })

  it('throws shape_deleted when its records lay in segments that came and went unread, after the writer restarted', async () => {
    const dir = await tempDirs.make('ro-deleted-unread')
    const first = await openFileLogStore({ dir, flushIntervalMs: 60_000, flushWhenIdle: false, journalSegmentBytes: SEGMENT_BYTES })
    append(await makeShape(first, 'x', [row(1)]), 5n, 1)
    append(await makeShape(first, 'y', [row(1)]), 5n, 1)
    first.advance(5n)
    await first.flush()
    expect(segments(dir)).toEqual(['00000001.jnl'])

    // The follower reads x through the first writer's segment.
    const ro = openReadOnlyLogStore({ dir, pollIntervalMs: 0 })
    const rx = ro.get('x')!
    const ry = ro.get('y')!
    expect(lsnsOf(rx)).toEqual(['5', '5'])

    // A clean close checkpoints everything; the follower sees the journal empty.
    await first.close()
    expect(segments(dir)).toEqual([])
    expect(lsnsOf(rx)).toEqual(['5', '5'])

    // The next writer numbers its segments from 1 again. Transaction 7 to x, x
    // deleted before the flush; the follower does not look while that segment
    // fills, closes and is checkpointed away, so the one it finds next follows
    // the last one it read by number, from another writer.
    const s = await openFileLogStore({ dir, flushIntervalMs: 60_000, flushWhenIdle: false, journalSegmentBytes: SEGMENT_BYTES })
    append(s.get('x')!, 7n, 3)
    s.advance(7n)
    await s.deleteShape('x')
    await s.flush()
    expect(segments(dir)).toEqual(['00000001.jnl'])
    const tx = await checkpointAway(s, s.get('y')!, ['00000001.jnl'], 11n)
    expect(segments(dir)[0]).toBe('00000002.jnl')
    expect(ro.durableLsn).toBe(tx - 2n)

    // The old code answered an empty range at the head after 5_1, with 7 published.
    expect(attempt(rx, parseOffset('5_1'))).toBe('shape_deleted')
    expect(ro.get('x')).toBeUndefined()
    expect(lsnsOf(ry)).toEqual(yLsns(tx))
    await ro.close()
    await s.close()
  })
})
