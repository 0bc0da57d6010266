/**
 * The journal's byte format. Pure codecs: bytes in, values out, no I/O.
 *
 * The journal is a redo log of the file writes of every registered shape log:
 * each flush appends one group holding every write and truncation made to
 * those files since the previous flush, in the order they were made, and syncs
 * the journal once instead of every dirty log. Replaying all groups in order
 * over the log files reproduces what the writer's files held at its last
 * completed flush, whatever part of that had reached the disk.
 *
 * Segment file journal/NNNNNNNN.jnl (NNNNNNNN: the generation, decimal,
 * zero-padded, increasing), little-endian. NEVER CHANGE a version's layout.
 *
 *   off size field
 *   0   16   header       magic "SLJN", version FORMAT_VERSION (format.ts)
 *   16  ...  groups, back to back
 *
 * Group:
 *   0   4    length n     bytes of the records
 *   4   4    reserved     zero
 *   8   8    generation   the segment's generation (a group copied into another segment fails)
 *   16  8    sequence     store-wide group number, increasing
 *   24  n    records
 *   24+n 4   check        crc32(bytes 0 .. 24+n) XOR CHECK_SALT
 *
 * Record:
 *   0   1    type         1 write, 2 truncate, 3 tombstone, 4 watermark (version 2)
 *   1   1    file         0 log.dat, 1 entries.idx, 2 chunks.idx (0 otherwise)
 *   2   1    id length L  1..128 (0 for a watermark)
 *   3   L    shape id     ASCII
 *   write:     3+L 8 position, 11+L 4 length m, 15+L m bytes
 *   truncate:  3+L 8 size
 *   tombstone: nothing more; records of this id before it belong to a deleted log
 *   watermark: 3 8 lsn, 11 8 sequence: the durable watermark this group
 *              publishes (the last record of its group)
 *
 * The journal is where the watermark becomes durable: a flush's group carries
 * it, so one fdatasync makes a flush's writes and its watermark durable
 * together. The `watermark` file is rewritten (atomically) only when segments
 * are about to be deleted, at a checkpoint or after replay, with the last
 * watermark of those segments. The store's watermark is the last watermark
 * record of the journal's valid groups in order, or the file's when none has
 * one. The last, not the highest: a group whose sync failed may still be read
 * back whole, and the writer then starts a new segment whose first group
 * publishes the watermark it really kept (with the truncations that undo the
 * failed group's writes).
 *
 * A group is valid only whole: a torn one (a crash during its write) fails its
 * check, and everything from it on in that segment is ignored. A later segment
 * after an invalid group exists only when the writer gave up on the failed
 * group deliberately and started a new segment, so reading goes on there.
 */
import { crc32 } from 'node:zlib'
import { HEADER_BYTES, TWO_32 } from '../format.js'
import type { Watermark } from '../format.js'

export const GROUP_HEADER_BYTES = 24
export const GROUP_CHECK_BYTES = 4
export const RECORD_WRITE = 1
export const RECORD_TRUNCATE = 2
export const RECORD_TOMBSTONE = 3
export const RECORD_WATERMARK = 4

export const JOURNAL_FILES = ['log.dat', 'entries.idx', 'chunks.idx'] as const
export const FILE_DATA = 0
export const FILE_ENTRIES = 1
export const FILE_CHUNKS = 2
export type JournalFile = 0 | 1 | 2

// Same salt as the other files' checks (format.ts): an all-zero group fails.
const CHECK_SALT = 0x5a17ce01
// Any length the header can hold: a flush is not capped (one transaction fanned out to many shapes can
// pass a gigabyte), and a group the writer acknowledged must read back. A length past the segment's end
// is a torn group all the same.
const MAX_GROUP_BYTES = 0xffffffff

export function segmentName(generation: number): string {
  return `${String(generation).padStart(8, '0')}.jnl`
}

