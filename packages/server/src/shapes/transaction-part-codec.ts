import type { QueueCodec } from '../replication/index.js'
import type { TransactionPart } from './route-contracts.js'

/**
 * Item bytes of `transactionPartCodec` (little-endian):
 *
 *   off size field
 *   0   1    version      TRANSACTION_PART_VERSION (2)
 *   1   1    flags        bit 0 more; other bits zero
 *   2   8    lsn          u64
 *   10  4    xid          u32
 *   14  4    count        number of entries
 *   18       entries, back to back:
 *            8   op      u64, below 2^53
 *            4   length  n
 *            n   json    the JSON line
 *
 * Spill files do not outlive the process (a restart wipes the directory), so
 * the version changes with the format and an old one is not read. A decoded
 * part's `jsons` are views of one copy of the item's bytes (its own
 * ArrayBuffer, never a pooled slab).
 */
export const TRANSACTION_PART_VERSION = 2

const HEADER_BYTES = 18
const ENTRY_HEADER_BYTES = 12
const FLAG_MORE = 1
const U64_MAX = (1n << 64n) - 1n
const TWO_32 = 2 ** 32

export const transactionPartCodec: QueueCodec<TransactionPart> = {
  encode(part: TransactionPart): Uint8Array {
    if (typeof part.lsn !== 'bigint' || part.lsn < 0n || part.lsn > U64_MAX) throw new RangeError(`lsn ${String(part.lsn)} is not a u64`)
    if (!Number.isInteger(part.xid) || part.xid < 0 || part.xid > 0xffffffff) throw new RangeError(`xid ${part.xid} is not a u32`)
    const { ops, jsons, count } = part
    let size = HEADER_BYTES
    for (let i = 0; i < count; i++) {
      const op = ops[i]!
      if (!Number.isSafeInteger(op) || op < 0) throw new RangeError(`op ${op} is not an integer in [0, 2^53)`)
      size += ENTRY_HEADER_BYTES + jsons[i]!.byteLength
    }
    const out = Buffer.allocUnsafe(size)
    out[0] = TRANSACTION_PART_VERSION
    out[1] = part.more ? FLAG_MORE : 0
    out.writeBigUInt64LE(part.lsn, 2)
    out.writeUInt32LE(part.xid, 10)
    out.writeUInt32LE(count, 14)
    let pos = HEADER_BYTES
    for (let i = 0; i < count; i++) {
      const op = ops[i]!
      const json = jsons[i]!
      out.writeUInt32LE(op % TWO_32, pos)
      out.writeUInt32LE(Math.floor(op / TWO_32), pos + 4)
      out.writeUInt32LE(json.byteLength, pos + 8)
      out.set(json, pos + ENTRY_HEADER_BYTES)
      pos += ENTRY_HEADER_BYTES + json.byteLength
    }
    return out
  },

  decode(bytes: Uint8Array): TransactionPart {
    const copy = new Uint8Array(bytes)
    const buf = Buffer.from(copy.buffer, copy.byteOffset, copy.byteLength)
    if (buf.length < HEADER_BYTES) throw new RangeError(`a transaction part of ${buf.length} bytes`)
    if (buf[0] !== TRANSACTION_PART_VERSION) throw new RangeError(`transaction part version ${buf[0]}`)
    const flags = buf[1]!
    if (flags > FLAG_MORE) throw new RangeError(`transaction part flags ${flags}`)
    const lsn = buf.readBigUInt64LE(2)
    const xid = buf.readUInt32LE(10)
    const count = buf.readUInt32LE(14)
    if (count > (buf.length - HEADER_BYTES) / ENTRY_HEADER_BYTES) throw new RangeError(`${count} entries in ${buf.length} bytes`)
    const ops = new Array<number>(count)
    const jsons = new Array<Uint8Array>(count)
    let pos = HEADER_BYTES
    for (let i = 0; i < count; i++) {
      if (pos + ENTRY_HEADER_BYTES > buf.length) throw new RangeError('a transaction part ends inside an entry')
      const high = buf.readUInt32LE(pos + 4)
      if (high >= 2 ** 21) throw new RangeError('an op at or above 2^53 in a transaction part')
      ops[i] = high * TWO_32 + buf.readUInt32LE(pos)
      const length = buf.readUInt32LE(pos + 8)
      const start = pos + ENTRY_HEADER_BYTES
      if (start + length > buf.length) throw new RangeError('a transaction part ends inside an entry')
      jsons[i] = copy.subarray(start, start + length)
      pos = start + length
    }
    if (pos !== buf.length) throw new RangeError(`${buf.length - pos} stray bytes after a transaction part`)
    return { lsn, xid, ops, jsons, count, more: (flags & FLAG_MORE) !== 0 }
  },

  size(part: TransactionPart): number {
    // Object headers (the part, its two arrays, a view per line) plus the
    // JSON bytes, counted even when shared with other shapes' queues: the
    // queue keeps them alive.
    let size = 128
    for (let i = 0; i < part.count; i++) size += 96 + part.jsons[i]!.byteLength
    return size
  },
}
