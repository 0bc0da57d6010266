/**
 * The shape-log contract, as tests. Every implementation runs this same suite.
 */
import { BEFORE_ALL, LAST_VIRTUAL, formatOffset, parseOffset } from '@sluice/protocol'
import type { LogOffset } from '@sluice/protocol'
import { afterEach, beforeEach, describe, expect, it } from 'vitest'
import type { FlushResult, LogRead, ShapeLog, ShapeLogStore } from '../src/index.js'
import { StorageError, readSpans } from '../src/index.js'

export interface ContractHarness {
  store: ShapeLogStore
  close(): Promise<void>
}

export type HarnessFactory = (options: { chunkBytes: number }) => Promise<ContractHarness>

const enc = new TextEncoder()

export function row(i: number, pad = 0): Uint8Array {
  return enc.encode(JSON.stringify({ key: `"public"."t"/"${i}"`, value: { id: String(i), pad: 'x'.repeat(pad) }, headers: { operation: 'insert', relation: ['public', 't'] } }))
}

export function change(lsn: bigint, op: number, i: number): { offset: LogOffset; json: Uint8Array } {
  return {
    offset: { tx: lsn, op: BigInt(op) },
    json: enc.encode(JSON.stringify({ key: `"public"."t"/"${i}"`, value: { id: String(i) }, headers: { operation: 'update', lsn: String(lsn), op_position: op } })),
  }
}

export const SNAPSHOT_END = enc.encode('{"headers":{"control":"snapshot-end","xmin":"1","xmax":"2","xip_list":[]}}')

/** Reads a range and parses it as the HTTP body would be: `[` + bytes without the last `,` + `]`. */
export function body(read: LogRead): unknown[] {
  const bytes = readSpans(read)
  read.release()
  if (bytes.length === 0) return []
  expect(bytes[bytes.length - 1]).toBe(0x2c)
  return JSON.parse(`[${bytes.subarray(0, bytes.length - 1).toString('utf8')}]`) as unknown[]
}

/** Every entry of the log, reading range by range from the start as a client does. */
export function readAllEntries(log: ShapeLog): unknown[] {
  const out: unknown[] = []
  let at: LogOffset = BEFORE_ALL
  for (;;) {
    const r = log.read(at)
    if (r.entryCount === 0) {
      r.release()
      return out
    }
    at = r.nextOffset
    out.push(...body(r))
  }
}

export async function makeShape(store: ShapeLogStore, id: string, rows: Uint8Array[], meta?: Uint8Array): Promise<ShapeLog> {
  const writer = store.createShape(id, meta ? { meta } : {})
  writer.append(rows)
  return writer.finish(SNAPSHOT_END)
}

const o = parseOffset

/** The code of the StorageError `fn` throws, or 'no error'. */
function codeOf(fn: () => unknown): string {
  try {
    fn()
  } catch (err) {
    return (err as StorageError).code
  }
  return 'no error'
}

