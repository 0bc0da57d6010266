/**
 * On-disk formats of the file engine. Pure codecs: bytes in, values out, no I/O.
 *
 * Store directory
 * ---------------
 *   <root>/LOCK                 pid of the writer holding the store (O_EXCL)
 *   <root>/watermark            the durable watermark (below), replaced atomically
 *   <root>/heads                every log's head as the writer last recorded it (heads-file.ts)
 *   <root>/heads.old            the heads file a new one replaced, until it is removed
 *   <root>/journal/NNNNNNNN.jnl  redo log of every registered log's file writes since the last checkpoint
 *   <root>/shapes/<b>/<id>/     one directory per finished shape log, in bucket
 *                               <b> = b.00..b.ff by a hash of the id (shape-dirs.ts);
 *                               a bucket is removed with its last log
 *       log.dat                 entry bytes
 *       entries.idx             one fixed-width record per entry
 *       chunks.idx              one fixed-width record per closed chunk
 *       meta.bin                opaque bytes given at creation
 *   <root>/tmp/<id>.<n>/        a snapshot being written; renamed into shapes/ once durable
 *   <root>/trash/               deleted logs awaiting background removal
 *   <root>/quarantine/          logs that failed to open, kept for inspection
 *
 * Every file starts with the same 16-byte header. NEVER CHANGE the layout of a
 * version once written; a new layout takes a new version byte.
 *
 *   off size field
 *   0   4    magic        ASCII, one per file kind (below)
 *   4   1    version      FORMAT_VERSION
 *   5   11   reserved     zero
 *
 * log.dat (magic "SLGD")
 *   From offset 16, entries back to back. An entry is its JSON line followed by
 *   one `,` byte, so the bytes of any run of entries are an HTTP body for that
 *   run once wrapped in `[` ... `]` (the last `,` dropped or followed by a
 *   control line). Entries are never rewritten; compaction (the server's)
 *   writes a new log and deletes the old one.
 *
 * entries.idx (magic "SLGE"), record i at 16 + 32*i, little-endian:
 *   off size field
 *   0   8    tx           commit LSN; 0 for the snapshot region
 *   8   8    op           op index inside the transaction; for snapshot rows the chunk number
 *   16  8    end          position in log.dat just past this entry's `,`
 *                        (its start is the previous record's end, or 16)
 *   24  1    flags        bit0 TXN_END: last entry of its transaction (or of the snapshot)
 *                        bit1 SNAPSHOT: a snapshot row or the snapshot-end line
 *   25  3    reserved     zero
 *   28  4    check        mix32 of the seven little-endian u32 words at 0..27
 *
 * chunks.idx (magic "SLGC"), record k at 16 + 48*k, little-endian:
 *   0   8    end tx       offset of the chunk's last entry
 *   8   8    end op
 *   16  8    end entry    number of entries up to and including this chunk
 *   24  8    end pos      position in log.dat just past the chunk's last entry
 *   32  4    segment      data file holding the chunk; always 0 (log.dat)
 *   36  1    kind         0 live, 1 snapshot
 *   37  7    reserved     zero
 *   44  4    check        mix32 of the eleven little-endian u32 words at 0..43
 *
 * watermark (magic "SLWM", version 2; version 1, of a store with the flat
 *   `shapes/<id>/`, is still read), 48 bytes:
 *   0   16   header
 *   16  8    lsn          every transaction with commit LSN ≤ lsn is durable in every log
 *   24  8    sequence     incremented on every publish
 *   32  12   reserved     zero
 *   44  4    check        crc32(bytes 0..43) XOR CHECK_SALT
 *
 * watermark.live (magic "SLWM"), same 48 bytes as `watermark`, overwritten in place
 *   after every flush and synced in the background: read-only followers poll it.
 *   The writer itself never reads it (see journal-format.ts for where the
 *   watermark lives).
 *
 * journal/NNNNNNNN.jnl (magic "SLJN", version 2; version 1 is still read): header,
 *   then groups; see journal-format.ts.
 *
 * heads (magic "SLHD", version 2; version 1 is ignored): every log's head as the
 *   writer last recorded it, at a clean close and while it runs; see heads-file.ts.
 *
 * meta.bin (magic "SLGM"):
 *   0   16   header
 *   16  4    length n
 *   20  4    check        crc32(bytes 24..24+n) XOR CHECK_SALT
 *   24  n    meta bytes
 *
 * mix32 (fixed records, written once per entry, so it must be cheap): start at
 * CHECK_SALT; for each word w, h = imul(h ^ w, 0x9e3779b1), h ^= h >>> 15; then
 * h = imul(h ^ (h >>> 13), 0x85ebca6b), h ^= h >>> 16. Each step is a bijection
 * of h, so any change confined to one word always changes the check; random
 * garbage passes with probability 2^-32. crc32 is CRC-32 (IEEE) XOR CHECK_SALT.
 * The salt makes an all-zero record (a hole left by a crash) fail its check.
 */

