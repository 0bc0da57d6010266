import { describe, expect, it } from 'vitest'
import fc from 'fast-check'
import {
  PgoutputDecodeError,
  PgoutputDecoder,
  type PgoutputMessage,
  UNCHANGED_TOAST,
  decodePgoutput,
} from '../../src/replication/index.js'
import { Wire, relationBytes } from './wire.js'

const LSN = 0x16_b374_d848n
const END_LSN = 0x16_b374_d8a0n
/** 2024-01-31 12:34:56.123456 UTC in Postgres microseconds (since 2000-01-01). */
const TS = 760_019_696_123_456n

interface Case {
  readonly name: string
  readonly bytes: Buffer
  readonly inStream?: boolean
  readonly expected: PgoutputMessage
}

const cases: Case[] = [
  {
    name: 'Begin',
    bytes: Wire.of('B').u64(LSN).i64(TS).u32(4_000_000_000).build(),
    expected: { tag: 'begin', finalLsn: LSN, commitTime: TS, xid: 4_000_000_000 },
  },
  {
    name: 'Begin with a timestamp before 2000 (negative)',
    bytes: Wire.of('B').u64(1n).i64(-1n).u32(3).build(),
    expected: { tag: 'begin', finalLsn: 1n, commitTime: -1n, xid: 3 },
  },
  {
    name: 'Commit',
    bytes: Wire.of('C').u8(0).u64(LSN).u64(END_LSN).i64(TS).build(),
    expected: { tag: 'commit', flags: 0, commitLsn: LSN, endLsn: END_LSN, commitTime: TS },
  },
  {
    name: 'Commit with the largest LSN',
    bytes: Wire.of('C').u8(0).u64(0xffff_ffff_ffff_ffffn).u64(0xffff_ffff_ffff_ffffn).i64(0n).build(),
    expected: { tag: 'commit', flags: 0, commitLsn: 0xffff_ffff_ffff_ffffn, endLsn: 0xffff_ffff_ffff_ffffn, commitTime: 0n },
  },
  {
    name: 'Origin',
    bytes: Wire.of('O').u64(LSN).cstring('pg_16384').build(),
    expected: { tag: 'origin', originLsn: LSN, name: 'pg_16384' },
  },
  {
    name: 'Relation with quoted-looking, unicode and empty-schema names',
    bytes: relationBytes(
      16_385,
      '',
      'Tâble "x" 🚀',
      [
        { name: 'id', typeOid: 20, key: true },
        { name: 'Name with space', typeOid: 1043, typeMod: 68 },
        { name: '', typeOid: 25 },
      ],
      { identity: 'f' },
    ),
    expected: {
      tag: 'relation',
      xid: undefined,
      relation: {
        id: 16_385,
        schema: 'pg_catalog',
        table: 'Tâble "x" 🚀',
        replicaIdentity: 'full',
        columns: [
          { name: 'id', typeOid: 20, typeMod: -1, isKey: true, flags: 1 },
          { name: 'Name with space', typeOid: 1043, typeMod: 68, isKey: false, flags: 0 },
          { name: '', typeOid: 25, typeMod: -1, isKey: false, flags: 0 },
        ],
        keyColumns: [0],
      },
    },
  },
  ...(['d', 'n', 'i'] as const).map(
    (identity): Case => ({
      name: `Relation with replica identity '${identity}' and no columns`,
      bytes: relationBytes(7, 'public', 't', [], { identity }),
      expected: {
        tag: 'relation',
        xid: undefined,
        relation: {
          id: 7,
          schema: 'public',
          table: 't',
          replicaIdentity: ({ d: 'default', n: 'nothing', i: 'index' } as const)[identity],
          columns: [],
          keyColumns: [],
        },
      },
    }),
  ),
  {
    name: 'Relation inside a stream segment (xid prefix)',
    inStream: true,
    bytes: relationBytes(7, 's', 't', [{ name: 'a', typeOid: 23, key: true }], { xid: 901 }),
    expected: {
      tag: 'relation',
      xid: 901,
      relation: {
        id: 7,
        schema: 's',
        table: 't',
        replicaIdentity: 'full',
        columns: [{ name: 'a', typeOid: 23, typeMod: -1, isKey: true, flags: 1 }],
        keyColumns: [0],
      },
    },
  },
  {
    name: 'Type',
    bytes: Wire.of('Y').u32(16_400).cstring('public').cstring('mood').build(),
    expected: { tag: 'type', xid: undefined, typeOid: 16_400, schema: 'public', name: 'mood' },
  },
  {
    name: 'Type in a stream segment, pg_catalog sent as empty',
    inStream: true,
    bytes: Wire.of('Y').u32(5).u32(16_400).cstring('').cstring('mood').build(),
    expected: { tag: 'type', xid: 5, typeOid: 16_400, schema: 'pg_catalog', name: 'mood' },
  },
  {
    name: 'Insert with text, NULL, empty string and unicode',
    bytes: Wire.of('I').u32(16_385).char('N').tuple(['42', null, '', 'héllo wörld ✓ 🚀']).build(),
    expected: { tag: 'insert', xid: undefined, relationId: 16_385, newTuple: ['42', null, '', 'héllo wörld ✓ 🚀'], byteLength: 0 },
  },
  {
    name: 'Insert with zero columns',
    bytes: Wire.of('I').u32(1).char('N').tuple([]).build(),
    expected: { tag: 'insert', xid: undefined, relationId: 1, newTuple: [], byteLength: 0 },
  },
  {
    name: 'Insert with a value containing NUL-free control characters and quotes',
    bytes: Wire.of('I').u32(1).char('N').tuple(['a\tb\nc"d\\e\'f']).build(),
    expected: { tag: 'insert', xid: undefined, relationId: 1, newTuple: ['a\tb\nc"d\\e\'f'], byteLength: 0 },
  },
  {
    name: 'Insert in a stream segment',
    inStream: true,
    bytes: Wire.of('I').u32(777).u32(1).char('N').tuple(['1']).build(),
    expected: { tag: 'insert', xid: 777, relationId: 1, newTuple: ['1'], byteLength: 0 },
  },
  {
    name: 'Update without old tuple, with unchanged TOAST',
    bytes: Wire.of('U').u32(9).char('N').tuple(['1', 'UNCHANGED', null]).build(),
    expected: {
      tag: 'update',
      xid: undefined,
      relationId: 9,
      oldTuple: undefined,
      oldTupleKind: undefined,
      newTuple: ['1', UNCHANGED_TOAST, null],
      byteLength: 0,
    },
  },
  {
    name: "Update with a key old tuple ('K')",
    bytes: Wire.of('U').u32(9).char('K').tuple(['1', null]).char('N').tuple(['2', 'x']).build(),
    expected: { tag: 'update', xid: undefined, relationId: 9, oldTuple: ['1', null], oldTupleKind: 'key', newTuple: ['2', 'x'], byteLength: 0 },
  },
  {
    name: "Update with a full old tuple ('O')",
    bytes: Wire.of('U').u32(9).char('O').tuple(['1', 'big']).char('N').tuple(['1', 'UNCHANGED']).build(),
    expected: {
      tag: 'update',
      xid: undefined,
      relationId: 9,
      oldTuple: ['1', 'big'],
      oldTupleKind: 'full',
      newTuple: ['1', UNCHANGED_TOAST],
      byteLength: 0,
    },
  },
  {
    name: 'Update in a stream segment',
    inStream: true,
    bytes: Wire.of('U').u32(12).u32(9).char('O').tuple(['1']).char('N').tuple(['2']).build(),
    expected: { tag: 'update', xid: 12, relationId: 9, oldTuple: ['1'], oldTupleKind: 'full', newTuple: ['2'], byteLength: 0 },
  },
  {
    name: "Delete with key ('K')",
    bytes: Wire.of('D').u32(9).char('K').tuple(['1', null]).build(),
    expected: { tag: 'delete', xid: undefined, relationId: 9, oldTuple: ['1', null], oldTupleKind: 'key', byteLength: 0 },
  },
  {
    name: "Delete with full old row ('O')",
    bytes: Wire.of('D').u32(9).char('O').tuple(['1', 'x']).build(),
    expected: { tag: 'delete', xid: undefined, relationId: 9, oldTuple: ['1', 'x'], oldTupleKind: 'full', byteLength: 0 },
  },
  {
    name: 'Delete in a stream segment',
    inStream: true,
    bytes: Wire.of('D').u32(3).u32(9).char('O').tuple([null]).build(),
    expected: { tag: 'delete', xid: 3, relationId: 9, oldTuple: [null], oldTupleKind: 'full', byteLength: 0 },
  },
  {
    name: 'Truncate, no options',
    bytes: Wire.of('T').i32(2).u8(0).u32(10).u32(11).build(),
    expected: { tag: 'truncate', xid: undefined, cascade: false, restartIdentity: false, relationIds: [10, 11] },
  },
  {
    name: 'Truncate CASCADE RESTART IDENTITY',
    bytes: Wire.of('T').i32(1).u8(3).u32(10).build(),
    expected: { tag: 'truncate', xid: undefined, cascade: true, restartIdentity: true, relationIds: [10] },
  },
  {
    name: 'Truncate RESTART IDENTITY in a stream segment',
    inStream: true,
    bytes: Wire.of('T').u32(44).i32(1).u8(2).u32(10).build(),
    expected: { tag: 'truncate', xid: 44, cascade: false, restartIdentity: true, relationIds: [10] },
  },
  {
    name: 'Message, transactional',
    bytes: Wire.of('M').u8(1).u64(LSN).cstring('sluice').i32(5).raw(Buffer.from('hello')).build(),
    expected: { tag: 'message', xid: undefined, transactional: true, lsn: LSN, prefix: 'sluice', content: Buffer.from('hello') },
  },
  {
    name: 'Message, non-transactional, empty content',
    bytes: Wire.of('M').u8(0).u64(LSN).cstring('').i32(0).build(),
    expected: { tag: 'message', xid: undefined, transactional: false, lsn: LSN, prefix: '', content: Buffer.alloc(0) },
  },
  {
    name: 'Message in a stream segment',
    inStream: true,
    bytes: Wire.of('M').u32(8).u8(1).u64(LSN).cstring('p').i32(2).raw(Buffer.from([0, 255])).build(),
    expected: { tag: 'message', xid: 8, transactional: true, lsn: LSN, prefix: 'p', content: Buffer.from([0, 255]) },
  },
  {
    name: 'Stream Start, first segment',
    bytes: Wire.of('S').u32(1234).u8(1).build(),
    expected: { tag: 'stream-start', xid: 1234, firstSegment: true },
  },
  {
    name: 'Stream Start, later segment',
    bytes: Wire.of('S').u32(1234).u8(0).build(),
    expected: { tag: 'stream-start', xid: 1234, firstSegment: false },
  },
  { name: 'Stream Stop', inStream: true, bytes: Wire.of('E').build(), expected: { tag: 'stream-stop' } },
  {
    name: 'Stream Commit',
    bytes: Wire.of('c').u32(1234).u8(0).u64(LSN).u64(END_LSN).i64(TS).build(),
    expected: { tag: 'stream-commit', xid: 1234, flags: 0, commitLsn: LSN, endLsn: END_LSN, commitTime: TS },
  },
  {
    name: 'Stream Abort of the whole transaction',
    bytes: Wire.of('A').u32(1234).u32(1234).build(),
    expected: { tag: 'stream-abort', xid: 1234, subxid: 1234 },
  },
  {
    name: 'Stream Abort of a subtransaction',
    bytes: Wire.of('A').u32(1234).u32(1240).build(),
    expected: { tag: 'stream-abort', xid: 1234, subxid: 1240 },
  },
]