/** The generation of a segment file name, or undefined for any other name. */
export function segmentGeneration(name: string): number | undefined {
  const m = /^(\d{8,})\.jnl$/.exec(name)
  return m ? Number(m[1]) : undefined
}

export function groupCheck(buf: Uint8Array, start: number, end: number): number {
  return (crc32(buf.subarray(start, end)) ^ CHECK_SALT) >>> 0
}

/** Up to this many bytes a copy into a chunk is a loop (see `put`): below it a loop beats `set` through a view. */
const SMALL_COPY_BYTES = 48

/**
 * Builds the records of one group in a list of fixed-size chunks, the first
 * with room for the header in front, so sealing writes the header in place and
 * the group goes out as the chunks' filled parts, back to back. Chunks, not one
 * growing buffer: a flush that fans one transaction out to a thousand logs
 * records tens of MiB, and doubling a buffer to hold that copied every byte
 * again per doubling and touched fresh pages each time. Chunks are kept across
 * groups, up to KEEP_CHUNK_BYTES.
 */
export class GroupBuilder {
  /** chunks[0..index) are full; chunks[index] is filled up to `at`. */
  private readonly chunks: Buffer[]
  private index = 0
  private at = GROUP_HEADER_BYTES
  /** Bytes of the records so far. */
  private bytes = 0
  records = 0
  /**
   * Where the record head being built lies: straight in the current chunk
   * where it fits (nearly always), else in the scratch, copied in like any
   * other bytes (a head may straddle two chunks). A shape id makes a write's
   * head ~50 bytes, past what `put` copies by hand, so copying every head from
   * the scratch cost a view per record (two per append).
   */
  private readonly headScratch = Buffer.allocUnsafe(3 + 255 + 16)
  private headBuf: Buffer = this.headScratch
  private headStart = 0
  private headEnd = 0

  constructor(private readonly chunkBytes = 1024 * 1024) {
    if (chunkBytes < GROUP_HEADER_BYTES + GROUP_CHECK_BYTES) throw new RangeError(`group chunks need at least ${GROUP_HEADER_BYTES + GROUP_CHECK_BYTES} bytes`)
    this.chunks = [Buffer.allocUnsafeSlow(chunkBytes)]
  }

  private put(bytes: Uint8Array, offset: number, length: number): void {
    while (length > 0) {
      let chunk = this.chunks[this.index]!
      if (this.at === chunk.length) {
        this.index++
        chunk = this.chunks[this.index] ??= Buffer.allocUnsafeSlow(this.chunkBytes)
        this.at = 0
      }
      const n = Math.min(length, chunk.length - this.at)
      if (n <= SMALL_COPY_BYTES) {
        // Record heads and a log's few index records: a view for `set` would
        // be an object per copy, and copying these few bytes by hand is faster.
        const at = this.at
        for (let i = 0; i < n; i++) chunk[at + i] = bytes[offset + i]!
      } else {
        chunk.set(n === bytes.length && offset === 0 ? bytes : bytes.subarray(offset, offset + n), this.at)
      }
      this.at += n
      offset += n
      length -= n
    }
  }

  /**
   * Starts a record's head (in `headBuf`, see there) with `fieldBytes` of
   * fields after the id; returns where they go. `id` is a shape id (ASCII, at
   * most 128 characters: `checkShapeId`), one byte per character. A string,
   * not bytes: the log's id string is the one object the append path reaches
   * it through, where a Buffer was two (the view, then its memory), each a
   * cache miss per append with 100k logs.
   */
  private head(type: number, file: number, id: string, fieldBytes: number): number {
    const n = id.length
    const chunk = this.chunks[this.index]!
    let h: Buffer = this.headScratch
    let p = 0
    if (this.at + 3 + n + fieldBytes <= chunk.length) {
      h = chunk
      p = this.at
    }
    this.headBuf = h
    this.headStart = p
    h[p] = type
    h[p + 1] = file
    h[p + 2] = n
    p += 3
    for (let i = 0; i < n; i++) h[p + i] = id.charCodeAt(i)
    this.records++
    this.headEnd = p + n + fieldBytes
    return p + n
  }