export function describeContract(name: string, factory: HarnessFactory): void {
  describe(`ShapeLogStore contract: ${name}`, () => {
    let h: ContractHarness | undefined
    let store: ShapeLogStore
    // A test may reopen with other settings: the harness it replaces is closed (and its directory removed) first.
    const open = async (chunkBytes = 1000) => {
      await h?.close()
      h = await factory({ chunkBytes })
      store = h.store
    }
    beforeEach(async () => open())
    afterEach(async () => {
      const last = h
      h = undefined
      await last?.close()
    })

    it('serves the snapshot as chunks with virtual offsets 0_n, ending with snapshot-end', async () => {
      // Each row is ~150 bytes; 1000-byte chunks hold 7 rows (the 7th reaches the threshold).
      const rows = Array.from({ length: 20 }, (_, i) => row(i, 40))
      const log = await makeShape(store, 's1', rows)
      const seen: unknown[] = []
      let at: LogOffset = BEFORE_ALL
      const offsets: string[] = []
      for (;;) {
        const r = log.read(at)
        if (r.entryCount === 0) break
        offsets.push(formatOffset(r.nextOffset))
        seen.push(...body(r))
        at = r.nextOffset
      }
      expect(seen).toHaveLength(21)
      expect(seen.at(-1)).toEqual({ headers: { control: 'snapshot-end', xmin: '1', xmax: '2', xip_list: [] } })
      expect(offsets[0]).toBe('0_0')
      expect(offsets).toEqual(offsets.map((_, i) => `0_${i}`))
      const head = log.head()
      expect(head.snapshotChunks).toBe(offsets.length)
      expect(head.closedChunks).toBe(offsets.length)
      expect(formatOffset(head.lastOffset)).toBe(offsets.at(-1))
      // Chunk boundaries are fixed by the bytes: every chunk but the last reaches the threshold.
      let total = 0
      at = BEFORE_ALL
      for (let i = 0; i < offsets.length - 1; i++) {
        const r = log.read(at)
        expect(r.byteLength).toBeGreaterThanOrEqual(1000)
        expect(r.byteLength - (rows[0]!.length + 1)).toBeLessThan(1000)
        total += r.byteLength
        at = r.nextOffset
        r.release()
      }
      expect(total).toBeGreaterThan(0)
    })

    it('stores a changes_only snapshot as a lone snapshot-end chunk', async () => {
      const log = await makeShape(store, 'empty', [])
      const r = log.read(BEFORE_ALL)
      expect(formatOffset(r.nextOffset)).toBe('0_0')
      expect(r.reachedHead).toBe(true)
      expect(body(r)).toEqual([{ headers: { control: 'snapshot-end', xmin: '1', xmax: '2', xip_list: [] } }])
      const after = log.read(o('0_0'))
      expect(after.entryCount).toBe(0)
      expect(after.reachedHead).toBe(true)
    })


    it('closes a snapshot chunk on request (closeChunk), so a rebuilt log keeps its rows at their 0_n', async () => {
      const writer = store.createShape('rebuilt')
      expect(codeOf(() => writer.append([], { closeChunk: true }))).toBe('invalid_append')
      // Three small chunks, far below the 1000-byte threshold, then a last one holding snapshot-end.
      writer.append([row(1), row(2)], { closeChunk: true })
      writer.append([row(3)], { closeChunk: true })
      writer.append([row(4)], { closeChunk: true })
      writer.append([row(5)])
      const log = await writer.finish(SNAPSHOT_END)
      const head = log.head()
      expect(head.snapshotChunks).toBe(4)
      expect(formatOffset(head.lastOffset)).toBe('0_3')
      const ids = (entries: unknown[]) => entries.map((e) => (e as { value?: { id: string } }).value?.id ?? 'end')
      expect(ids(body(log.read(BEFORE_ALL)))).toEqual(['1', '2'])
      expect(ids(body(log.read(o('0_0'))))).toEqual(['3'])
      expect(ids(body(log.read(o('0_1'))))).toEqual(['4'])
      expect(ids(body(log.read(o('0_2'))))).toEqual(['5', 'end'])
    })
    it('publishes appends only once advanced and flushed', async () => {
      const log = await makeShape(store, 'live', [row(1)])
      expect(log.appendTransaction([change(100n, 0, 1), change(100n, 2, 2)])).toBe(2)
      expect(log.read(o('0_0')).entryCount).toBe(0)
      await store.flush()
      expect(log.read(o('0_0')).entryCount).toBe(0) // not advanced yet
      store.advance(100n)
      const flushed = await store.flush()
      expect(flushed.durableLsn).toBe(100n)
      expect(flushed.advanced).toContain('live')
      expect(store.durableLsn).toBe(100n)
      const r = log.read(o('0_0'))
      expect(r.entryCount).toBe(2)
      expect(r.reachedHead).toBe(true)
      expect(formatOffset(r.nextOffset)).toBe('100_2')
      expect(body(r).map((m) => (m as { headers: { op_position: number } }).headers.op_position)).toEqual([0, 2])
      expect(formatOffset(log.head().lastOffset)).toBe('100_2')
    })

    it('publishes only transactions at or below the advanced LSN', async () => {
      const log = await makeShape(store, 'cap', [])
      log.appendTransaction([change(10n, 0, 1)])
      log.appendTransaction([change(20n, 0, 2)])
      log.appendTransaction([change(30n, 0, 3)])
      store.advance(25n)
      await store.flush()
      expect(formatOffset(log.head().lastOffset)).toBe('20_0')
      expect(body(log.read(o('0_0')))).toHaveLength(2)
      store.advance(30n)
      await store.flush()
      expect(formatOffset(log.head().lastOffset)).toBe('30_0')
    })

    it('never publishes a transaction whose remaining entries are still to come', async () => {
      const log = await makeShape(store, 'more', [])
      log.appendTransaction([change(10n, 0, 1), change(10n, 2, 2)], { more: true })
      store.advance(9n)
      await store.flush()
      expect(log.read(o('0_0')).entryCount).toBe(0)
      log.appendTransaction([change(10n, 4, 3)])
      store.advance(10n)
      await store.flush()
      expect(log.read(o('0_0')).entryCount).toBe(3)
    })

    it('answers a made-up offset between entries with the entries after it', async () => {
      await open(100_000)
      const log = await makeShape(store, 'mid', [row(1)])
      for (let tx = 1; tx <= 5; tx++) log.appendTransaction([change(BigInt(tx * 10), 0, tx), change(BigInt(tx * 10), 2, tx + 100)])
      store.advance(50n)
      await store.flush()
      const cases: Array<[string, number, string]> = [
        ['0_0', 10, '50_2'],
        ['0_inf', 10, '50_2'],
        ['10_0', 9, '50_2'],
        ['10_1', 9, '50_2'],
        ['10_2', 8, '50_2'],
        ['29_99', 6, '50_2'],
        ['30_2', 4, '50_2'],
        ['50_0', 1, '50_2'],
      ]
      for (const [after, count, next] of cases) {
        const r = log.read(o(after))
        expect([after, r.entryCount, formatOffset(r.nextOffset)]).toEqual([after, count, next])
        expect(r.reachedHead).toBe(true)
        r.release()
      }
      const head = log.read(o('50_2'))
      expect([head.entryCount, head.reachedHead, formatOffset(head.nextOffset)]).toEqual([0, true, '50_2'])
      const beyond = log.read(o('99_0'))
      expect([beyond.entryCount, beyond.reachedHead]).toEqual([0, true])
      expect(LAST_VIRTUAL.tx).toBe(0n)
    })

    it('closes live chunks after the entry that reaches the threshold, even inside a transaction', async () => {
      await open(600)
      const log = await makeShape(store, 'chunks', [])
      // One big transaction of 12 entries (~120 bytes each) then small ones.
      const big = Array.from({ length: 12 }, (_, i) => change(100n, i * 2, i))
      log.appendTransaction(big)
      for (let tx = 101n; tx < 110n; tx++) log.appendTransaction([change(tx, 0, Number(tx))])
      store.advance(109n)
      await store.flush()
      let at = o('0_0')
      const ranges: Array<{ next: string; count: number; bytes: number; head: boolean }> = []
      for (;;) {
        const r = log.read(at)
        if (r.entryCount === 0) break
        ranges.push({ next: formatOffset(r.nextOffset), count: r.entryCount, bytes: r.byteLength, head: r.reachedHead })
        at = r.nextOffset
        r.release()
      }
      expect(ranges.reduce((n, r) => n + r.count, 0)).toBe(21)
      // Every closed chunk reached the threshold; only the last range may be short, and only it reaches the head.
      for (const r of ranges.slice(0, -1)) {
        expect(r.bytes).toBeGreaterThanOrEqual(600)
        expect(r.head).toBe(false)
      }
      expect(ranges.at(-1)!.head).toBe(true)
      // The first chunk ends inside transaction 100.
      expect(ranges[0]!.next.startsWith('100_')).toBe(true)
      expect(ranges[0]!.next).not.toBe('100_22')
      // Reading from inside a chunk ends at the same boundary.
      const mid = log.read(o('100_2'))
      expect(formatOffset(mid.nextOffset)).toBe(ranges[0]!.next)
      mid.release()
    })

    it('skips replayed entries, so replay after a crash is idempotent', async () => {
      const log = await makeShape(store, 'replay', [])
      expect(log.appendTransaction([change(10n, 0, 1), change(10n, 2, 2)])).toBe(2)
      expect(log.appendTransaction([change(10n, 0, 1), change(10n, 2, 2)])).toBe(0)
      expect(log.appendTransaction([change(5n, 0, 9)])).toBe(0)
      expect(log.appendTransaction([change(20n, 0, 3)])).toBe(1)
      store.advance(20n)
      await store.flush()
      expect(body(log.read(o('0_0')))).toHaveLength(3)
    })

    it('rejects appends that do not form one transaction with increasing offsets', async () => {
      const log = await makeShape(store, 'bad', [])
      expect(codeOf(() => log.appendTransaction([change(10n, 0, 1), change(11n, 0, 2)]))).toBe('invalid_append')
      expect(codeOf(() => log.appendTransaction([change(10n, 4, 1), change(10n, 2, 2)]))).toBe('invalid_append')
      expect(codeOf(() => log.appendTransaction([{ offset: { tx: 0n, op: 5n }, json: row(1) }]))).toBe('invalid_append')
      expect(log.appendTransaction([])).toBe(0)
      // Nothing of the rejected appends was kept.
      expect(log.appendTransaction([change(10n, 0, 1)])).toBe(1)
      store.advance(10n)
      await store.flush()
      expect(body(log.read(o('0_0')))).toHaveLength(1)
    })

    it('appends parallel arrays (appendLines) exactly as entries, with the same replay and validation rules', async () => {
      const byEntries = await makeShape(store, 'entries', [])
      const byLines = await makeShape(store, 'lines', [])
      const txs: Array<Array<{ offset: LogOffset; json: Uint8Array }>> = [
        [change(10n, 0, 1), change(10n, 2, 2), change(10n, 4, 3)],
        [change(12n, 1, 4)],
      ]
      expect(() => byLines.appendLines(0n, [5], [row(1)], 1)).toThrow(StorageError)
      // Arrays longer than `count`, refilled per call, as a caller reusing them would.
      const ops: number[] = [7, 7, 7, 7, 7]
      const jsons: Uint8Array[] = Array.from({ length: 5 }, () => row(99))
      for (const entries of txs) {
        expect(byEntries.appendTransaction(entries)).toBe(entries.length)
        entries.forEach((e, i) => {
          ops[i] = Number(e.offset.op)
          jsons[i] = e.json
        })
        expect(byLines.appendLines(entries[0]!.offset.tx, ops, jsons, entries.length)).toBe(entries.length)
      }
      // A replay: the head already appended is skipped, the rest taken.
      expect(byLines.appendLines(12n, [1, 3], [change(12n, 1, 4).json, change(12n, 3, 5).json], 2, { more: true })).toBe(1)
      expect(byEntries.appendTransaction([change(12n, 1, 4), change(12n, 3, 5)], { more: true })).toBe(1)
      expect(byLines.appendLines(12n, [5], [change(12n, 5, 6).json], 1)).toBe(1)
      expect(byEntries.appendTransaction([change(12n, 5, 6)])).toBe(1)
      expect(byLines.appendLines(5n, [0], [row(1)], 1)).toBe(0)
      expect(byLines.appendLines(20n, [], [], 0)).toBe(0)
      expect(codeOf(() => byLines.appendLines(20n, [4, 2], [row(1), row(2)], 2))).toBe('invalid_append')
      expect(codeOf(() => byLines.appendLines(20n, [0.5], [row(1)], 1))).toBe('invalid_append')
      expect(codeOf(() => byLines.appendLines(20n, [2 ** 53], [row(1)], 1))).toBe('invalid_append')
      for (const count of [-1, 1.5, 2]) expect(codeOf(() => byLines.appendLines(20n, [0], [row(1)], count))).toBe('invalid_append')
      expect(codeOf(() => byLines.appendLines(20n, [0, 2], [row(1)], 2))).toBe('invalid_append')
      store.advance(12n)
      await store.flush()
      const all = readAllEntries(byLines)
      expect(all).toEqual(readAllEntries(byEntries))
      expect(all).toHaveLength(1 + 6)
      expect(formatOffset(byLines.head().lastOffset)).toBe('12_5')
      // Through a snapshot writer too.
      const w = store.createShape('writer-lines')
      w.append([row(1)])
      expect(codeOf(() => w.appendLines(30n, [0], [row(2)], 1))).toBe('invalid_append')
      const finishing = w.finish(SNAPSHOT_END)
      expect(w.appendLines(30n, [0, 2], [change(30n, 0, 2).json, change(30n, 2, 3).json], 2)).toBe(2)
      store.advance(30n)
      await store.flush()
      const log = await finishing
      expect(readAllEntries(log)).toHaveLength(2 + 2)
      expect(formatOffset(log.head().lastOffset)).toBe('30_2')
    })

    it('keeps shapes apart, rejects duplicate and unsafe ids, and deletes', async () => {
      const a = await makeShape(store, 'a', [row(1)], enc.encode('{"table":"a"}'))
      await makeShape(store, 'b', [row(2), row(3)])
      expect(new TextDecoder().decode(a.meta)).toBe('{"table":"a"}')
      expect(store.ids().sort()).toEqual(['a', 'b'])
      expect([...store.finishedLogs()].sort((x, y) => x.id.localeCompare(y.id))).toEqual([store.get('a'), store.get('b')])
      expect(() => store.createShape('a')).toThrow(StorageError)
      for (const bad of ['', '../x', 'a/b', 'x'.repeat(129), 'sp ace', '.']) {
        expect(() => store.createShape(bad)).toThrow(/invalid shape id/)
      }
      expect(await store.deleteShape('a')).toBe(true)
      expect(await store.deleteShape('a')).toBe(false)
      expect(store.get('a')).toBeUndefined()
      expect(store.ids()).toEqual(['b'])
      expect([...store.finishedLogs()]).toEqual([store.get('b')])
      expect(body(store.get('b')!.read(BEFORE_ALL))).toHaveLength(3)
      const again = await makeShape(store, 'a', [row(7)])
      expect(body(again.read(BEFORE_ALL))).toHaveLength(2)
    })

    it('hides a snapshot until it is finished, and forgets an aborted one', async () => {
      const w = store.createShape('pending')
      w.append([row(1)])
      expect(store.get('pending')).toBeUndefined()
      expect(() => store.createShape('pending')).toThrow(StorageError)
      await w.abort()
      expect(store.get('pending')).toBeUndefined()
      const log = await makeShape(store, 'pending', [row(2)])
      expect(body(log.read(BEFORE_ALL))).toHaveLength(2)
    })

    it('tells flush listeners which logs moved', async () => {
      const seen: FlushResult[] = []
      const off = store.onFlush((r) => seen.push(r))
      const a = await makeShape(store, 'la', [])
      await makeShape(store, 'lb', [])
      a.appendTransaction([change(7n, 0, 1)])
      store.advance(7n)
      await store.flush()
      off()
      const last = seen.at(-1)!
      expect(last.durableLsn).toBe(7n)
      expect(last.advanced).toEqual(['la'])
    })

    describe('live transactions appended while a new log finishes', () => {
      const codeOf = (fn: () => unknown): string => {
        try {
          fn()
        } catch (err) {
          return (err as StorageError).code
        }
        return 'no error'
      }
      const lsnsOf = (entries: unknown[]): string[] =>
        entries.flatMap((m) => {
          const h = (m as { headers: { lsn?: string; op_position?: number } }).headers
          return h.lsn === undefined ? [] : [`${h.lsn}_${h.op_position}`]
        })
      /** Another log moves the watermark to 50 while the new shape's snapshot "runs". */
      const advanceOthersTo50 = async () => {
        const other = await makeShape(store, 'other', [])
        for (const tx of [10n, 30n, 50n]) other.appendTransaction([change(tx, 0, Number(tx))])
        store.advance(50n)
        await store.flush()
        expect(store.durableLsn).toBe(50n)
      }
      const readAll = readAllEntries

      it('refuses live entries before finish', async () => {
        const w = store.createShape('early')
        w.append([row(1)])
        expect(codeOf(() => w.appendTransaction([change(5n, 0, 1)]))).toBe('invalid_append')
        // The refusal left the writer usable.
        const log = await w.finish(SNAPSHOT_END)
        expect(body(log.read(BEFORE_ALL))).toHaveLength(2)
      })

      it('publishes queued transactions below the durable watermark with the snapshot, in order, exactly once', async () => {
        await advanceOthersTo50()
        const w = store.createShape('queued')
        w.append([row(1), row(2)])
        const finishing = w.finish(SNAPSHOT_END)
        expect(w.appendTransaction([change(20n, 0, 1), change(20n, 2, 2)])).toBe(2)
        expect(w.appendTransaction([change(20n, 0, 1), change(20n, 2, 2)])).toBe(0) // a replay
        expect(w.appendTransaction([change(30n, 1, 3)])).toBe(1)
        expect(w.appendTransaction([change(50n, 0, 4)])).toBe(1)
        // Not a log until finish resolves.
        expect(store.get('queued')).toBeUndefined()
        expect(store.ids()).not.toContain('queued')
        expect([...store.finishedLogs()].map((l) => l.id)).not.toContain('queued')
        const seen: FlushResult[] = []
        const off = store.onFlush((r) => seen.push(r))
        const log = await finishing
        off()
        expect(store.get('queued')).toBe(log)
        expect(store.ids()).toContain('queued')
        expect(seen.flatMap((r) => r.advanced).filter((id) => id === 'queued')).toEqual(['queued'])
        const all = readAll(log)
        expect(all).toHaveLength(3 + 4)
        expect(lsnsOf(all)).toEqual(['20_0', '20_2', '30_1', '50_0'])
        expect(formatOffset(log.head().lastOffset)).toBe('50_0')
        expect(store.durableLsn).toBe(50n)
        // Replays through the writer or the log stay no-ops once it is published.
        expect(w.appendTransaction([change(30n, 1, 3)])).toBe(0)
        expect(log.appendTransaction([change(50n, 0, 4)])).toBe(0)
        expect(lsnsOf(readAll(log))).toEqual(['20_0', '20_2', '30_1', '50_0'])
      })

      it('takes queued transactions after endSnapshot across flushes, and renames only once finish() is called', async () => {
        await advanceOthersTo50()
        const w = store.createShape('drained')
        w.append([row(1)])
        await expect(w.finish()).rejects.toMatchObject({ code: 'invalid_append' })
        w.endSnapshot(SNAPSHOT_END)
        expect(codeOf(() => w.endSnapshot(SNAPSHOT_END))).toBe('invalid_append')
        expect(w.appendTransaction([change(20n, 0, 1)])).toBe(1)
        // Flushes come and go while the caller drains its queue: the log stays unborn and keeps taking old transactions.
        await store.flush()
        await store.flush()
        expect(store.get('drained')).toBeUndefined()
        expect(w.appendTransaction([change(30n, 0, 2)])).toBe(1)
        await expect(w.finish(SNAPSHOT_END)).rejects.toMatchObject({ code: 'invalid_append' })
        const finishing = w.finish()
        expect(w.appendTransaction([change(50n, 0, 3)])).toBe(1)
        const log = await finishing
        expect(lsnsOf(readAll(log))).toEqual(['20_0', '30_0', '50_0'])
        expect(readAll(log)).toHaveLength(2 + 3)
      })

      it('drops an ended snapshot on abort', async () => {
        const w = store.createShape('ended-abort')
        w.append([row(1)])
        w.endSnapshot(SNAPSHOT_END)
        w.appendTransaction([change(70n, 0, 1)])
        await w.abort()
        expect(codeOf(() => w.appendTransaction([change(71n, 0, 1)]))).toBe('invalid_append')
        await store.flush()
        expect(store.get('ended-abort')).toBeUndefined()
        // The id is free again.
        const again = store.createShape('ended-abort')
        await again.abort()
      })

      it('waits for a queued transaction below the watermark that is still open, and takes live ones with more', async () => {
        await advanceOthersTo50()
        const w = store.createShape('parts')
        w.append([row(1)])
        const finishing = w.finish(SNAPSHOT_END)
        let resolved = false
        void finishing.then(() => (resolved = true))
        w.appendTransaction([change(40n, 0, 1), change(40n, 2, 2)], { more: true })
        // One flush cannot publish the log: transaction 40 is below the watermark and not complete.
        await store.flush()
        expect(store.get('parts')).toBeUndefined()
        expect(resolved).toBe(false)
        w.appendTransaction([change(40n, 4, 3)])
        // A live transaction above the watermark, open across the finish.
        w.appendTransaction([change(60n, 0, 4)], { more: true })
        await store.flush()
        const log = await finishing
        expect(lsnsOf(readAll(log))).toEqual(['40_0', '40_2', '40_4'])
        // The writer now behaves as the log: the rest of 60 goes in, and is published once advanced.
        expect(w.appendTransaction([change(60n, 2, 5)])).toBe(1)
        store.advance(60n)
        await store.flush()
        expect(lsnsOf(readAll(log))).toEqual(['40_0', '40_2', '40_4', '60_0', '60_2'])
        expect(log.head().entryCount).toBe(2 + 5)
      })

      it('refuses, once published, new transactions at or below the watermark it was published with', async () => {
        await advanceOthersTo50()
        const w = store.createShape('floor')
        const finishing = w.finish(SNAPSHOT_END)
        w.appendTransaction([change(40n, 0, 1)])
        const log = await finishing
        expect(codeOf(() => w.appendTransaction([change(45n, 0, 2)]))).toBe('invalid_append')
        expect(codeOf(() => log.appendTransaction([change(50n, 0, 2)]))).toBe('invalid_append')
        expect(codeOf(() => log.appendTransaction([change(40n, 0, 1), change(40n, 2, 2)]))).toBe('invalid_append')
        expect(log.appendTransaction([change(51n, 0, 3)])).toBe(1)
        store.advance(51n)
        await store.flush()
        expect(lsnsOf(readAll(log))).toEqual(['40_0', '51_0'])
      })

      it('leaves nothing after an abort that follows live appends', async () => {
        await advanceOthersTo50()
        const w = store.createShape('dropped')
        w.append([row(1)])
        const finishing = w.finish(SNAPSHOT_END)
        w.appendTransaction([change(20n, 0, 1)])
        w.appendTransaction([change(55n, 0, 2)], { more: true })
        await w.abort()
        await expect(finishing).rejects.toMatchObject({ code: 'shape_deleted' })
        expect(codeOf(() => w.appendTransaction([change(60n, 0, 3)]))).toBe('invalid_append')
        store.advance(60n)
        await store.flush()
        expect(store.get('dropped')).toBeUndefined()
        expect(store.ids()).not.toContain('dropped')
        // The id is free again, and the new log holds none of the old one's entries.
        const again = store.createShape('dropped')
        const done = again.finish(SNAPSHOT_END)
        again.appendTransaction([change(30n, 0, 9)])
        expect(lsnsOf(readAll(await done))).toEqual(['30_0'])
      })
    })

    it('returns body bytes that are exactly the JSON lines joined by commas', async () => {
      const rows = [row(1), enc.encode('{"value":{"s":"comma, \\"quote\\" ] [ \\u2028 ünï"}}'), row(3)]
      const log = await makeShape(store, 'bytes', rows)
      const r = log.read(BEFORE_ALL)
      const bytes = readSpans(r)
      r.release()
      const expected = Buffer.concat([...rows, SNAPSHOT_END].flatMap((b) => [Buffer.from(b), Buffer.from(',')]))
      expect(bytes.equals(expected)).toBe(true)
    })
  })
}
