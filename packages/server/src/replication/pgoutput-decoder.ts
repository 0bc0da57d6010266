import { ByteReader } from './byte-reader.js'
import {
  type OldTupleKind,
  type PgoutputMessage,
  type Relation,
  type RelationColumn,
  type ReplicaIdentity,
  type Tuple,
  UNCHANGED_TOAST,
} from './pgoutput-messages.js'
import { PgoutputDecodeError } from './replication-errors.js'

/**
 * A pure decoder of pgoutput messages (protocol versions 1 and 2): the payload
 * of one XLogData message in, one typed message out, no I/O.
 *
 * Every tuple value stays Postgres text (docs/protocol.md §3.5): a sync server must
 * echo exactly what the type's output function printed, so nothing goes through
 * a type parser. Binary values are refused: we never ask for them.
 *
 * The one piece of context is whether the message sits inside a streamed
 * segment (protocol 2), where data messages carry an xid prefix that nothing in
 * the message itself announces. `decodePgoutput` takes it as an argument;
 * `PgoutputDecoder` tracks it from Stream Start / Stream Stop.
 */

const KEY_FLAG = 1
const TRANSACTIONAL_FLAG = 1
const TRUNCATE_CASCADE = 1
const TRUNCATE_RESTART_IDENTITY = 2
/** pgoutput writes '' for pg_catalog to save bytes. */
const CATALOG_SCHEMA = 'pg_catalog'

const REPLICA_IDENTITY: Readonly<Record<number, ReplicaIdentity>> = {
  [0x64 /* d */]: 'default',
  [0x6e /* n */]: 'nothing',
  [0x66 /* f */]: 'full',
  [0x69 /* i */]: 'index',
}

/** Message type bytes. */
const enum Kind {
  Begin = 0x42, // B
  Commit = 0x43, // C
  Origin = 0x4f, // O
  Relation = 0x52, // R
  Type = 0x59, // Y
  Insert = 0x49, // I
  Update = 0x55, // U
  Delete = 0x44, // D
  Truncate = 0x54, // T
  Message = 0x4d, // M
  StreamStart = 0x53, // S
  StreamStop = 0x45, // E
  StreamCommit = 0x63, // c
  StreamAbort = 0x41, // A
}

/** Tuple and submessage markers. */
const enum Marker {
  New = 0x4e, // N
  Key = 0x4b, // K
  Old = 0x4f, // O
  Null = 0x6e, // n
  Unchanged = 0x75, // u
  Text = 0x74, // t
  Binary = 0x62, // b
}

export interface DecodeContext {
  /** Between Stream Start and Stream Stop: data messages carry an xid prefix. */
  readonly inStream: boolean
}

const OUTSIDE_STREAM: DecodeContext = { inStream: false }

/**
 * Decodes one pgoutput message: `buf` from `start` to `end` (its end by
 * default). Throws `PgoutputDecodeError` on any malformed input.
 */
export function decodePgoutput(buf: Buffer, context: DecodeContext = OUTSIDE_STREAM, start = 0, end = buf.length): PgoutputMessage {
  if (end > buf.length || start > end) throw new RangeError(`message bounds ${start}..${end} outside a buffer of ${buf.length} bytes`)
  if (end <= start) throw new PgoutputDecodeError('pgoutput_truncated', '', 'no message type byte')
  const kind = buf[start] as number
  // One reader for every message: decoding is synchronous and never re-entered.
  const r = reader.reset(buf, String.fromCharCode(kind), start, end)
  try {
    r.skip(1, 'type')
    const message = decodeBody(kind, r, context.inStream, end - start)
    r.end()
    return message
  } finally {
    // Not holding on to the last message's buffer (the connection's chunk), decoded or not.
    reader.reset(NO_BYTES, '', 0)
  }
}

const NO_BYTES = Buffer.alloc(0)
const reader = new ByteReader(NO_BYTES, '')

