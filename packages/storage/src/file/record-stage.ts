/**
 * Entry records waiting for the next flush (for a write-behind log, until its
 * write-back). They live in blocks of the store's tail arena, so a busy log
 * never copies its staged records to grow, an idle one holds no memory, and
 * the blocks are reused rather than left to the garbage collector.
 */
import { DOUBLE_FIELD } from './number-fields.js'
import { ENTRY_RECORD_BYTES } from '../format.js'
import { NO_BLOCK } from './tail-arena.js'
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
  /**
   * The first arena block (a handle, see tail-arena.ts; NO_BLOCK when empty),
   * and the full blocks after it: nearly every log stages fewer records than a
   * block holds, and at 100k logs an array per stage is one more object to
   * miss the cache on for every append.
   */
  private first = DOUBLE_FIELD
  private more: number[] | undefined = undefined
  /** Records staged. Record i sits in block i >> SHIFT (`blockAt`) at byte (i & (PER_BLOCK - 1)) * ENTRY_RECORD_BYTES of it. */
  count = 0

  constructor(readonly arena: TailArena) {
    this.first = NO_BLOCK
  }

  /** The blocks in order (a new array: for tests and the rare paths). */
  get blocks(): number[] {
    return this.first === NO_BLOCK ? [] : [this.first, ...(this.more ?? [])]
  }

  /** The block holding record `i`. */
  blockAt(i: number): number {
    const b = i >>> RECORDS_PER_BLOCK_SHIFT
    return b === 0 ? this.first : this.more![b - 1]!
  }

  /** Makes room for `n` more records. */
  reserve(n: number): void {
    const total = this.count + n
    const first = this.first
    const arena = this.arena
    const firstBytes = first === NO_BLOCK ? 0 : arena.sizeOf(first)
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
      if (first !== NO_BLOCK) {
        const from = arena.baseOf(first)
        arena.bufOf(first).copy(arena.bufOf(grown), arena.baseOf(grown), from, from + this.count * ENTRY_RECORD_BYTES)
        arena.release(first)
      }
      this.first = grown
      if (total < RECORDS_PER_BLOCK) return
    }
    const need = (total + RECORDS_PER_BLOCK - 1) >>> RECORDS_PER_BLOCK_SHIFT
    if (need > 1) {
      const more = (this.more ??= [])
      while (more.length < need - 1) more.push(arena.alloc(BLOCK_BYTES))
    }
  }

  /** Keeps the first `count` records and gives unneeded blocks back to the arena. */
  truncate(count: number): void {
    this.count = Math.min(this.count, count)
    const need = (this.count + RECORDS_PER_BLOCK - 1) >>> RECORDS_PER_BLOCK_SHIFT
    const more = this.more
    if (more !== undefined) {
      while (more.length > Math.max(need - 1, 0)) this.arena.release(more.pop()!)
      if (more.length === 0) this.more = undefined
    }
    if (need === 0 && this.first !== NO_BLOCK) {
      this.arena.release(this.first)
      this.first = NO_BLOCK
    }
  }

  /** Calls `fn(buf, start, end)` for the byte range of records [from, to) in each block it spans, in order. */
  forEachRange(from: number, to: number, fn: (buf: Buffer, start: number, end: number) => void): void {
    for (let i = from; i < to; ) {
      const end = this.runEnd(i, to)
      const start = this.byteOf(i)
      fn(this.bufferOf(i), start, start + (end - i) * ENTRY_RECORD_BYTES)
      i = end
    }
  }

  /** Where the run of records from `i` that lie back to back in one block ends (at most `to`). */
  runEnd(i: number, to: number): number {
    return Math.min(to, (i | (RECORDS_PER_BLOCK - 1)) + 1)
  }

  /** The buffer record `i` lies in. */
  bufferOf(i: number): Buffer {
    return this.arena.bufOf(this.blockAt(i))
  }

  /** The byte offset of record `i` in `bufferOf(i)`. */
  byteOf(i: number): number {
    return this.arena.baseOf(this.blockAt(i)) + (i & (RECORDS_PER_BLOCK - 1)) * ENTRY_RECORD_BYTES
  }

  /** Copies records [from, to) into `out` at `at`. */
  copyOut(from: number, to: number, out: Buffer, at: number): void {
    for (let i = from; i < to; ) {
      const end = this.runEnd(i, to)
      const start = this.byteOf(i)
      const bytes = (end - i) * ENTRY_RECORD_BYTES
      this.bufferOf(i).copy(out, at, start, start + bytes)
      at += bytes
      i = end
    }
  }

  /** Drops the first `n` records (they reached their file); the rest move to the front. */
  dropFront(n: number): void {
    if (n <= 0) return
    if (n >= this.count) {
      this.truncate(0)
      return
    }
    const rest = this.count - n
    // In place, run by run from the front: each record lands where one already
    // moved or dropped was, so none is overwritten unread. (A copy through a
    // buffer of its own was a fresh allocation per write-back of a busy log.)
    for (let i = 0; i < rest; ) {
      const from = i + n
      const run = Math.min(this.runEnd(i, rest) - i, this.runEnd(from, this.count) - from)
      const start = this.byteOf(from)
      this.bufferOf(from).copy(this.bufferOf(i), this.byteOf(i), start, start + run * ENTRY_RECORD_BYTES)
      i += run
    }
    this.truncate(rest)
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
