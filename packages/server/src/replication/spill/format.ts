/**
 * On-disk formats of the spill files. Pure codecs: bytes in, values out, no I/O.
 *
 * Spill files are scratch: they live only as long as the process that wrote
 * them (a restart wipes the spill directory, and the replication slot resends
 * whatever was not durable), are never fsynced, and are read back only by the
 * process that wrote them. They still carry a magic and a version byte, so a
 * stray file is never misread and the layout can change safely.
 *
 * Spill directory
 * ---------------
 *   <dir>/stream-<xid>.<n>.spill   one streamed transaction (SpillStreamBuffer)
 *   <dir>/queue-<name>.<n>.spill   one spilled queue (SpillQueue)
 *   <dir>/routed-<xid>.<n>.spill   one streamed transaction's lines routed ahead (shapes/routed-ahead.ts)
 *   `<n>` is a per-process counter; files not ending in `.spill` are never touched.
 *
 * Every file starts with the same 16-byte header:
 *
 *   off size field
 *   0   4    magic        ASCII: "SLSS" stream file, "SLSQ" queue file, "SLSR" routed file
 *   4   1    version      SPILL_FORMAT_VERSION (1)
 *   5   11   reserved     zero
 *
 * Stream file (magic "SLSS"): from offset 16, change records back to back, in
 * the order the changes were appended. A subtransaction abort cuts the file
 * back to the start of that subtransaction's first record. All integers are
 * little-endian.
 *
 *   record
 *   0   4    length n     bytes of the body that follows
 *   4   n    body
 *
 *   body, by kind (first byte)
 *   1 insert    u8 kind, u32 relation, tuple newTuple
 *   2 update    u8 kind, u32 relation, u8 flags, tuple newTuple,
 *               [tuple oldTuple]                  present when flags bit 2 is set
 *               u16 k, k × u16 unchangedToast     column indexes
 *               flags: bits 0-1 oldTupleKind (0 undefined, 1 'key', 2 'full'),
 *                      bit 2 oldTuple present
 *   3 delete    u8 kind, u32 relation, u8 oldTupleKind (1 'key', 2 'full'), tuple oldTuple
 *   4 truncate  u8 kind, u8 flags (bit 0 cascade, bit 1 restartIdentity),
 *               u32 k, k × u32 relation
 *
 *   relation    index into the transaction's relation table, which stays in
 *               memory (relations are few): a change read back references the
 *               very Relation object it was appended with, even when DDL inside
 *               the transaction gave one table id two descriptions.
 *   tuple       u16 count (Postgres allows at most 1664 columns), then count values
 *   value       first byte b:
 *                 0x00-0xFA  text of b UTF-8 bytes, which follow
 *                 0xFB       u32 length n, then text of n UTF-8 bytes
 *                 0xFE       NULL
 *                 0xFF       UNCHANGED_TOAST (the unchanged-TOAST marker)
 *                 0xFC-0xFD  invalid
 *               NULL and '' are distinct (0xFE vs 0x00).
 *
 * Text is stored as UTF-8. Tuple values come from the pgoutput decoder, which
 * decodes Postgres's UTF-8 bytes with `Buffer#toString('utf8')`: such strings
 * never contain lone surrogates, so the UTF-8 round trip is exact. (A string
 * with a lone surrogate, which only a caller constructing changes by hand
 * could produce, would come back with U+FFFD in its place.)
 *
 * No checksum: files are read back only by the process that wrote them, every
 * failed write marks its transaction failed, and decoding checks every length
 * and tag against the record's bounds (a mismatch is `spill_corrupt`).
 *
 * Queue file (magic "SLSQ"): from offset 16, items back to back in FIFO order.
 *
 *   0   4    length n
 *   4   n    the item, as its QueueCodec encoded it
 *
 * Routed file (magic "SLSR"): its records are documented in shapes/routed-ahead.ts.
 *
 * The transaction-part item codec (`transactionPartCodec`) documents its own
 * bytes in transaction-part-codec.ts.
 */