export const FORMAT_VERSION = 1
/**
 * Kinds whose layout moved on keep their own version: the journal is at 2
 * (groups may carry a watermark record) and still reads 1. The watermark's
 * version is the store directory's: 2 since logs live in buckets of shapes/
 * (shape-dirs.ts). Version 1 (the flat `shapes/<id>/`) is still read, and the
 * writer moves such a store's logs into buckets at open before it writes
 * version 2, so an older build, which would take every bucket for a damaged
 * log and set it aside, refuses the store instead. The heads file is at 2
 * (entries name their data file's inode); a version 1 file is ignored (its
 * logs are scanned once).
 */
const WRITE_VERSION: Partial<Record<FileKind, number>> = { journal: 2, watermark: 2, heads: 2 }
const READ_VERSIONS: Partial<Record<FileKind, readonly number[]>> = { journal: [1, 2], watermark: [1, 2], heads: [2] }
/** The watermark version of a store whose logs are in buckets. */
export const BUCKETED_STORE_VERSION = 2
export const HEADER_BYTES = 16
export const ENTRY_RECORD_BYTES = 32
export const CHUNK_RECORD_BYTES = 48
export const WATERMARK_BYTES = 48
export const META_HEADER_BYTES = 24

// Fixed forever: a changed salt would make every existing record fail its check.
const CHECK_SALT = 0x5a17ce01

export const MAGIC = {
  log: 'SLGD',
  entries: 'SLGE',
  chunks: 'SLGC',
  watermark: 'SLWM',
  meta: 'SLGM',
  journal: 'SLJN',
  heads: 'SLHD',
} as const
export type FileKind = keyof typeof MAGIC

export const ENTRY_TXN_END = 1
export const ENTRY_SNAPSHOT = 2

export const CHUNK_LIVE = 0
export const CHUNK_SNAPSHOT = 1

/** The separator stored after every entry. */
export const SEPARATOR = 0x2c // ','

// CRC-32 (IEEE 802.3, the zlib polynomial), table-driven. Records are 28-44
// bytes; at that size a JS loop beats a call into zlib by several times.
const CRC_TABLE = (() => {
  const table = new Int32Array(256)
  for (let n = 0; n < 256; n++) {
    let c = n
    for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1
    table[n] = c
  }
  return table
})()

export function crc32(bytes: Uint8Array, start = 0, end = bytes.length): number {
  let c = -1
  for (let i = start; i < end; i++) c = CRC_TABLE[(c ^ bytes[i]!) & 0xff]! ^ (c >>> 8)
  return (c ^ -1) >>> 0
}

export function checkRange(bytes: Uint8Array, start: number, end: number): number {
  return (crc32(bytes, start, end) ^ CHECK_SALT) >>> 0
}

function check(bytes: Uint8Array): number {
  return checkRange(bytes, 0, bytes.length)
}

const MIX_A = 0x9e3779b1
const MIX_B = 0x85ebca6b

function mixStep(h: number, w: number): number {
  h = Math.imul(h ^ w, MIX_A)
  return h ^ (h >>> 15)
}

function mixEnd(h: number): number {
  h = Math.imul(h ^ (h >>> 13), MIX_B)
  return (h ^ (h >>> 16)) >>> 0
}

