/**
 * Property test: random sequences of shape creation, appends (some crossing
 * chunk boundaries, some replays), advances, flushes, reads at random offsets
 * (real, made-up and mid-chunk) and reopenings, run against the file engine and
 * the in-memory reference side by side. Every read must agree byte for byte.
 */
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import fc from 'fast-check'
import { BEFORE_ALL, LAST_VIRTUAL, formatOffset } from '@sluice/protocol'
import type { LogOffset } from '@sluice/protocol'
import { describe, expect, it } from 'vitest'
import { MemoryLogStore, openFileLogStore, readSpans } from '../src/index.js'
import type { FileLogStore, LogEntryInput, ShapeLogStore } from '../src/index.js'

const RUNS = process.env.SOAK ? 2000 : 100
const enc = new TextEncoder()

type Action =
  | { kind: 'create'; shape: number; rows: number[] }
  | { kind: 'append'; shape: number; sizes: number[]; replayBack: number }
  | { kind: 'advance'; back: number }
  | { kind: 'flush' }
  | { kind: 'read'; shape: number; pick: number; mode: 'known' | 'made-up' | 'before' | 'virtual' }
  | { kind: 'reopen' }
  | { kind: 'delete'; shape: number }

const action: fc.Arbitrary<Action> = fc.oneof(
  { weight: 2, arbitrary: fc.record({ kind: fc.constant('create' as const), shape: fc.nat(3), rows: fc.array(fc.nat(300), { maxLength: 25 }) }) },
  {
    weight: 6,
    arbitrary: fc.record({
      kind: fc.constant('append' as const),
      shape: fc.nat(3),
      sizes: fc.array(fc.nat(400), { minLength: 1, maxLength: 12 }),
      replayBack: fc.oneof(fc.constant(0), fc.constant(0), fc.nat(3)),
    }),
  },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant('advance' as const), back: fc.oneof(fc.constant(0), fc.nat(4)) }) },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant('flush' as const) }) },
  {
    weight: 6,
    arbitrary: fc.record({
      kind: fc.constant('read' as const),
      shape: fc.nat(3),
      pick: fc.nat(),
      mode: fc.constantFrom('known' as const, 'made-up' as const, 'before' as const, 'virtual' as const),
    }),
  },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('reopen' as const) }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('delete' as const), shape: fc.nat(3) }) },
)

function line(shape: number, tx: bigint, op: number, size: number): Uint8Array {
  return enc.encode(JSON.stringify({ s: shape, tx: String(tx), op, pad: 'p'.repeat(size) }))
}

