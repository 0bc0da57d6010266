import type { LogEntryInput } from '@sluice/storage'
import type { QueueCodec } from './spill-queue.js'

/**
 * A piece of one transaction's shape-log entries, as the router queues it for
 * a shape whose initial snapshot is not finished (structurally the router's
 * `TransactionPart`): `more` says further parts of the same transaction follow,
 * as `appendTransaction`'s `more` option.
 */
export interface TransactionPart {
  /** Commit LSN of the transaction. */
  readonly lsn: bigint
  /** 32-bit top-level xid (snapshot stitching decides visibility by it). */
  readonly xid: number
  /** The entries, each with its offset (normally `<lsn>_<op>`) and JSON line (no separator). */
  readonly entries: readonly LogEntryInput[]
  readonly more: boolean
}

/**
 * Item bytes of `transactionPartCodec` (little-endian):
 *
 *   off size field
 *   0   1    version      TRANSACTION_PART_VERSION (1)
 *   1   1    flags        bit 0 more
 *                         bit 1 entries carry their own tx (else every entry's tx is `lsn`)
 *                         other bits zero
 *   2   8    lsn          u64
 *   10  4    xid          u32
 *   14  4    count        number of entries
 *   18       entries, back to back:
 *            [8  tx      u64]  only with flags bit 1
 *            8   op      u64
 *            4   length  n
 *            n   json    the JSON line
 *
 * Entries of a live transaction all sit at `<lsn>_<op>`, so the usual entry
 * costs 12 bytes besides its JSON. A decoded part's `json` arrays are views of
 * one copy of the item's bytes (its own ArrayBuffer, never a pooled slab).
 */
export const TRANSACTION_PART_VERSION = 1

const HEADER_BYTES = 18
const FLAG_MORE = 1
const FLAG_OWN_TX = 2
const U64_MAX = (1n << 64n) - 1n

function checkU64(name: string, value: bigint): void {
  if (typeof value !== 'bigint' || value < 0n || value > U64_MAX) throw new RangeError(`${name} ${String(value)} is not a u64`)
}

export const transactionPartCodec: QueueCodec<TransactionPart> = {
  encode(part: TransactionPart): Uint8Array {
    checkU64('lsn', part.lsn)
    if (!Number.isInteger(part.xid) || part.xid < 0 || part.xid > 0xffffffff) throw new RangeError(`xid ${part.xid} is not a u32`)
    let ownTx = false
    let size = HEADER_BYTES
    for (const { offset, json } of part.entries) {
      checkU64('op', offset.op)
      if (offset.tx !== part.lsn) {
        checkU64('tx', offset.tx)
        ownTx = true
      }
      size += 12 + json.byteLength
    }
    if (ownTx) size += 8 * part.entries.length
    const out = Buffer.allocUnsafe(size)
    out[0] = TRANSACTION_PART_VERSION
    out[1] = (part.more ? FLAG_MORE : 0) | (ownTx ? FLAG_OWN_TX : 0)
    out.writeBigUInt64LE(part.lsn, 2)
    out.writeUInt32LE(part.xid, 10)
    out.writeUInt32LE(part.entries.length, 14)
    let pos = HEADER_BYTES
    for (const { offset, json } of part.entries) {
      if (ownTx) {
        out.writeBigUInt64LE(offset.tx, pos)
        pos += 8
      }
      out.writeBigUInt64LE(offset.op, pos)
      out.writeUInt32LE(json.byteLength, pos + 8)
      out.set(json, pos + 12)
      pos += 12 + json.byteLength
    }
    return out
  },

  decode(bytes: Uint8Array): TransactionPart {
    const copy = new Uint8Array(bytes)
    const buf = Buffer.from(copy.buffer, copy.byteOffset, copy.byteLength)
    if (buf.length < HEADER_BYTES) throw new RangeError(`a transaction part of ${buf.length} bytes`)
    if (buf[0] !== TRANSACTION_PART_VERSION) throw new RangeError(`transaction part version ${buf[0]}`)
    const flags = buf[1]!
    if (flags > (FLAG_MORE | FLAG_OWN_TX)) throw new RangeError(`transaction part flags ${flags}`)
    const ownTx = (flags & FLAG_OWN_TX) !== 0
    const lsn = buf.readBigUInt64LE(2)
    const xid = buf.readUInt32LE(10)
    const count = buf.readUInt32LE(14)
    const entryHeader = ownTx ? 20 : 12
    if (count > (buf.length - HEADER_BYTES) / entryHeader) throw new RangeError(`${count} entries in ${buf.length} bytes`)
    const entries: LogEntryInput[] = new Array<LogEntryInput>(count)
    let pos = HEADER_BYTES
    for (let i = 0; i < count; i++) {
      if (pos + entryHeader > buf.length) throw new RangeError('a transaction part ends inside an entry')
      let tx = lsn
      if (ownTx) {
        tx = buf.readBigUInt64LE(pos)
        pos += 8
      }
      const op = buf.readBigUInt64LE(pos)
      const length = buf.readUInt32LE(pos + 8)
      const start = pos + 12
      if (start + length > buf.length) throw new RangeError('a transaction part ends inside an entry')
      entries[i] = { offset: { tx, op }, json: copy.subarray(start, start + length) }
      pos = start + length
    }
    if (pos !== buf.length) throw new RangeError(`${buf.length - pos} stray bytes after a transaction part`)
    return { lsn, xid, entries, more: (flags & FLAG_MORE) !== 0 }
  },

  size(part: TransactionPart): number {
    // Object headers (part, entries array, entry and offset objects, bigints)
    // plus the JSON bytes, counted even when shared with other shapes' queues:
    // the queue keeps them alive.
    let size = 96
    for (const entry of part.entries) size += 112 + entry.json.byteLength
    return size
  },
}
