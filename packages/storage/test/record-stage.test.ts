import { describe, expect, it } from 'vitest'
import { ENTRY_RECORD_BYTES } from '../src/format.js'
import { RECORDS_PER_BLOCK, RECORDS_PER_BLOCK_SHIFT, RecordStage } from '../src/file/record-stage.js'
import { TailArena } from '../src/file/tail-arena.js'

/** Writes record i's index into its slot the way file-log does, so the drained bytes can be checked. */
function stageRecords(stage: RecordStage, n: number): void {
  stage.reserve(n)
  for (let i = 0; i < n; i++, stage.count++) {
    const slot = stage.count
    const block = stage.blocks[slot >>> RECORDS_PER_BLOCK_SHIFT]!
    stage.arena.viewOf(block).setUint32(stage.arena.baseOf(block) + (slot & (RECORDS_PER_BLOCK - 1)) * ENTRY_RECORD_BYTES, slot)
  }
}

function drained(stage: RecordStage): number[] {
  const out: number[] = []
  stage.drain((buf, length) => {
    for (let at = 0; at < length; at += ENTRY_RECORD_BYTES) out.push(buf.readUInt32BE(at))
  })
  return out
}

describe('RecordStage', () => {
  it('stages a few records in a small first block, not a pooled 64 KiB one', () => {
    const stage = new RecordStage(new TailArena(0))
    stageRecords(stage, 1)
    expect(stage.blocks).toHaveLength(1)
    expect(stage.arena.sizeOf(stage.blocks[0]!)).toBeLessThan(RECORDS_PER_BLOCK * ENTRY_RECORD_BYTES)
    expect(stage.arena.sizeOf(stage.blocks[0]!)).toBeLessThanOrEqual(8 * ENTRY_RECORD_BYTES)
    expect(drained(stage)).toEqual([0])
    expect(stage.blocks).toHaveLength(0)
  })

  it('keeps every record through growth from small blocks into several full blocks', () => {
    const stage = new RecordStage(new TailArena(0))
    // Uneven steps cross each doubling and the switch to full blocks.
    for (const n of [1, 2, 5, 9, 30, 100, 1000, 3000, 1, RECORDS_PER_BLOCK * 2]) stageRecords(stage, n)
    const total = stage.count
    expect(stage.blocks.every((b) => stage.arena.sizeOf(b) === RECORDS_PER_BLOCK * ENTRY_RECORD_BYTES)).toBe(true)
    expect(drained(stage)).toEqual(Array.from({ length: total }, (_, i) => i))
  })

  it('truncates back into a small block and grows again', () => {
    const stage = new RecordStage(new TailArena(0))
    stageRecords(stage, 20)
    stage.truncate(5)
    stageRecords(stage, 3)
    expect(drained(stage)).toEqual([0, 1, 2, 3, 4, 5, 6, 7])
  })

  it('gives its blocks back to the arena, which hands them out again by size', () => {
    const arena = new TailArena(0)
    const a = new RecordStage(arena)
    stageRecords(a, RECORDS_PER_BLOCK + 1)
    const full = a.blocks[1]!
    a.truncate(0)
    const b = new RecordStage(arena)
    stageRecords(b, 3)
    expect(b.blocks[0]).not.toBe(full)
    stageRecords(b, RECORDS_PER_BLOCK)
    expect(b.blocks).toContain(full)
    expect(drained(b)).toEqual(Array.from({ length: RECORDS_PER_BLOCK + 3 }, (_, i) => i))
  })
})