/** byteLength is the message's own size; fill it in rather than restating it in every case. */
function withSize(expected: PgoutputMessage, bytes: Buffer): PgoutputMessage {
  return 'byteLength' in expected ? { ...expected, byteLength: bytes.length } : expected
}

describe('decodePgoutput', () => {
  it.each(cases)('$name', ({ bytes, inStream, expected }) => {
    expect(decodePgoutput(bytes, { inStream: inStream ?? false })).toEqual(withSize(expected, bytes))
  })

  // The connection hands each message over as the XLogData chunk and where the message starts in it.
  it.each(cases)('decodes $name from inside a larger buffer', ({ bytes, inStream, expected }) => {
    const chunk = Buffer.concat([Buffer.from('w-header-bytes-'), bytes])
    const start = chunk.length - bytes.length
    expect(decodePgoutput(chunk, { inStream: inStream ?? false }, start)).toEqual(withSize(expected, bytes))
  })

  // LSNs and timestamps come from two 32-bit halves as one Number when exact, else as BigInt arithmetic.
  it.each([
    0n,
    1n,
    0xffff_ffffn,
    0x1_0000_0000n,
    2n ** 53n - 1n,
    2n ** 53n,
    2n ** 53n + 1n,
    0x8000_0000_0000_0000n,
    2n ** 64n - 1n,
  ])('reads the u64 LSN %s exactly', (lsn) => {
    const message = decodePgoutput(Wire.of('B').u64(lsn).i64(0n).u32(1).build())
    expect(message).toMatchObject({ tag: 'begin', finalLsn: lsn })
  })

  it.each([0n, -1n, 1n, -(2n ** 32n), -(2n ** 53n), -(2n ** 53n) - 1n, 2n ** 53n + 1n, -(2n ** 63n), 2n ** 63n - 1n, TS, -TS])(
    'reads the i64 timestamp %s exactly',
    (ts) => {
      const message = decodePgoutput(Wire.of('B').u64(1n).i64(ts).u32(1).build())
      expect(message).toMatchObject({ tag: 'begin', commitTime: ts })
    },
  )

  it('names the column whose value runs past the end', () => {
    const bytes = Wire.of('I').u32(1).char('N').tuple(['1', 'two']).build()
    const error = errorOf(() => decodePgoutput(bytes.subarray(0, bytes.length - 1)))
    expect(error).toMatchObject({ code: 'pgoutput_truncated' })
    expect((error as Error).message).toContain('value of column 1 needs 3 byte(s)')
  })

  it('keeps a 4 MiB value intact', () => {
    const huge = 'x'.repeat(4 * 1024 * 1024 - 3) + '€'
    const bytes = Wire.of('I').u32(1).char('N').tuple([huge, 'tail']).build()
    const message = decodePgoutput(bytes)
    expect(message.tag === 'insert' && message.newTuple).toEqual([huge, 'tail'])
  })

  it('decodes each text value as its own bytes would decode, whatever its neighbours (random rows)', () => {
    // Values are raw bytes: valid and broken UTF-8, lengths whose header bytes are not ASCII (128+), nulls and
    // unchanged markers between them; the tuple is decoded in one piece only when that is exact (decodeTexts).
    const byte = fc.oneof(fc.integer({ min: 0x20, max: 0x7e }), fc.integer({ min: 0, max: 255 }))
    const text = fc.oneof(
      fc.string({ unit: 'grapheme', maxLength: 40 }).map((s) => Buffer.from(s, 'utf8')),
      fc.uint8Array({ maxLength: 40 }).map((b) => Buffer.from(b)),
      fc.array(byte, { minLength: 120, maxLength: 400 }).map((b) => Buffer.from(b)),
    )
    const cell = fc.oneof({ weight: 6, arbitrary: text }, { weight: 1, arbitrary: fc.constantFrom<null | 'UNCHANGED'>(null, 'UNCHANGED') })
    fc.assert(
      fc.property(fc.array(cell, { maxLength: 12 }), (cells) => {
        const wire = Wire.of('I').u32(1).char('N').i16(cells.length)
        for (const c of cells) {
          if (c === null) wire.char('n')
          else if (c === 'UNCHANGED') wire.char('u')
          else wire.char('t').i32(c.length).raw(c)
        }
        const message = decodePgoutput(wire.build())
        const expected = cells.map((c) => (c === null ? null : c === 'UNCHANGED' ? UNCHANGED_TOAST : c.toString('utf8')))
        expect(message.tag === 'insert' && message.newTuple).toEqual(expected)
      }),
      { numRuns: process.env.SOAK === '1' ? 20_000 : 1_000 },
    )
  })

  it('reads every LSN and timestamp right when messages repeat them or not (random sequences)', () => {
    // u64/i64 hand a repeated value the BigInt they made for it last: repeats, near misses (same high or low
    // half) and values past 2^53 must all come out exact.
    const lsns = [0n, 1n, 2n ** 32n, 2n ** 32n + 1n, 2n ** 53n + 1n, 2n ** 64n - 1n, 0x16_b374_d848n]
    const times = [0n, -1n, -(2n ** 32n), 2n ** 32n, 2n ** 53n + 3n, -(2n ** 63n), 2n ** 63n - 1n, 781_234_567_890_123n]
    fc.assert(
      fc.property(fc.array(fc.tuple(fc.constantFrom(...lsns), fc.constantFrom(...times)), { maxLength: 20 }), (pairs) => {
        for (const [lsn, time] of pairs) {
          const message = decodePgoutput(Wire.of('B').u64(lsn).i64(time).u32(7).build())
          expect(message).toEqual({ tag: 'begin', finalLsn: lsn, commitTime: time, xid: 7 })
        }
      }),
    )
  })

  it('decodes a row of two values too long to join into one string', () => {
    const big = 'y'.repeat(70 * 1024)
    const bytes = Wire.of('I').u32(1).char('N').tuple([big, 'ä', big]).build()
    const message = decodePgoutput(bytes)
    expect(message.tag === 'insert' && message.newTuple).toEqual([big, 'ä', big])
  })

  it('copies message content out of the input buffer (the connection reuses it)', () => {
    const bytes = Wire.of('M').u8(1).u64(1n).cstring('p').i32(3).raw(Buffer.from('abc')).build()
    const message = decodePgoutput(bytes)
    bytes.fill(0)
    expect(message.tag === 'message' && message.content.toString()).toBe('abc')
  })

  it('refuses binary values with a typed error', () => {
    const bytes = Wire.of('I').u32(1).char('N').tuple(['1', { binary: Buffer.from([0, 1]) }]).build()
    expect(() => decodePgoutput(bytes)).toThrow(PgoutputDecodeError)
    expect(errorOf(() => decodePgoutput(bytes))).toMatchObject({ code: 'binary_tuple_value', fatal: true })
  })

  const malformed: Array<{ name: string; bytes: Buffer; inStream?: boolean; code: string }> = [
    { name: 'empty buffer', bytes: Buffer.alloc(0), code: 'pgoutput_truncated' },
    { name: 'unknown message type', bytes: Wire.of('Z').build(), code: 'pgoutput_unsupported' },
    { name: 'protocol 3 Begin Prepare', bytes: Wire.of('b').u64(1n).build(), code: 'pgoutput_unsupported' },
    { name: 'unknown tuple value kind', bytes: Wire.of('I').u32(1).char('N').i16(1).char('x').build(), code: 'pgoutput_malformed' },
    { name: 'Insert without N', bytes: Wire.of('I').u32(1).char('K').tuple([]).build(), code: 'pgoutput_malformed' },
    { name: 'Update with a bad marker', bytes: Wire.of('U').u32(1).char('X').tuple([]).build(), code: 'pgoutput_malformed' },
    { name: 'Delete with N', bytes: Wire.of('D').u32(1).char('N').tuple([]).build(), code: 'pgoutput_malformed' },
    { name: 'unknown replica identity', bytes: relationBytes(1, 's', 't', [], { identity: 'z' }), code: 'pgoutput_malformed' },
    { name: 'negative value length', bytes: Wire.of('I').u32(1).char('N').i16(1).char('t').i32(-5).build(), code: 'pgoutput_malformed' },
    { name: 'negative column count', bytes: Wire.of('I').u32(1).char('N').i16(-1).build(), code: 'pgoutput_malformed' },
    { name: 'negative truncate count', bytes: Wire.of('T').i32(-1).u8(0).build(), code: 'pgoutput_malformed' },
    { name: 'huge truncate count', bytes: Wire.of('T').i32(1_000_000_000).u8(0).u32(1).build(), code: 'pgoutput_truncated' },
    { name: 'trailing bytes', bytes: Wire.of('E').u8(0).build(), code: 'pgoutput_malformed' },
    { name: 'a streamed Insert read as not streamed', bytes: Wire.of('I').u32(777).u32(1).char('N').tuple(['1']).build(), code: 'pgoutput_malformed' },
    { name: 'value length past the end', bytes: Wire.of('I').u32(1).char('N').i16(1).char('t').i32(10).raw(Buffer.from('abc')).build(), code: 'pgoutput_truncated' },
    { name: 'relation name without NUL', bytes: Wire.of('R').u32(1).cstring('s').raw(Buffer.from('tab')).build(), code: 'pgoutput_truncated' },
  ]

  it.each(malformed)('rejects $name ($code)', ({ bytes, inStream, code }) => {
    const error = errorOf(() => decodePgoutput(bytes, { inStream: inStream ?? false }))
    expect(error).toBeInstanceOf(PgoutputDecodeError)
    expect(error).toMatchObject({ code })
  })

  // Every valid message cut short at every length must fail with a typed
  // error: never a RangeError, never a wrong value.
  it.each(cases)('rejects every truncation of $name', ({ bytes, inStream }) => {
    for (let length = 0; length < bytes.length; length++) {
      const error = errorOf(() => decodePgoutput(bytes.subarray(0, length), { inStream: inStream ?? false }))
      expect(error, `cut at ${length} of ${bytes.length}`).toBeInstanceOf(PgoutputDecodeError)
      expect(['pgoutput_truncated', 'pgoutput_malformed', 'pgoutput_unsupported']).toContain((error as PgoutputDecodeError).code)
    }
  })
})

describe('PgoutputDecoder', () => {
  it('reads the xid prefix only between Stream Start and Stream Stop', () => {
    const decoder = new PgoutputDecoder()
    const insertPlain = Wire.of('I').u32(1).char('N').tuple(['a']).build()
    const insertStreamed = Wire.of('I').u32(900).u32(1).char('N').tuple(['b']).build()
    expect(decoder.decode(insertPlain)).toMatchObject({ xid: undefined, relationId: 1 })
    expect(decoder.decode(Wire.of('S').u32(900).u8(1).build())).toMatchObject({ tag: 'stream-start' })
    expect(decoder.streaming).toBe(true)
    expect(decoder.decode(insertStreamed)).toMatchObject({ xid: 900, relationId: 1, newTuple: ['b'] })
    expect(decoder.decode(Wire.of('E').build())).toEqual({ tag: 'stream-stop' })
    expect(decoder.streaming).toBe(false)
    expect(decoder.decode(insertPlain)).toMatchObject({ xid: undefined })
  })
})

function errorOf(run: () => unknown): unknown {
  try {
    run()
  } catch (error) {
    return error
  }
  throw new Error('expected an error')
}
