/**
 * The in-memory bookkeeping both peer stores share: chunk boundaries, the
 * appended and published heads, and the translation of a request offset into a
 * key range. It is the part of the contract that does not depend on the
 * database; each peer stores and reads the entries themselves in its own way.
 *
 * Keys. A peer stores every entry under a physical key `(tx, op)`, ordered as
 * unsigned integers: live entries under their own offset, snapshot rows under
 * `(0, row number)` because all rows of snapshot chunk n share the virtual
 * offset `0_n` and a key must be unique. `NO_KEY` sorts before every entry.
 *
 * Like the file engine, a peer keeps its sparse chunk index in memory (the
 * chunk ends), so locating a range costs both the same: a binary search here,
 * then one range read in the database.
 */
import type { LogOffset } from '@sluice/protocol'
import { BEFORE_ALL, compareOffsets } from '@sluice/protocol'
import type { LogEntryInput, LogHead } from '@sluice/storage'

export type Key = LogOffset

/** Below every stored key (`-1`, the offset before everything). */
export const NO_KEY: Key = BEFORE_ALL

/** The byte stored after each entry's JSON (the HTTP body separator). */
export const SEPARATOR = 0x2c

export interface PlannedEntry {
  readonly key: Key
  /** The offset readers see: the key for live entries, `0_chunk` for snapshot rows. */
  readonly offset: LogOffset
  /** JSON plus separator: exactly the bytes a reader gets back. */
  readonly stored: Buffer
  readonly chunk: number
  /** Entries in the log up to and including this one. */
  readonly ordinal: number
  /** This entry makes its chunk reach `chunkBytes` (or ends the snapshot). */
  readonly closes: boolean
}

export interface ChunkMark {
  readonly chunk: number
  readonly endKey: Key
  /** Offset of the chunk's last entry: the `nextOffset` of a read that ends here. */
  readonly end: LogOffset
  /** Entries up to and including this chunk. */
  readonly endEntry: number
}

interface Cut {
  readonly entries: number
  readonly chunks: number
  readonly tx: bigint
  readonly lastKey: Key
  readonly last: LogOffset
}

/** What `read(after)` must return, as a key range `(lower, upper]`. */
export interface KeyRange {
  readonly lower: Key
  readonly upper: Key
  readonly nextOffset: LogOffset
  readonly reachedHead: boolean
}

export class PeerError extends Error {
  override readonly name = 'PeerError'
  constructor(
    readonly code: 'invalid_append' | 'shape_exists' | 'store_closed' | 'unsupported_offset',
    message: string,
  ) {
    super(message)
  }
}

export function stored(json: Uint8Array): Buffer {
  const bytes = Buffer.allocUnsafe(json.length + 1)
  bytes.set(json, 0)
  bytes[json.length] = SEPARATOR
  return bytes
}

const EMPTY_CUT: Cut = { entries: 0, chunks: 0, tx: 0n, lastKey: NO_KEY, last: BEFORE_ALL }

export class LogBook {
  readonly chunks: ChunkMark[] = []
  snapshotChunks = 0
  private entries = 0
  private fill = 0
  private snapshotRows = 0n
  private lastKey: Key = NO_KEY
  private last: LogOffset = BEFORE_ALL
  private published: Cut = EMPTY_CUT
  private pending: Cut[] = []

  constructor(
    readonly id: string,
    private readonly chunkBytes: number,
  ) {}

  /** Plans snapshot rows; `end` marks the `snapshot-end` line, which closes the last snapshot chunk. */
  planSnapshot(rows: readonly Uint8Array[], end: boolean): PlannedEntry[] {
    const plan: PlannedEntry[] = []
    let chunk = this.chunks.length
    let fill = this.fill
    let row = this.snapshotRows
    let ordinal = this.entries
    for (let i = 0; i < rows.length; i++) {
      const bytes = stored(rows[i]!)
      fill += bytes.length
      const closes = fill >= this.chunkBytes || (end && i === rows.length - 1)
      plan.push({ key: { tx: 0n, op: row++ }, offset: { tx: 0n, op: BigInt(chunk) }, stored: bytes, chunk, ordinal: ++ordinal, closes })
      if (closes) {
        chunk++
        fill = 0
      }
    }
    return plan
  }