import type { Change } from '../change-sink.js'
import type { OldTupleKind, Relation, TupleValue } from '../pgoutput-messages.js'
import { UNCHANGED_TOAST } from '../pgoutput-messages.js'
import { SpillError } from './errors.js'

export const SPILL_FORMAT_VERSION = 1
export const SPILL_HEADER_BYTES = 16
export const SPILL_MAGIC = { stream: 'SLSS', queue: 'SLSQ', routed: 'SLSR' } as const
export type SpillFileKind = keyof typeof SPILL_MAGIC

/** Bytes of a record's length prefix (stream and queue files alike). */
export const RECORD_PREFIX_BYTES = 4

const KIND_INSERT = 1
const KIND_UPDATE = 2
const KIND_DELETE = 3
const KIND_TRUNCATE = 4

const SHORT_TEXT_MAX = 0xfa
const LONG_TEXT = 0xfb
const VALUE_NULL = 0xfe
const VALUE_UNCHANGED_TOAST = 0xff

const MAX_COLUMNS = 0xffff
/** Strings up to this many UTF-16 units always fit a short value (3 UTF-8 bytes per unit at most). */
const SURELY_SHORT = Math.floor(SHORT_TEXT_MAX / 3)
/** Above this, measure the UTF-8 length exactly instead of reserving 3 bytes per unit. */
const MEASURE_ABOVE = 64 * 1024

export function encodeHeader(kind: SpillFileKind): Buffer {
  const header = Buffer.alloc(SPILL_HEADER_BYTES)
  header.write(SPILL_MAGIC[kind], 0, 'latin1')
  header[4] = SPILL_FORMAT_VERSION
  return header
}

/** Throws `spill_corrupt` unless `bytes` is a header of `kind` in a version we read. */
export function checkHeader(kind: SpillFileKind, bytes: Uint8Array): void {
  const magic = Buffer.from(bytes.buffer, bytes.byteOffset, Math.min(4, bytes.byteLength)).toString('latin1')
  if (bytes.byteLength < SPILL_HEADER_BYTES || magic !== SPILL_MAGIC[kind]) {
    throw new SpillError('spill_corrupt', `not a ${kind} spill file (magic ${JSON.stringify(magic)})`)
  }
  if (bytes[4] !== SPILL_FORMAT_VERSION) {
    throw new SpillError('spill_corrupt', `${kind} spill file of unknown format version ${bytes[4]}`)
  }
}

/** A growable byte buffer that records are encoded into. */
export class ByteSink {
  buf: Buffer
  len = 0

  constructor(initialCapacity = 4096) {
    this.buf = Buffer.allocUnsafe(initialCapacity)
  }

  get capacity(): number {
    return this.buf.length
  }

  ensure(extra: number): void {
    const needed = this.len + extra
    if (needed <= this.buf.length) return
    const next = Buffer.allocUnsafe(Math.max(needed, this.buf.length * 2))
    this.buf.copy(next, 0, 0, this.len)
    this.buf = next
  }

  /** Drops the contents and, when the buffer grew past `limit`, its memory too. */
  reset(limit: number, initialCapacity: number): void {
    this.len = 0
    if (this.buf.length > limit) this.buf = Buffer.allocUnsafe(initialCapacity)
  }
}

/**
 * Appends one change record to `out`. `relationIndex` maps a Relation to its
 * index in the transaction's table (adding it when new). On a throw, `out.len`
 * may have advanced over a partial record: the caller restores it.
 */