/** mix32 over `words` little-endian u32 words of `buf` starting at `at`. */
function checkWords(buf: Buffer, at: number, words: number): number {
  let h = CHECK_SALT
  for (let i = 0; i < words; i++) h = mixStep(h, buf.readUInt32LE(at + 4 * i))
  return mixEnd(h)
}

export function encodeHeader(kind: FileKind): Buffer {
  const buf = Buffer.alloc(HEADER_BYTES)
  buf.write(MAGIC[kind], 0, 'latin1')
  buf[4] = WRITE_VERSION[kind] ?? FORMAT_VERSION
  return buf
}

export type HeaderProblem = 'short' | 'magic' | 'version'

/** Checks a file header; returns the problem, or undefined when it is good. */
export function checkHeader(kind: FileKind, buf: Uint8Array): HeaderProblem | undefined {
  if (buf.length < HEADER_BYTES) return 'short'
  if (Buffer.from(buf.buffer, buf.byteOffset, 4).toString('latin1') !== MAGIC[kind]) return 'magic'
  if (!(READ_VERSIONS[kind] ?? [FORMAT_VERSION]).includes(buf[4]!)) return 'version'
  return undefined
}

export interface EntryRecord {
  readonly tx: bigint
  readonly op: bigint
  readonly end: number
  readonly flags: number
}

export const TWO_32 = 2 ** 32

/**
 * `n` as V8's small integer when it is one. An integer read from a
 * Float64Array or made by multiplying by 2^32 is a boxed double, and a class
 * whose field first receives one keeps a box per object in that field for
 * every object after (a log would carry 16: 1.6 million objects at 100k logs
 * for each young collection to copy). Integers only: other values pass as
 * they are.
 */
export function small(n: number): number {
  return n === (n | 0) ? n | 0 : n
}

/**
 * The append hot path: writes one entry record from number parts (a BigInt
 * write costs more than the rest of the record together). `txLo`/`txHi` are
 * the low and high 32 bits of the transaction's LSN, computed once per
 * transaction; `op` and `end` are below 2^53.
 */
export function writeEntryRecordFast(
  buf: Uint8Array,
  view: DataView,
  at: number,
  txLo: number,
  txHi: number,
  op: number,
  end: number,
  flags: number,
): void {
  const opHi = Math.floor(op / TWO_32)
  const endHi = Math.floor(end / TWO_32)
  view.setUint32(at, txLo, true)
  view.setUint32(at + 4, txHi, true)
  view.setUint32(at + 8, op >>> 0, true)
  view.setUint32(at + 12, opHi, true)
  view.setUint32(at + 16, end >>> 0, true)
  view.setUint32(at + 20, endHi, true)
  view.setUint32(at + 24, flags, true)
  let h = mixStep(CHECK_SALT, txLo)
  h = mixStep(h, txHi)
  h = mixStep(h, op >>> 0)
  h = mixStep(h, opHi)
  h = mixStep(h, end >>> 0)
  h = mixStep(h, endHi)
  view.setUint32(at + 28, mixEnd(mixStep(h, flags)), true)
}

/** Low and high 32 bits of a u64; numbers when exact, BigInt arithmetic only above 2^53. */
export function splitU64(value: bigint): { lo: number; hi: number } {
  const n = Number(value)
  if (n <= Number.MAX_SAFE_INTEGER) return { lo: n % TWO_32, hi: Math.floor(n / TWO_32) }
  return { lo: Number(value & 0xffffffffn), hi: Number(value >> 32n) }
}

/** The u64 whose 32-bit halves these are (`splitU64`'s inverse); the low half signed or not (the same bits). */
export function joinU64(hi: number, lo: number): bigint {
  const low = lo >>> 0
  return hi < 0x200000 ? BigInt(hi * TWO_32 + low) : (BigInt(hi) << 32n) | BigInt(low)
}

