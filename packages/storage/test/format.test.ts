import { randomBytes } from 'node:crypto'
import { crc32 as zlibCrc32 } from 'node:zlib'
import { describe, expect, it } from 'vitest'
import {
  CHUNK_RECORD_BYTES,
  ENTRY_RECORD_BYTES,
  checkHeader,
  crc32,
  decodeMeta,
  decodeWatermark,
  encodeHeader,
  encodeMeta,
  encodeWatermark,
  joinU64,
  readChunkRecord,
  readEntryRecord,
  small,
  splitU64,
  writeChunkRecord,
  writeEntryRecord,
  writeEntryRecordFast,
} from '../src/format.js'

describe('on-disk formats', () => {
  it('computes the same CRC-32 as zlib', () => {
    for (const size of [0, 1, 27, 28, 44, 100, 4096]) {
      const bytes = randomBytes(size)
      expect(crc32(bytes)).toBe(zlibCrc32(bytes))
    }
  })

  it('round-trips entry records, and the fast writer matches the plain one byte for byte', () => {
    const cases = [
      { tx: 1n, op: 0n, end: 17, flags: 1 },
      { tx: 0n, op: 12n, end: 2 ** 40 + 3, flags: 2 },
      { tx: (1n << 64n) - 1n, op: BigInt(Number.MAX_SAFE_INTEGER), end: Number.MAX_SAFE_INTEGER, flags: 3 },
      { tx: 0x1_0000_0000n, op: 0x1_0000_0001n, end: 2 ** 32, flags: 0 },
      { tx: 0x8000_0000n, op: 1n, end: 2 ** 31, flags: 1 },
      { tx: 0x5_ffff_ffffn, op: 2n, end: 40, flags: 1 },
    ]
    for (const r of cases) {
      const plain = Buffer.alloc(ENTRY_RECORD_BYTES + 8)
      writeEntryRecord(plain, 8, r)
      expect(readEntryRecord(plain, 8)).toEqual(r)
      const fast = Buffer.alloc(ENTRY_RECORD_BYTES + 8)
      const { lo, hi } = splitU64(r.tx)
      writeEntryRecordFast(fast, new DataView(fast.buffer, fast.byteOffset, fast.length), 8, lo, hi, Number(r.op), r.end, r.flags)
      expect(fast.equals(plain)).toBe(true)
      // The low half as a log keeps it (signed: the same bits) writes the same record and joins to the same LSN.
      const signed = Buffer.alloc(ENTRY_RECORD_BYTES + 8)
      writeEntryRecordFast(signed, new DataView(signed.buffer, signed.byteOffset, signed.length), 8, lo | 0, hi, Number(r.op), r.end, r.flags)
      expect(signed.equals(plain)).toBe(true)
      expect(joinU64(hi, lo | 0)).toBe(r.tx)
      expect(joinU64(hi, lo)).toBe(r.tx)
    }
  })

  it('rejects zeroed, torn and bit-flipped records', () => {
    expect(readEntryRecord(Buffer.alloc(ENTRY_RECORD_BYTES), 0)).toBeUndefined()
    expect(readChunkRecord(Buffer.alloc(CHUNK_RECORD_BYTES), 0)).toBeUndefined()
    const buf = Buffer.alloc(ENTRY_RECORD_BYTES)
    writeEntryRecord(buf, 0, { tx: 5n, op: 2n, end: 100, flags: 1 })
    for (let bit = 0; bit < ENTRY_RECORD_BYTES * 8; bit += 7) {
      const copy = Buffer.from(buf)
      copy[bit >> 3]! ^= 1 << (bit & 7)
      expect(readEntryRecord(copy, 0)).toBeUndefined()
    }
  })

  it('round-trips chunk records, the watermark and meta', () => {
    const buf = Buffer.alloc(CHUNK_RECORD_BYTES)
    const chunk = { endTx: 99n, endOp: 4n, endEntry: 1234, endPos: 99999, segment: 0, kind: 1 }
    writeChunkRecord(buf, 0, chunk)
    expect(readChunkRecord(buf, 0)).toEqual(chunk)
    const w = encodeWatermark({ lsn: 123456789n, sequence: 7n })
    expect(decodeWatermark(w)).toEqual({ lsn: 123456789n, sequence: 7n })
    const torn = Buffer.from(w)
    torn[20]! ^= 0xff
    expect(decodeWatermark(torn)).toBe('check')
    expect(decodeWatermark(w.subarray(0, 10))).toBe('short')
    const meta = Buffer.from('{"table":"items"}')
    expect(decodeMeta(encodeMeta(meta))).toEqual(meta)
    expect(decodeMeta(encodeMeta(meta).subarray(0, 30))).toBe('short')
  })

  it('names header problems, unknown versions included', () => {
    const h = encodeHeader('log')
    expect(checkHeader('log', h)).toBeUndefined()
    expect(checkHeader('entries', h)).toBe('magic')
    const future = Buffer.from(h)
    future[4] = 2
    expect(checkHeader('log', future)).toBe('version')
    expect(checkHeader('log', h.subarray(0, 8))).toBe('short')
  })
})

describe('small', () => {
  it('gives every number back with its value: integers of 32 bits as small integers, the rest as they are', () => {
    const values = [0, 1, 255, -1, 2 ** 31 - 1, -(2 ** 31), 2 ** 31, 2 ** 32 + 5, Number.MAX_SAFE_INTEGER, 0.5, -2.75, Number.NaN, Number.POSITIVE_INFINITY]
    for (const v of values) expect(small(v)).toBe(v)
    // Made the ways the heads file's decode and the batched stat make them (boxed doubles), still the same value.
    expect(small(new Float64Array([1234])[0]!)).toBe(1234)
    expect(small(0 * 2 ** 32 + 77)).toBe(77)
    expect(Object.is(small(-0), 0)).toBe(true)
  })
})