export function encodeChange(out: ByteSink, change: Change, relationIndex: (relation: Relation) => number): void {
  const start = out.len
  out.ensure(RECORD_PREFIX_BYTES + 1 + 4 + 1)
  out.len += RECORD_PREFIX_BYTES
  switch (change.kind) {
    case 'insert': {
      out.buf[out.len] = KIND_INSERT
      out.buf.writeUInt32LE(relationIndex(change.relation), out.len + 1)
      out.len += 5
      writeTuple(out, change.newTuple)
      break
    }
    case 'update': {
      const hasOld = change.oldTuple !== undefined
      out.buf[out.len] = KIND_UPDATE
      out.buf.writeUInt32LE(relationIndex(change.relation), out.len + 1)
      out.buf[out.len + 5] = oldKindCode(change.oldTupleKind, true) | (hasOld ? 4 : 0)
      out.len += 6
      writeTuple(out, change.newTuple)
      if (change.oldTuple !== undefined) writeTuple(out, change.oldTuple)
      const toast = change.unchangedToast
      if (toast.length > MAX_COLUMNS) throw new TypeError(`update lists ${toast.length} unchanged-TOAST columns`)
      out.ensure(2 + 2 * toast.length)
      out.buf.writeUInt16LE(toast.length, out.len)
      out.len += 2
      for (const column of toast) {
        if (!Number.isInteger(column) || column < 0 || column > MAX_COLUMNS) throw new TypeError(`unchanged-TOAST column index ${column}`)
        out.buf.writeUInt16LE(column, out.len)
        out.len += 2
      }
      break
    }
    case 'delete': {
      out.buf[out.len] = KIND_DELETE
      out.buf.writeUInt32LE(relationIndex(change.relation), out.len + 1)
      out.buf[out.len + 5] = oldKindCode(change.oldTupleKind, false)
      out.len += 6
      writeTuple(out, change.oldTuple)
      break
    }
    case 'truncate': {
      const relations = change.relations
      out.ensure(6 + 4 * relations.length)
      out.buf[out.len] = KIND_TRUNCATE
      out.buf[out.len + 1] = (change.cascade ? 1 : 0) | (change.restartIdentity ? 2 : 0)
      out.buf.writeUInt32LE(relations.length, out.len + 2)
      out.len += 6
      for (const relation of relations) {
        out.buf.writeUInt32LE(relationIndex(relation), out.len)
        out.len += 4
      }
      break
    }
    default:
      throw new TypeError(`unknown change kind ${JSON.stringify((change as { kind?: unknown }).kind)}`)
  }
  out.buf.writeUInt32LE(out.len - start - RECORD_PREFIX_BYTES, start)
}

function oldKindCode(kind: OldTupleKind | undefined, optional: boolean): number {
  if (kind === 'key') return 1
  if (kind === 'full') return 2
  if (kind === undefined && optional) return 0
  throw new TypeError(`old tuple kind ${JSON.stringify(kind)}`)
}

function writeTuple(out: ByteSink, tuple: readonly TupleValue[]): void {
  const count = tuple.length
  if (count > MAX_COLUMNS) throw new TypeError(`tuple of ${count} columns`)
  out.ensure(2 + count)
  out.buf.writeUInt16LE(count, out.len)
  out.len += 2
  for (let i = 0; i < count; i++) {
    const value = tuple[i]
    if (typeof value === 'string') writeText(out, value)
    else {
      out.ensure(1)
      if (value === null) out.buf[out.len++] = VALUE_NULL
      else if (value === UNCHANGED_TOAST) out.buf[out.len++] = VALUE_UNCHANGED_TOAST
      else throw new TypeError(`tuple value of type ${typeof value}`)
    }
  }
}

function writeText(out: ByteSink, text: string): void {
  const units = text.length
  if (units <= SURELY_SHORT) {
    out.ensure(1 + units * 3)
    const n = out.buf.write(text, out.len + 1, 'utf8')
    out.buf[out.len] = n
    out.len += 1 + n
    return
  }
  if (units > MEASURE_ABOVE) {
    const n = Buffer.byteLength(text, 'utf8')
    out.ensure(5 + n)
    out.buf[out.len] = LONG_TEXT
    out.buf.writeUInt32LE(n, out.len + 1)
    out.buf.write(text, out.len + 5, n, 'utf8')
    out.len += 5 + n
    return
  }
  out.ensure(5 + units * 3)
  const n = out.buf.write(text, out.len + 5, 'utf8')
  if (n <= SHORT_TEXT_MAX) {
    out.buf[out.len] = n
    out.buf.copyWithin(out.len + 1, out.len + 5, out.len + 5 + n)
    out.len += 1 + n
  } else {
    out.buf[out.len] = LONG_TEXT
    out.buf.writeUInt32LE(n, out.len + 1)
    out.len += 5 + n
  }
}