export function writeEntryRecord(buf: Buffer, at: number, r: EntryRecord): void {
  buf.writeBigUInt64LE(r.tx, at)
  buf.writeBigUInt64LE(r.op, at + 8)
  buf.writeBigUInt64LE(BigInt(r.end), at + 16)
  buf.writeUInt32LE(r.flags, at + 24)
  buf.writeUInt32LE(checkWords(buf, at, 7), at + 28)
}

/** Decodes the record at `at`; undefined when its check fails (torn or never written). */
export function readEntryRecord(buf: Buffer, at: number): EntryRecord | undefined {
  if (buf.readUInt32LE(at + 28) !== checkWords(buf, at, 7)) return undefined
  return {
    tx: buf.readBigUInt64LE(at),
    op: buf.readBigUInt64LE(at + 8),
    end: Number(buf.readBigUInt64LE(at + 16)),
    flags: buf[at + 24]!,
  }
}

export interface ChunkRecord {
  readonly endTx: bigint
  readonly endOp: bigint
  readonly endEntry: number
  readonly endPos: number
  readonly segment: number
  readonly kind: number
}

export function writeChunkRecord(buf: Buffer, at: number, r: ChunkRecord): void {
  buf.fill(0, at, at + CHUNK_RECORD_BYTES)
  buf.writeBigUInt64LE(r.endTx, at)
  buf.writeBigUInt64LE(r.endOp, at + 8)
  buf.writeBigUInt64LE(BigInt(r.endEntry), at + 16)
  buf.writeBigUInt64LE(BigInt(r.endPos), at + 24)
  buf.writeUInt32LE(r.segment, at + 32)
  buf[at + 36] = r.kind
  buf.writeUInt32LE(checkWords(buf, at, 11), at + 44)
}

export function readChunkRecord(buf: Buffer, at: number): ChunkRecord | undefined {
  if (buf.readUInt32LE(at + 44) !== checkWords(buf, at, 11)) return undefined
  return {
    endTx: buf.readBigUInt64LE(at),
    endOp: buf.readBigUInt64LE(at + 8),
    endEntry: Number(buf.readBigUInt64LE(at + 16)),
    endPos: Number(buf.readBigUInt64LE(at + 24)),
    segment: buf.readUInt32LE(at + 32),
    kind: buf[at + 36]!,
  }
}

export interface Watermark {
  readonly lsn: bigint
  readonly sequence: bigint
}

/** `version`: an older one, for tests that make a store as an older build left it. */
export function encodeWatermark(w: Watermark, version?: number): Buffer {
  const buf = Buffer.alloc(WATERMARK_BYTES)
  encodeHeader('watermark').copy(buf, 0)
  if (version !== undefined) buf[4] = version
  buf.writeBigUInt64LE(w.lsn, 16)
  buf.writeBigUInt64LE(w.sequence, 24)
  buf.writeUInt32LE(check(buf.subarray(0, 44)), 44)
  return buf
}

export function decodeWatermark(buf: Buffer): Watermark | HeaderProblem | 'check' {
  const problem = checkHeader('watermark', buf)
  if (problem) return problem
  if (buf.length < WATERMARK_BYTES) return 'short'
  if (buf.readUInt32LE(44) !== check(buf.subarray(0, 44))) return 'check'
  return { lsn: buf.readBigUInt64LE(16), sequence: buf.readBigUInt64LE(24) }
}

export function encodeMeta(meta: Uint8Array): Buffer {
  const buf = Buffer.alloc(META_HEADER_BYTES + meta.length)
  encodeHeader('meta').copy(buf, 0)
  buf.writeUInt32LE(meta.length, 16)
  buf.set(meta, META_HEADER_BYTES)
  buf.writeUInt32LE(check(buf.subarray(META_HEADER_BYTES)), 20)
  return buf
}

export function decodeMeta(buf: Buffer): Buffer | HeaderProblem | 'check' {
  const problem = checkHeader('meta', buf)
  if (problem) return problem
  if (buf.length < META_HEADER_BYTES) return 'short'
  const length = buf.readUInt32LE(16)
  if (buf.length !== META_HEADER_BYTES + length) return 'short'
  const body = buf.subarray(META_HEADER_BYTES)
  if (buf.readUInt32LE(20) !== check(body)) return 'check'
  return body
}