  /** The head `head` started, its fields filled in: into the group with it. */
  private putHead(): void {
    const length = this.headEnd - this.headStart
    if (this.headBuf === this.headScratch) this.put(this.headScratch, 0, length)
    else this.at += length
    this.bytes += length
  }

  write(id: string, file: JournalFile, position: number, bytes: Uint8Array, offset: number, length: number): void {
    const at = this.head(RECORD_WRITE, file, id, 12)
    const h = this.headBuf
    writeUint64(h, position, at)
    putU32(h, length, at + 8)
    this.putHead()
    this.put(bytes, offset, length)
    this.bytes += length
  }

  truncate(id: string, file: JournalFile, size: number): void {
    const at = this.head(RECORD_TRUNCATE, file, id, 8)
    writeUint64(this.headBuf, size, at)
    this.putHead()
  }

  tombstone(id: string): void {
    this.head(RECORD_TOMBSTONE, 0, id, 0)
    this.putHead()
  }

  watermark(lsn: bigint, sequence: bigint): void {
    const at = this.head(RECORD_WATERMARK, 0, NO_ID, 16)
    const h = this.headBuf
    h.writeBigUInt64LE(lsn, at)
    h.writeBigUInt64LE(sequence, at + 8)
    this.putHead()
  }

  get empty(): boolean {
    return this.records === 0
  }

  /** Bytes of the chunks held: the group being built and those kept for the next ones. */
  get heldBytes(): number {
    return this.chunks.length * this.chunkBytes
  }

  /**
   * Between groups (nothing recorded since the last reset), lets go of every
   * chunk but the first: those a burst grew and `reset` kept for the next
   * groups. For a process gone idle that gives its memory back.
   */
  shed(): void {
    if (this.records === 0 && this.index === 0) this.chunks.length = 1
  }

  /**
   * Writes header and check; returns the group's bytes as pieces to write back
   * to back (valid until the next reset).
   */
  seal(generation: number, sequence: number): Buffer[] {
    const b = this.chunks[0]!
    b.writeUInt32LE(this.bytes, 0)
    b.writeUInt32LE(0, 4)
    b.writeBigUInt64LE(BigInt(generation), 8)
    b.writeBigUInt64LE(BigInt(sequence), 16)
    let crc = 0
    for (const piece of this.pieces()) crc = crc32(piece, crc)
    const check = this.headScratch
    check.writeUInt32LE((crc ^ CHECK_SALT) >>> 0, 0)
    this.put(check, 0, GROUP_CHECK_BYTES)
    return this.pieces()
  }

  private pieces(): Buffer[] {
    const pieces: Buffer[] = []
    for (let i = 0; i <= this.index; i++) pieces.push(this.chunks[i]!.subarray(0, i < this.index ? this.chunks[i]!.length : this.at))
    return pieces
  }

  /** Starts a new group; chunks past KEEP_CHUNK_BYTES (grown by one huge flush) are not kept. */
  reset(): void {
    this.index = 0
    this.at = GROUP_HEADER_BYTES
    this.bytes = 0
    this.records = 0
    const keep = Math.max(1, Math.floor(KEEP_CHUNK_BYTES / this.chunkBytes))
    if (this.chunks.length > keep) this.chunks.length = keep
  }
}

/**
 * A non-negative integer (a file position: below 2^53) as 8 little-endian
 * bytes, stored by hand: Buffer's writeUIntLE allocated on every call, and
 * this runs for every record of every append.
 */
function writeUint64(buf: Buffer, value: number, at: number): void {
  const lo = value % TWO_32
  const hi = (value - lo) / TWO_32
  putU32(buf, lo, at)
  putU32(buf, hi, at + 4)
}