describe('file engine against the in-memory reference', () => {
  it('agrees on every read over random histories', async () => {
    let histories = 0
    let reads = 0
    await fc.assert(
      fc.asyncProperty(
        fc.array(fc.array(fc.nat(300), { maxLength: 25 }), { minLength: 4, maxLength: 4 }),
        fc.array(action, { minLength: 20, maxLength: 80 }),
        fc.constantFrom(256, 1024, 4096),
        async (initial, tail, chunkBytes) => {
        const actions: Action[] = [...initial.map((rows, shape): Action => ({ kind: 'create', shape, rows })), ...tail]
        const dir = mkdtempSync(join(tmpdir(), 'sluice-model-'))
        const memory = new MemoryLogStore({ chunkBytes })
        let file: FileLogStore = await openFileLogStore({ dir, chunkBytes, flushIntervalMs: 60_000, flushBytes: 1 << 30 })
        let lsn = 0n
        // Per shape: every offset appended (for picking real offsets) and the txns for replays.
        const offsets = new Map<number, LogOffset[]>()
        const txns = new Map<number, LogEntryInput[][]>()
        const live = new Set<number>()
        try {
          for (const a of actions) {
            if (process.env.DEBUG_MODEL) console.log(JSON.stringify(a), 'lsn', lsn)
            switch (a.kind) {
              case 'create': {
                if (live.has(a.shape)) break
                const rows = a.rows.map((size, i) => line(a.shape, 0n, i, size))
                for (const store of [memory, file] as ShapeLogStore[]) {
                  const w = store.createShape(`s${a.shape}`)
                  w.append(rows)
                  await w.finish(enc.encode('{"headers":{"control":"snapshot-end"}}'))
                }
                live.add(a.shape)
                offsets.set(a.shape, [])
                txns.set(a.shape, [])
                break
              }
              case 'append': {
                if (!live.has(a.shape)) break
                const past = txns.get(a.shape)!
                let entries: LogEntryInput[]
                if (a.replayBack > 0 && past.length >= a.replayBack) {
                  entries = past[past.length - a.replayBack]!
                } else {
                  lsn += BigInt(1 + (a.sizes[0]! % 3))
                  entries = a.sizes.map((size, i) => ({ offset: { tx: lsn, op: BigInt(i * 2) }, json: line(a.shape, lsn, i * 2, size) }))
                  past.push(entries)
                  offsets.get(a.shape)!.push(...entries.map((e) => e.offset))
                }
                const m = memory.get(`s${a.shape}`)!.appendTransaction(entries)
                const f = file.get(`s${a.shape}`)!.appendTransaction(entries)
                expect(f).toBe(m)
                break
              }
              case 'advance': {
                const to = lsn - BigInt(a.back)
                memory.advance(to)
                file.advance(to)
                break
              }
              case 'flush': {
                const [m, f] = [await memory.flush(), await file.flush()]
                expect(f.durableLsn).toBe(m.durableLsn)
                expect([...f.advanced].sort()).toEqual([...m.advanced].sort())
                break
              }
              case 'read': {
                if (!live.has(a.shape)) break
                const known = offsets.get(a.shape)!
                let after: LogOffset
                if (a.mode === 'before' || known.length === 0) after = BEFORE_ALL
                else if (a.mode === 'virtual') after = a.pick % 2 ? LAST_VIRTUAL : { tx: 0n, op: BigInt(a.pick % 4) }
                else {
                  const base = known[a.pick % known.length]!
                  after = a.mode === 'known' ? base : { tx: base.tx, op: base.op + 1n }
                }
                const mr = memory.get(`s${a.shape}`)!.read(after)
                const fr = file.get(`s${a.shape}`)!.read(after)
                const label = `s${a.shape} after ${formatOffset(after)}`
                expect([label, formatOffset(fr.nextOffset), fr.entryCount, fr.reachedHead]).toEqual([
                  label,
                  formatOffset(mr.nextOffset),
                  mr.entryCount,
                  mr.reachedHead,
                ])
                expect(readSpans(fr).equals(readSpans(mr))).toBe(true)
                expect(file.get(`s${a.shape}`)!.head()).toEqual(memory.get(`s${a.shape}`)!.head())
                fr.release()
                mr.release()
                reads++
                break
              }
              case 'reopen': {
                await file.close()
                await memory.flush()
                memory.restart()
                file = await openFileLogStore({ dir, chunkBytes, flushIntervalMs: 60_000, flushBytes: 1 << 30 })
                expect(file.durableLsn).toBe(memory.durableLsn)
                // Replays re-append what the restart cut; keep only durable history for picking.
                for (const s of live) {
                  const head = memory.get(`s${s}`)!.head()
                  offsets.set(s, offsets.get(s)!.filter((o) => o.tx <= head.lastOffset.tx))
                  txns.set(s, txns.get(s)!.filter((t) => t[0]!.offset.tx <= head.lastOffset.tx))
                }
                expect(file.ids().sort()).toEqual(memory.ids().sort())
                break
              }
              case 'delete': {
                if (!live.has(a.shape)) break
                expect(await file.deleteShape(`s${a.shape}`)).toBe(await memory.deleteShape(`s${a.shape}`))
                live.delete(a.shape)
                break
              }
            }
          }
          histories++
        } finally {
          await file.close().catch(() => undefined)
          rmSync(dir, { recursive: true, force: true })
        }
        },
      ),
      {
        numRuns: RUNS,
        endOnFailure: true,
        // Replay a reported failure with SEED=<seed> PATH_=<path>.
        ...(process.env.SEED ? { seed: Number(process.env.SEED), path: process.env.PATH_ ?? '' } : {}),
      },
    )
    console.log(`model test: ${histories} histories, ${reads} reads compared`)
    expect(histories).toBeGreaterThanOrEqual(RUNS)
  }, RUNS * 1_000)
})