  /**
   * Validates one transaction and plans the entries above the last appended
   * offset (the rest are a replay and are skipped). Empty when nothing is new.
   */
  planAppend(input: readonly LogEntryInput[]): PlannedEntry[] {
    const fresh = input.filter((e) => compareOffsets(e.offset, this.last) > 0)
    if (fresh.length === 0) return []
    const tx = fresh[0]!.offset.tx
    if (tx <= 0n) throw new PeerError('invalid_append', `shape ${this.id}: live entries need a commit LSN above 0`)
    const plan: PlannedEntry[] = []
    let prev = this.last
    let chunk = this.chunks.length
    let fill = this.fill
    let ordinal = this.entries
    for (const e of fresh) {
      if (e.offset.tx !== tx) throw new PeerError('invalid_append', `shape ${this.id}: one append holds one transaction`)
      if (compareOffsets(e.offset, prev) <= 0) throw new PeerError('invalid_append', `shape ${this.id}: offsets must increase`)
      prev = e.offset
      const bytes = stored(e.json)
      fill += bytes.length
      const closes = fill >= this.chunkBytes
      plan.push({ key: e.offset, offset: e.offset, stored: bytes, chunk, ordinal: ++ordinal, closes })
      if (closes) {
        chunk++
        fill = 0
      }
    }
    return plan
  }

  /**
   * Records a plan once the database holds it. `more` (a transaction split over
   * several calls) keeps the transaction unpublishable until its last call.
   */
  apply(plan: readonly PlannedEntry[], snapshot: boolean, more = false): void {
    for (const e of plan) {
      this.entries++
      this.fill += e.stored.length
      this.lastKey = e.key
      this.last = e.offset
      if (snapshot) this.snapshotRows++
      if (e.closes) {
        this.chunks.push({ chunk: e.chunk, endKey: e.key, end: e.offset, endEntry: this.entries })
        this.fill = 0
        if (snapshot) this.snapshotChunks++
      }
    }
    if (!snapshot && !more && plan.length > 0) {
      this.pending.push({ entries: this.entries, chunks: this.chunks.length, tx: plan[0]!.key.tx, lastKey: this.lastKey, last: this.last })
    }
  }

  /** The finished snapshot is published as a whole. */
  publishSnapshot(): void {
    this.published = { entries: this.entries, chunks: this.chunks.length, tx: 0n, lastKey: this.lastKey, last: this.last }
  }

  /** Moves the published head over every appended transaction at or below `lsn`. */
  publish(lsn: bigint): boolean {
    let moved = false
    while (this.pending.length > 0 && this.pending[0]!.tx <= lsn) {
      this.published = this.pending.shift()!
      moved = true
    }
    return moved
  }

  head(): LogHead {
    const p = this.published
    return {
      lastOffset: p.last,
      entryCount: p.entries,
      closedChunks: p.chunks,
      snapshotChunks: Math.min(this.snapshotChunks, p.chunks),
    }
  }

  /** The key range `read(after)` covers, or undefined when nothing published lies after `after`. */
  locate(after: LogOffset): KeyRange | undefined {
    const p = this.published
    if (p.entries === 0) return undefined
    let lower: Key
    if (after.tx < 0n) {
      lower = NO_KEY
    } else if (after.tx === 0n) {
      // Every row of snapshot chunk k has offset 0_k, so "after 0_n" starts past
      // snapshot chunk n; past the last one (or at 0_inf) means the live region.
      const last = this.snapshotChunks - 1
      const n = after.op < BigInt(last) ? Number(after.op) : last
      lower = n >= 0 ? this.chunks[n]!.endKey : NO_KEY
    } else {
      lower = after
    }
    if (compareOffsets(lower, p.lastKey) >= 0) return undefined
    let lo = 0
    let hi = p.chunks
    while (lo < hi) {
      const mid = (lo + hi) >>> 1
      if (compareOffsets(this.chunks[mid]!.endKey, lower) > 0) hi = mid
      else lo = mid + 1
    }
    if (lo < p.chunks) {
      const c = this.chunks[lo]!
      return { lower, upper: c.endKey, nextOffset: c.end, reachedHead: c.endEntry === p.entries }
    }
    return { lower, upper: p.lastKey, nextOffset: p.last, reachedHead: true }
  }
}

/** The answer to a read with nothing after `after`. */
export function emptyRead(after: LogOffset) {
  return { spans: [], byteLength: 0, entryCount: 0, nextOffset: after, reachedHead: true, release() {} }
}