function decodeBody(kind: number, r: ByteReader, inStream: boolean, byteLength: number): PgoutputMessage {
  switch (kind) {
    case Kind.Begin:
      return { tag: 'begin', finalLsn: r.u64('final LSN'), commitTime: r.i64('commit timestamp'), xid: r.u32('xid') }
    case Kind.Commit:
      return {
        tag: 'commit',
        flags: r.u8('flags'),
        commitLsn: r.u64('commit LSN'),
        endLsn: r.u64('end LSN'),
        commitTime: r.i64('commit timestamp'),
      }
    case Kind.Origin:
      return { tag: 'origin', originLsn: r.u64('origin LSN'), name: r.cstring('origin name') }
    case Kind.Relation: {
      const xid = streamXid(r, inStream)
      return { tag: 'relation', xid, relation: readRelation(r) }
    }
    case Kind.Type: {
      const xid = streamXid(r, inStream)
      const typeOid = r.u32('type OID')
      const schema = catalogSchema(r.cstring('namespace'))
      return { tag: 'type', xid, typeOid, schema, name: r.cstring('type name') }
    }
    case Kind.Insert: {
      const xid = streamXid(r, inStream)
      const relationId = r.u32('relation OID')
      expectMarker(r, Marker.New, "'N' before the new tuple")
      return { tag: 'insert', xid, relationId, newTuple: readTuple(r), byteLength }
    }
    case Kind.Update: {
      const xid = streamXid(r, inStream)
      const relationId = r.u32('relation OID')
      let marker = r.u8('tuple marker')
      let oldTuple: Tuple | undefined
      let oldTupleKind: OldTupleKind | undefined
      if (marker === Marker.Key || marker === Marker.Old) {
        oldTupleKind = marker === Marker.Key ? 'key' : 'full'
        oldTuple = readTuple(r)
        marker = r.u8('tuple marker')
      }
      if (marker !== Marker.New) throw r.malformed(`expected 'N' before the new tuple, got ${describeByte(marker)}`)
      return { tag: 'update', xid, relationId, oldTuple, oldTupleKind, newTuple: readTuple(r), byteLength }
    }
    case Kind.Delete: {
      const xid = streamXid(r, inStream)
      const relationId = r.u32('relation OID')
      const marker = r.u8('tuple marker')
      if (marker !== Marker.Key && marker !== Marker.Old) {
        throw r.malformed(`expected 'K' or 'O' before the old tuple, got ${describeByte(marker)}`)
      }
      const oldTupleKind: OldTupleKind = marker === Marker.Key ? 'key' : 'full'
      return { tag: 'delete', xid, relationId, oldTuple: readTuple(r), oldTupleKind, byteLength }
    }
    case Kind.Truncate: {
      const xid = streamXid(r, inStream)
      const count = r.i32('relation count')
      if (count < 0) throw r.malformed(`negative relation count ${count}`)
      const options = r.u8('options')
      // Checked up front so a huge bogus count fails fast instead of allocating.
      if (r.remaining < count * 4) throw new PgoutputDecodeError('pgoutput_truncated', 'T', `${count} relation OIDs need ${count * 4} bytes, ${r.remaining} left`)
      const relationIds: number[] = new Array<number>(count)
      for (let i = 0; i < count; i++) relationIds[i] = r.u32('relation OID')
      return {
        tag: 'truncate',
        xid,
        cascade: (options & TRUNCATE_CASCADE) !== 0,
        restartIdentity: (options & TRUNCATE_RESTART_IDENTITY) !== 0,
        relationIds,
      }
    }
    case Kind.Message: {
      const xid = streamXid(r, inStream)
      const transactional = (r.u8('flags') & TRANSACTIONAL_FLAG) !== 0
      const lsn = r.u64('message LSN')
      const prefix = r.cstring('prefix')
      const length = r.i32('content length')
      return { tag: 'message', xid, transactional, lsn, prefix, content: r.bytes(length, 'content') }
    }
    case Kind.StreamStart:
      return { tag: 'stream-start', xid: r.u32('xid'), firstSegment: r.u8('first segment flag') === 1 }
    case Kind.StreamStop:
      return { tag: 'stream-stop' }
    case Kind.StreamCommit:
      return {
        tag: 'stream-commit',
        xid: r.u32('xid'),
        flags: r.u8('flags'),
        commitLsn: r.u64('commit LSN'),
        endLsn: r.u64('end LSN'),
        commitTime: r.i64('commit timestamp'),
      }
    case Kind.StreamAbort:
      return { tag: 'stream-abort', xid: r.u32('xid'), subxid: r.u32('subtransaction xid') }
    default:
      throw new PgoutputDecodeError(
        'pgoutput_unsupported',
        String.fromCharCode(kind),
        `unknown message type ${describeByte(kind)} (protocol versions 1 and 2 are supported)`,
      )
  }
}

function streamXid(r: ByteReader, inStream: boolean): number | undefined {
  return inStream ? r.u32('xid') : undefined
}

function catalogSchema(namespace: string): string {
  return namespace === '' ? CATALOG_SCHEMA : namespace
}

function expectMarker(r: ByteReader, expected: number, what: string): void {
  const marker = r.u8('tuple marker')
  if (marker !== expected) throw r.malformed(`expected ${what}, got ${describeByte(marker)}`)
}