/** A u32 (given as a number below 2^32) as 4 little-endian bytes. */
function putU32(buf: Buffer, value: number, at: number): void {
  buf[at] = value & 0xff
  buf[at + 1] = (value >>> 8) & 0xff
  buf[at + 2] = (value >>> 16) & 0xff
  buf[at + 3] = value >>> 24
}

// Enough for the groups of a busy stream; more would be held forever for one huge flush.
const KEEP_CHUNK_BYTES = 16 * 1024 * 1024

const NO_ID = ''

export type JournalRecord =
  | { readonly type: 1; readonly id: string; readonly file: JournalFile; readonly position: number; readonly bytes: Buffer }
  | { readonly type: 2; readonly id: string; readonly file: JournalFile; readonly size: number }
  | { readonly type: 3; readonly id: string }

export interface ParsedGroup {
  readonly sequence: number
  /** Writes, truncations and tombstones (the watermark record is `watermark`). */
  readonly records: JournalRecord[]
  readonly watermark: Watermark | undefined
  /** Position just past the group in its segment. */
  readonly end: number
}

/**
 * Parses the group at `at` of a segment's bytes `buf`; undefined when none
 * starts there (end of the bytes, a torn or damaged group). Record bytes are
 * views into `buf`.
 */
export function parseGroup(buf: Buffer, at: number, generation: number): ParsedGroup | undefined {
  if (at + GROUP_HEADER_BYTES + GROUP_CHECK_BYTES > buf.length) return undefined
  const n = buf.readUInt32LE(at)
  if (n > MAX_GROUP_BYTES || buf.readUInt32LE(at + 4) !== 0) return undefined
  const end = at + GROUP_HEADER_BYTES + n
  if (end + GROUP_CHECK_BYTES > buf.length) return undefined
  if (buf.readUInt32LE(end) !== groupCheck(buf, at, end)) return undefined
  if (buf.readBigUInt64LE(at + 8) !== BigInt(generation)) return undefined
  const sequence = Number(buf.readBigUInt64LE(at + 16))
  const records: JournalRecord[] = []
  let watermark: Watermark | undefined
  let p = at + GROUP_HEADER_BYTES
  while (p < end) {
    if (p + 3 > end) return undefined
    const type = buf[p]!
    const file = buf[p + 1]! as JournalFile
    const idLength = buf[p + 2]!
    const id = buf.toString('latin1', p + 3, p + 3 + idLength)
    p += 3 + idLength
    if (type === RECORD_WRITE) {
      if (p + 12 > end || file > 2) return undefined
      const position = buf.readUIntLE(p, 6) + buf.readUInt16LE(p + 6) * 2 ** 48
      const length = buf.readUInt32LE(p + 8)
      if (p + 12 + length > end) return undefined
      records.push({ type, id, file, position, bytes: buf.subarray(p + 12, p + 12 + length) })
      p += 12 + length
    } else if (type === RECORD_TRUNCATE) {
      if (p + 8 > end || file > 2) return undefined
      records.push({ type, id, file, size: buf.readUIntLE(p, 6) + buf.readUInt16LE(p + 6) * 2 ** 48 })
      p += 8
    } else if (type === RECORD_TOMBSTONE) {
      records.push({ type, id })
    } else if (type === RECORD_WATERMARK) {
      if (p + 16 > end || idLength !== 0) return undefined
      watermark = { lsn: buf.readBigUInt64LE(p), sequence: buf.readBigUInt64LE(p + 8) }
      p += 16
    } else {
      return undefined
    }
  }
  return { sequence, records, watermark, end: end + GROUP_CHECK_BYTES }
}

/** Every valid group of a segment from `from` on, stopping at the first invalid one. */
export function parseSegment(buf: Buffer, generation: number, from = HEADER_BYTES): { groups: ParsedGroup[]; end: number } {
  const groups: ParsedGroup[] = []
  let at = from
  for (;;) {
    const g = parseGroup(buf, at, generation)
    if (!g) return { groups, end: at }
    groups.push(g)
    at = g.end
  }
}