/** Reads the body of one change record (`buf[start..end)`, without its length prefix). */
export function decodeChange(buf: Buffer, start: number, end: number, relations: readonly Relation[]): Change {
  const r = new BodyReader(buf, start, end, relations)
  const kind = r.u8()
  let change: Change
  switch (kind) {
    case KIND_INSERT: {
      const relation = r.relation()
      change = { kind: 'insert', relation, newTuple: r.tuple() }
      break
    }
    case KIND_UPDATE: {
      const relation = r.relation()
      const flags = r.u8()
      if (flags > 7 || (flags & 3) === 3) throw corrupt(`update flags ${flags}`)
      const newTuple = r.tuple()
      const oldTuple = flags & 4 ? r.tuple() : undefined
      const k = r.u16()
      const unchangedToast: number[] = new Array<number>(k)
      for (let i = 0; i < k; i++) unchangedToast[i] = r.u16()
      const code = flags & 3
      change = {
        kind: 'update',
        relation,
        newTuple,
        oldTuple,
        oldTupleKind: code === 0 ? undefined : code === 1 ? 'key' : 'full',
        unchangedToast,
      }
      break
    }
    case KIND_DELETE: {
      const relation = r.relation()
      const code = r.u8()
      if (code !== 1 && code !== 2) throw corrupt(`delete old tuple kind ${code}`)
      change = { kind: 'delete', relation, oldTuple: r.tuple(), oldTupleKind: code === 1 ? 'key' : 'full' }
      break
    }
    case KIND_TRUNCATE: {
      const flags = r.u8()
      if (flags > 3) throw corrupt(`truncate flags ${flags}`)
      const k = r.u32()
      if (k * 4 > end - r.pos) throw corrupt(`truncate of ${k} relations in a ${end - start}-byte record`)
      const list: Relation[] = new Array<Relation>(k)
      for (let i = 0; i < k; i++) list[i] = r.relation()
      change = { kind: 'truncate', relations: list, cascade: (flags & 1) !== 0, restartIdentity: (flags & 2) !== 0 }
      break
    }
    default:
      throw corrupt(`unknown change kind ${kind}`)
  }
  if (r.pos !== end) throw corrupt(`${end - r.pos} stray bytes after a change record`)
  return change
}

function corrupt(detail: string): SpillError {
  return new SpillError('spill_corrupt', `stream spill file: ${detail}`)
}

class BodyReader {
  constructor(
    private readonly buf: Buffer,
    public pos: number,
    private readonly end: number,
    private readonly relations: readonly Relation[],
  ) {}

  private need(n: number): void {
    if (this.pos + n > this.end) throw corrupt('record ends inside a field')
  }

  u8(): number {
    this.need(1)
    return this.buf[this.pos++]!
  }

  u16(): number {
    this.need(2)
    const v = this.buf.readUInt16LE(this.pos)
    this.pos += 2
    return v
  }

  u32(): number {
    this.need(4)
    const v = this.buf.readUInt32LE(this.pos)
    this.pos += 4
    return v
  }

  relation(): Relation {
    const index = this.u32()
    const relation = this.relations[index]
    if (relation === undefined) throw corrupt(`relation index ${index} of ${this.relations.length}`)
    return relation
  }

  tuple(): TupleValue[] {
    const count = this.u16()
    const values: TupleValue[] = new Array<TupleValue>(count)
    const buf = this.buf
    for (let i = 0; i < count; i++) {
      this.need(1)
      const b = buf[this.pos++]!
      if (b <= SHORT_TEXT_MAX) {
        this.need(b)
        values[i] = buf.toString('utf8', this.pos, this.pos + b)
        this.pos += b
      } else if (b === VALUE_NULL) {
        values[i] = null
      } else if (b === VALUE_UNCHANGED_TOAST) {
        values[i] = UNCHANGED_TOAST
      } else if (b === LONG_TEXT) {
        const n = this.u32()
        this.need(n)
        values[i] = buf.toString('utf8', this.pos, this.pos + n)
        this.pos += n
      } else {
        throw corrupt(`value tag 0x${b.toString(16)}`)
      }
    }
    return values
  }
}