function describeByte(byte: number): string {
  return byte >= 0x20 && byte < 0x7f ? `'${String.fromCharCode(byte)}'` : `0x${byte.toString(16).padStart(2, '0')}`
}

function readRelation(r: ByteReader): Relation {
  const id = r.u32('relation OID')
  const schema = catalogSchema(r.cstring('namespace'))
  const table = r.cstring('relation name')
  const identityByte = r.u8('replica identity')
  const replicaIdentity = REPLICA_IDENTITY[identityByte]
  if (replicaIdentity === undefined) throw r.malformed(`unknown replica identity ${describeByte(identityByte)}`)
  const count = r.i16('column count')
  if (count < 0) throw r.malformed(`negative column count ${count}`)
  const columns: RelationColumn[] = []
  const keyColumns: number[] = []
  for (let i = 0; i < count; i++) {
    const flags = r.u8('column flags')
    const name = r.cstring('column name')
    const typeOid = r.u32('column type OID')
    const typeMod = r.i32('column type modifier')
    const isKey = (flags & KEY_FLAG) !== 0
    if (isKey) keyColumns.push(i)
    columns.push({ name, typeOid, typeMod, isKey, flags })
  }
  return { id, schema, table, replicaIdentity, columns, keyColumns }
}

/** Where readTuple found each text value: reused, one tuple is read at a time. */
const textAt: number[] = []
const textLength: number[] = []
const textColumn: number[] = []

function readTuple(r: ByteReader): Tuple {
  const count = r.i16('tuple column count')
  if (count < 0) throw r.malformed(`negative tuple column count ${count}`)
  const values: Tuple = new Array(count)
  let texts = 0
  for (let i = 0; i < count; i++) {
    const kind = r.u8('value kind')
    switch (kind) {
      case Marker.Text: {
        const length = r.i32('value length')
        textAt[texts] = r.skipValue(length, i)
        textLength[texts] = length
        textColumn[texts++] = i
        break
      }
      case Marker.Null:
        values[i] = null
        break
      case Marker.Unchanged:
        values[i] = UNCHANGED_TOAST
        break
      case Marker.Binary:
        throw new PgoutputDecodeError('binary_tuple_value', 'tuple', `column ${i} arrived in binary format; start replication without binary 'true'`)
      default:
        throw r.malformed(`unknown value kind ${describeByte(kind)} for column ${i}`)
    }
  }
  if (texts > 0) decodeTexts(r, values, texts)
  return values
}

/** Past this a row's values are decoded one by one: no string as long as two huge values together (V8 caps a string's length). */
const MAX_RUN_BYTES = 64 * 1024

/**
 * The tuple's text values, decoded in one piece when that gives each value
 * exactly: a decode per value was a call into C++ for every column of every
 * row. The run from the first value to the end of the last (the column
 * headers between them included) decodes to one UTF-16 unit per byte only
 * when no byte in it is part of a multi-byte character, and then every
 * value's text sits at its byte offsets and equals its own decoding (ASCII
 * as itself, any stray byte as U+FFFD either way). Anything else, one value
 * at a time.
 */
function decodeTexts(r: ByteReader, values: Tuple, texts: number): void {
  const from = textAt[0]!
  const to = textAt[texts - 1]! + textLength[texts - 1]!
  if (texts > 1 && to - from <= MAX_RUN_BYTES) {
    const run = r.text(from, to)
    if (run.length === to - from) {
      for (let t = 0; t < texts; t++) {
        const at = textAt[t]! - from
        values[textColumn[t]!] = run.slice(at, at + textLength[t]!)
      }
      return
    }
  }
  for (let t = 0; t < texts; t++) values[textColumn[t]!] = r.text(textAt[t]!, textAt[t]! + textLength[t]!)
}

/**
 * `decodePgoutput` plus the one bit of state it needs: whether we are inside a
 * streamed segment. One per replication connection (a new connection starts
 * outside any segment).
 */
export class PgoutputDecoder {
  private inStream = false

  get streaming(): boolean {
    return this.inStream
  }

  /** Decodes the message in `buf` from `start` to `end`. */
  decode(buf: Buffer, start = 0, end = buf.length): PgoutputMessage {
    const message = decodePgoutput(buf, this.inStream ? INSIDE_STREAM : OUTSIDE_STREAM, start, end)
    if (message.tag === 'stream-start') this.inStream = true
    else if (message.tag === 'stream-stop') this.inStream = false
    return message
  }

  reset(): void {
    this.inStream = false
  }
}

const INSIDE_STREAM: DecodeContext = { inStream: true }
