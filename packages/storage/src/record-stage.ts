/**
 * Entry records waiting for the next flush (for a write-behind log, until its
 * write-back). They live in blocks of the store's tail arena, so a busy log
 * never copies its staged records to grow, an idle one holds no memory, and
 * the blocks are reused rather than left to the garbage collector.
 */
import { ENTRY_RECORD_BYTES } from './format.js'
import type { TailArena } from './tail-arena.js'

// 2048 records a block: one write per 2048 entries, 64 KiB each.
export const RECORDS_PER_BLOCK_SHIFT = 11
export const RECORDS_PER_BLOCK = 1 << RECORDS_PER_BLOCK_SHIFT
const BLOCK_BYTES = RECORDS_PER_BLOCK * ENTRY_RECORD_BYTES

// A log's first block starts this small and doubles up to a full block: with
// 100k logs each staging one record between flushes, full blocks would hold
// 64 KiB per dirty log (gigabytes).
const FIRST_BLOCK_RECORDS = 8

export class RecordStage {
  /** Arena blocks (handles, see tail-arena.ts). */
  readonly blocks: number[] = []
  /** Records staged. Record i sits in blocks[i >> SHIFT] at byte (i & (PER_BLOCK - 1)) * ENTRY_RECORD_BYTES of the block. */
  count = 0

  constructor(readonly arena: TailArena) {}

  /** Makes room for `n` more records. */
  reserve(n: number): void {
    const total = this.count + n
    const first = this.blocks[0]
    const arena = this.arena
    const firstBytes = first === undefined ? 0 : arena.sizeOf(first)
    if (firstBytes < BLOCK_BYTES) {
      const have = firstBytes / ENTRY_RECORD_BYTES
      if (total <= have) return
      let records = RECORDS_PER_BLOCK
      if (total < RECORDS_PER_BLOCK) {
        // Grow the small first block; record indexing stays the same because every index is below one block.
        records = Math.max(have * 2, FIRST_BLOCK_RECORDS)
        while (records < total) records *= 2
      }
      const grown = arena.alloc(records * ENTRY_RECORD_BYTES)
      if (first !== undefined) {
        const from = arena.baseOf(first)
        arena.bufOf(first).copy(arena.bufOf(grown), arena.baseOf(grown), from, from + this.count * ENTRY_RECORD_BYTES)
        arena.release(first)
      }
      this.blocks[0] = grown
      if (total < RECORDS_PER_BLOCK) return
    }
    const need = (total + RECORDS_PER_BLOCK - 1) >>> RECORDS_PER_BLOCK_SHIFT
    while (this.blocks.length < need) this.blocks.push(this.arena.alloc(BLOCK_BYTES))
  }

  /** Keeps the first `count` records and gives unneeded blocks back to the arena. */
  truncate(count: number): void {
    this.count = Math.min(this.count, count)
    const need = (this.count + RECORDS_PER_BLOCK - 1) >>> RECORDS_PER_BLOCK_SHIFT
    while (this.blocks.length > need) this.arena.release(this.blocks.pop()!)
  }

  /** Calls `fn(buf, start, end)` for the byte range of records [from, to) in each block it spans, in order. */
  forEachRange(from: number, to: number, fn: (buf: Buffer, start: number, end: number) => void): void {
    for (let i = from; i < to; ) {
      const inBlock = i & (RECORDS_PER_BLOCK - 1)
      const n = Math.min(to - i, RECORDS_PER_BLOCK - inBlock)
      const h = this.blocks[i >>> RECORDS_PER_BLOCK_SHIFT]!
      const base = this.arena.baseOf(h)
      fn(this.arena.bufOf(h), base + inBlock * ENTRY_RECORD_BYTES, base + (inBlock + n) * ENTRY_RECORD_BYTES)
      i += n
    }
  }

  /** Copies records [from, to) into `out` at `at`. */
  copyOut(from: number, to: number, out: Buffer, at: number): void {
    this.forEachRange(from, to, (buf, start, end) => {
      buf.copy(out, at, start, end)
      at += end - start
    })
  }

  /** The buffer and byte offset of record `i`. */
  locate(i: number): { buf: Buffer; at: number } {
    const h = this.blocks[i >>> RECORDS_PER_BLOCK_SHIFT]!
    return { buf: this.arena.bufOf(h), at: this.arena.baseOf(h) + (i & (RECORDS_PER_BLOCK - 1)) * ENTRY_RECORD_BYTES }
  }

  /** Drops the first `n` records (they reached their file); the rest move to the front. */
  dropFront(n: number): void {
    if (n <= 0) return
    if (n >= this.count) {
      this.truncate(0)
      return
    }
    const rest = this.count - n
    const keep = Buffer.allocUnsafe(rest * ENTRY_RECORD_BYTES)
    this.copyOut(n, this.count, keep, 0)
    this.truncate(0)
    this.reserve(rest)
    this.count = rest
    let at = 0
    this.forEachRange(0, rest, (buf, start, end) => {
      keep.copy(buf, start, at, at + (end - start))
      at += end - start
    })
  }

  /** Calls `write(bytes, length)` for each block in order, then empties the stage. */
  drain(write: (buf: Buffer, length: number) => void): void {
    let left = this.count * ENTRY_RECORD_BYTES
    for (const h of this.blocks) {
      if (left <= 0) break
      const length = Math.min(left, BLOCK_BYTES)
      write(this.arena.block(h), length)
      left -= length
    }
    this.truncate(0)
  }
}
