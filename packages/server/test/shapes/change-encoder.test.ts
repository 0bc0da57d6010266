import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { rowKeyFromValue, rowKeyFromValues, rowKeyPrefix } from '@sluice/protocol'
import { UNCHANGED_TOAST, UnchangedToastError } from '../../src/replication/index.js'
import type { Change, Relation } from '../../src/replication/index.js'
import { ChangeEncoder, ChangeEncodingError } from '../../src/shapes/index.js'
import { LineScratch } from '../../src/shapes/line-scratch.js'
import type { ChangePosition, EncodableChange, EncodedLine, TableDescription } from '../../src/shapes/index.js'

const items: TableDescription = { schema: 'public', name: 'items', columns: ['id', 'title', 'note'], primaryKey: ['id'] }
const pair: TableDescription = { schema: 'public', name: 'pair', columns: ['b', 'a', 'v'], primaryKey: ['a', 'b'] }
const nopk: TableDescription = { schema: 'public', name: 'log', columns: ['z', 'a'], primaryKey: [] }
const odd: TableDescription = { schema: 'my.schema/x', name: 'we"ird.t/b', columns: ['id', 'a.b', 'say "hi"'], primaryKey: ['id'] }

const pos: ChangePosition = { lsn: 23_456_789n, op: 4, txid: 770, last: false }
const last: ChangePosition = { ...pos, last: true }
const R = '"relation":["public","items"]'
const T = '"lsn":"23456789","op_position":4,"txids":[770]'

const text = (line: EncodedLine): string => new TextDecoder().decode(line.bytes)

interface Case {
  readonly name: string
  readonly table: TableDescription
  readonly columns?: readonly string[]
  readonly replica?: 'default' | 'full'
  readonly change: EncodableChange
  readonly position?: ChangePosition
  readonly lines: readonly string[]
}

const cases: readonly Case[] = [
  {
    name: 'insert with NULL',
    table: items,
    change: { kind: 'insert', newTuple: ['1', 'hello', null] },
    lines: [`{"key":"\\"public\\".\\"items\\"/\\"1\\"","value":{"id":"1","title":"hello","note":null},"headers":{"operation":"insert",${R},${T}}}`],
  },
  {
    name: 'insert with unicode, quotes, backslashes and control characters; last',
    table: items,
    change: { kind: 'insert', newTuple: ['2', 'héllo ✓ 😀 "q" \\x0001', 'a\nb\tc\u0000\u001f\u007f\u2028'] },
    position: last,
    lines: [
      `{"key":"\\"public\\".\\"items\\"/\\"2\\"","value":{"id":"2","title":"héllo ✓ 😀 \\"q\\" \\\\x0001","note":"a\\nb\\tc\\u0000\\u001f\u007f\u2028"},"headers":{"operation":"insert",${R},${T},"last":true}}`,
    ],
  },
  {
    name: 'insert with a projection',
    table: items,
    columns: ['note', 'id'],
    change: { kind: 'insert', newTuple: ['3', 'x', 'n'] },
    lines: [`{"key":"\\"public\\".\\"items\\"/\\"3\\"","value":{"id":"3","note":"n"},"headers":{"operation":"insert",${R},${T}}}`],
  },
  {
    name: 'key escaping: / doubled in values, . and / doubled in names, quotes kept',
    table: odd,
    change: { kind: 'insert', newTuple: ['a/b"c', '1', '2'] },
    lines: [
      `{"key":"\\"my..schema//x\\".\\"we\\"ird..t//b\\"/\\"a//b\\"c\\"","value":{"id":"a/b\\"c","a.b":"1","say \\"hi\\"":"2"},"headers":{"operation":"insert","relation":["my.schema/x","we\\"ird.t/b"],${T}}}`,
    ],
  },
  {
    name: 'composite PK in PK order, NULL component',
    table: pair,
    change: { kind: 'insert', newTuple: ['b1', null, 'v'] },
    lines: [
      `{"key":"\\"public\\".\\"pair\\"/_/\\"b1\\"","value":{"b":"b1","a":null,"v":"v"},"headers":{"operation":"insert","relation":["public","pair"],${T}}}`,
    ],
  },
  {
    name: 'update, default: PK + changed columns',
    table: items,
    change: { kind: 'update', newTuple: ['1', 'new', 'same'], oldTuple: ['1', 'old', 'same'], oldTupleKind: 'full' },
    lines: [`{"key":"\\"public\\".\\"items\\"/\\"1\\"","value":{"id":"1","title":"new"},"headers":{"operation":"update",${R},${T}}}`],
  },
  {
    name: 'update, default, NULL to value',
    table: items,
    change: { kind: 'update', newTuple: ['1', 't', 'x'], oldTuple: ['1', 't', null], oldTupleKind: 'full' },
    position: last,
    lines: [`{"key":"\\"public\\".\\"items\\"/\\"1\\"","value":{"id":"1","note":"x"},"headers":{"operation":"update",${R},${T},"last":true}}`],
  },
  {
    name: 'update, default, no old row: every column counts as changed',
    table: items,
    change: { kind: 'update', newTuple: ['1', 't', 'x'], oldTuple: undefined, oldTupleKind: undefined },
    lines: [`{"key":"\\"public\\".\\"items\\"/\\"1\\"","value":{"id":"1","title":"t","note":"x"},"headers":{"operation":"update",${R},${T}}}`],
  },
  {
    name: 'update, default, projection hides the changed column',
    table: items,
    columns: ['id', 'title'],
    change: { kind: 'update', newTuple: ['1', 't', 'new'], oldTuple: ['1', 't', 'old'], oldTupleKind: 'full' },
    lines: [`{"key":"\\"public\\".\\"items\\"/\\"1\\"","value":{"id":"1"},"headers":{"operation":"update",${R},${T}}}`],
  },
  {
    name: 'update, full: whole new row and old values of changed columns',
    table: items,
    replica: 'full',
    change: { kind: 'update', newTuple: ['1', 'new', 'same'], oldTuple: ['1', 'old', 'same'], oldTupleKind: 'full' },
    lines: [
      `{"key":"\\"public\\".\\"items\\"/\\"1\\"","value":{"id":"1","title":"new","note":"same"},"old_value":{"title":"old"},"headers":{"operation":"update",${R},${T}}}`,
    ],
  },
  {
    name: 'update, full, with projection',
    table: items,
    replica: 'full',
    columns: ['id', 'note'],
    change: { kind: 'update', newTuple: ['1', 'new', null], oldTuple: ['1', 'old', 'n'], oldTupleKind: 'full' },
    lines: [
      `{"key":"\\"public\\".\\"items\\"/\\"1\\"","value":{"id":"1","note":null},"old_value":{"note":"n"},"headers":{"operation":"update",${R},${T}}}`,
    ],
  },
  {
    name: 'delete, default: PK only',
    table: items,
    change: { kind: 'delete', oldTuple: ['1', 't', 'n'], oldTupleKind: 'full' },
    lines: [`{"key":"\\"public\\".\\"items\\"/\\"1\\"","value":{"id":"1"},"headers":{"operation":"delete",${R},${T}}}`],
  },
  {
    name: 'delete, default, key-only old tuple',
    table: items,
    change: { kind: 'delete', oldTuple: ['1', null, null], oldTupleKind: 'key' },
    lines: [`{"key":"\\"public\\".\\"items\\"/\\"1\\"","value":{"id":"1"},"headers":{"operation":"delete",${R},${T}}}`],
  },
  {
    name: 'delete, full: whole old row',
    table: items,
    replica: 'full',
    change: { kind: 'delete', oldTuple: ['1', 't', null], oldTupleKind: 'full' },
    position: last,
    lines: [`{"key":"\\"public\\".\\"items\\"/\\"1\\"","value":{"id":"1","title":"t","note":null},"headers":{"operation":"delete",${R},${T},"last":true}}`],
  },
  {
    name: 'delete without PK: all columns; key by column name',
    table: nopk,
    change: { kind: 'delete', oldTuple: ['zz', 'aa'], oldTupleKind: 'full' },
    lines: [`{"key":"\\"public\\".\\"log\\"/\\"aa\\"/\\"zz\\"","value":{"z":"zz","a":"aa"},"headers":{"operation":"delete","relation":["public","log"],${T}}}`],
  },
  {
    name: 'delete, composite PK',
    table: pair,
    change: { kind: 'delete', oldTuple: ['b1', 'a1', 'v'], oldTupleKind: 'full' },
    lines: [`{"key":"\\"public\\".\\"pair\\"/\\"a1\\"/\\"b1\\"","value":{"b":"b1","a":"a1"},"headers":{"operation":"delete","relation":["public","pair"],${T}}}`],
  },
  {
    name: 'PK change, default: delete(op, key_change_to) then insert(op+1, key_change_from, last)',
    table: items,
    change: { kind: 'update', newTuple: ['2', 't', 'n'], oldTuple: ['1', 't', 'n'], oldTupleKind: 'full' },
    position: last,
    lines: [
      `{"key":"\\"public\\".\\"items\\"/\\"1\\"","value":{"id":"1"},"headers":{"operation":"delete",${R},"key_change_to":"\\"public\\".\\"items\\"/\\"2\\"",${T}}}`,
      `{"key":"\\"public\\".\\"items\\"/\\"2\\"","value":{"id":"2","title":"t","note":"n"},"headers":{"operation":"insert",${R},"key_change_from":"\\"public\\".\\"items\\"/\\"1\\"","lsn":"23456789","op_position":5,"txids":[770],"last":true}}`,
    ],
  },
  {
    name: 'PK change, default, composite key, key-only old tuple',
    table: pair,
    change: { kind: 'update', newTuple: ['b1', 'a2', 'v'], oldTuple: ['b1', 'a1', null], oldTupleKind: 'key' },
    lines: [
      `{"key":"\\"public\\".\\"pair\\"/\\"a1\\"/\\"b1\\"","value":{"b":"b1","a":"a1"},"headers":{"operation":"delete","relation":["public","pair"],"key_change_to":"\\"public\\".\\"pair\\"/\\"a2\\"/\\"b1\\"",${T}}}`,
      `{"key":"\\"public\\".\\"pair\\"/\\"a2\\"/\\"b1\\"","value":{"b":"b1","a":"a2","v":"v"},"headers":{"operation":"insert","relation":["public","pair"],"key_change_from":"\\"public\\".\\"pair\\"/\\"a1\\"/\\"b1\\"","lsn":"23456789","op_position":5,"txids":[770]}}`,
    ],
  },
  {
    name: 'PK change, full: delete carries the whole old row',
    table: items,
    replica: 'full',
    columns: ['id', 'title'],
    change: { kind: 'update', newTuple: ['2', 'b', 'n'], oldTuple: ['1', 'a', 'n'], oldTupleKind: 'full' },
    lines: [
      `{"key":"\\"public\\".\\"items\\"/\\"1\\"","value":{"id":"1","title":"a"},"headers":{"operation":"delete",${R},"key_change_to":"\\"public\\".\\"items\\"/\\"2\\"",${T}}}`,
      `{"key":"\\"public\\".\\"items\\"/\\"2\\"","value":{"id":"2","title":"b"},"headers":{"operation":"insert",${R},"key_change_from":"\\"public\\".\\"items\\"/\\"1\\"","lsn":"23456789","op_position":5,"txids":[770]}}`,
    ],
  },
  {
    name: 'update of a table without PK changes its key: split',
    table: nopk,
    change: { kind: 'update', newTuple: ['z2', 'a'], oldTuple: ['z1', 'a'], oldTupleKind: 'full' },
    lines: [
      `{"key":"\\"public\\".\\"log\\"/\\"a\\"/\\"z1\\"","value":{"z":"z1","a":"a"},"headers":{"operation":"delete","relation":["public","log"],"key_change_to":"\\"public\\".\\"log\\"/\\"a\\"/\\"z2\\"",${T}}}`,
      `{"key":"\\"public\\".\\"log\\"/\\"a\\"/\\"z2\\"","value":{"z":"z2","a":"a"},"headers":{"operation":"insert","relation":["public","log"],"key_change_from":"\\"public\\".\\"log\\"/\\"a\\"/\\"z1\\"","lsn":"23456789","op_position":5,"txids":[770]}}`,
    ],
  },
  {
    name: 'large LSN and xid',
    table: items,
    change: { kind: 'insert', newTuple: ['1', null, null] },
    position: { lsn: 18_446_744_073_709_551_615n, op: 0, txid: 4_294_967_295, last: true },
    lines: [
      `{"key":"\\"public\\".\\"items\\"/\\"1\\"","value":{"id":"1","title":null,"note":null},"headers":{"operation":"insert",${R},"lsn":"18446744073709551615","op_position":0,"txids":[4294967295],"last":true}}`,
    ],
  },
]

describe('ChangeEncoder', () => {
  it.each(cases)('$name', (c) => {
    const encoder = new ChangeEncoder({ table: c.table, columns: c.columns, replica: c.replica ?? 'default' })
    const position = c.position ?? pos
    const lines = encoder.encode(c.change, position)
    expect(lines.map(text)).toEqual(c.lines)
    lines.forEach((line, i) => {
      const parsed = JSON.parse(text(line)) as { key: string; headers: { operation: string; op_position: number } }
      expect(line.op).toBe(position.op + i)
      expect(parsed.headers.op_position).toBe(line.op)
      expect(parsed.headers.operation).toBe(line.operation)
    })
  })

  it('escapes values exactly like JSON.stringify (fuzzed code points)', () => {
    const encoder = new ChangeEncoder({ table: items, replica: 'default' })
    const chars = ['\u0000', '\b', '\f', '\n', '\r', '\t', '\u001b', '"', '\\', '/', 'é', '\u2028', '\ud83d\ude00', '\ud800', '\udfff', 'x']
    for (let n = 0; n < 200; n++) {
      let s = ''
      for (let k = 0; k < 8; k++) s += chars[(n * 7 + k * 13 + (n >> 2)) % chars.length]
      const [line] = encoder.encode({ kind: 'insert', newTuple: ['1', s, null] }, pos)
      if (line === undefined) throw new Error('no line')
      const expected = { key: '"public"."items"/"1"', value: { id: '1', title: s, note: null }, headers: { operation: 'insert', relation: ['public', 'items'], lsn: '23456789', op_position: 4, txids: [770] } }
      expect(text(line)).toBe(JSON.stringify(expected))
    }
  })

  it('escapes long and short values exactly like JSON.stringify (random strings, both copy paths)', () => {
    // Values of 24+ units with nothing to escape are copied natively; one escape or non-ASCII unit anywhere
    // sends the value through the per-character path. Mostly plain text, so both paths are taken often.
    const encoder = new ChangeEncoder({ table: items, replica: 'default' })
    const plain = fc.string({ unit: fc.constantFrom(...'abcXYZ019 -:./~/_\u007f'.split('')), maxLength: 60 })
    const special = fc.constantFrom('"', '\\', '\n', '\u0000', '\u001f', 'é', '€', '\u2028', '\ud83d\ude00', '\ud800', '\udfff')
    const value = fc.oneof(
      { weight: 3, arbitrary: plain },
      { weight: 2, arbitrary: fc.tuple(plain, special, plain).map(([a, b, c]) => a + b + c) },
      { weight: 1, arbitrary: fc.string({ unit: 'binary', maxLength: 80 }) },
    )
    const weird = new ChangeEncoder({ table: odd, replica: 'default' })
    const keyOf = (table: TableDescription, id: string): string => rowKeyFromValue(rowKeyPrefix({ schema: table.schema, name: table.name }), id)
    fc.assert(
      fc.property(value, value, value, fc.boolean(), (id, title, note, odder) => {
        const table = odder ? odd : items
        const [line] = (odder ? weird : encoder).encode({ kind: 'insert', newTuple: [id, title, note] }, pos)
        const [c1, c2, c3] = table.columns as [string, string, string]
        const expected = {
          key: keyOf(table, id),
          value: { [c1]: id, [c2]: title, [c3]: note },
          headers: { operation: 'insert', relation: [table.schema, table.name], lsn: '23456789', op_position: 4, txids: [770] },
        }
        expect(text(line!)).toBe(JSON.stringify(expected))
      }),
      { numRuns: process.env.SOAK === '1' ? 50_000 : 2_000 },
    )
  })

  it('writes row keys, key changes included, exactly as the key functions build them (random keys)', () => {
    // Keys are written from the key values (slashes doubled inside the key, then JSON-escaped), not from a key
    // string; a value past ASCII takes the key string. Two-column keys, NULL parts and key changes too.
    const part = fc.oneof(
      fc.string({ unit: fc.constantFrom(...'ab/_"\\\n9'.split('')), maxLength: 8 }),
      fc.string({ unit: 'binary', maxLength: 6 }),
      fc.constant(null),
    )
    const one = new ChangeEncoder({ table: items, replica: 'default' })
    const two = new ChangeEncoder({ table: pair, replica: 'full' })
    const keyOf = (table: TableDescription, values: readonly (string | null)[]): string => rowKeyFromValues(rowKeyPrefix({ schema: table.schema, name: table.name }), values)
    const keys = (lines: EncodedLine[]): Array<{ key: string; to?: string; from?: string }> =>
      lines.map((l) => {
        const parsed = JSON.parse(text(l)) as { key: string; headers: { key_change_to?: string; key_change_from?: string } }
        return { key: parsed.key, ...(parsed.headers.key_change_to === undefined ? {} : { to: parsed.headers.key_change_to }), ...(parsed.headers.key_change_from === undefined ? {} : { from: parsed.headers.key_change_from }) }
      })
    fc.assert(
      fc.property(part, part, part, part, (a, b, c, d) => {
        // items: key (id); insert, delete, and an update that may change the key.
        expect(keys(one.encode({ kind: 'insert', newTuple: [a, 'x', null] }, pos))).toEqual([{ key: keyOf(items, [a]) }])
        expect(keys(one.encode({ kind: 'delete', oldTuple: [a, 'x', null], oldTupleKind: 'full' }, pos))).toEqual([{ key: keyOf(items, [a]) }])
        const update = one.encode({ kind: 'update', newTuple: [b, 'y', null], oldTuple: [a, 'x', null], oldTupleKind: 'full' }, pos)
        const [ka, kb] = [keyOf(items, [a]), keyOf(items, [b])]
        expect(keys(update)).toEqual(ka === kb ? [{ key: kb }] : [{ key: ka, to: kb }, { key: kb, from: ka }])
        // pair: columns (b, a, v), key (a, b).
        const next = [d, c, 'v2']
        const prev = [b, a, 'v1']
        const [kp, kn] = [keyOf(pair, [a, b]), keyOf(pair, [c, d])]
        const lines = two.encode({ kind: 'update', newTuple: next, oldTuple: prev, oldTupleKind: 'full' }, pos)
        expect(keys(lines)).toEqual(kp === kn ? [{ key: kn }] : [{ key: kp, to: kn }, { key: kn, from: kp }])
      }),
      { numRuns: process.env.SOAK === '1' ? 50_000 : 2_000 },
    )
  })

  it.each([
    ['projection without the PK', () => new ChangeEncoder({ table: items, columns: ['title'], replica: 'default' }), 'invalid_table'],
    ['unknown selected column', () => new ChangeEncoder({ table: items, columns: ['id', 'nope'], replica: 'default' }), 'invalid_table'],
    ['unknown PK column', () => new ChangeEncoder({ table: { ...items, primaryKey: ['nope'] }, replica: 'default' }), 'invalid_table'],
    ['negative op', () => new ChangeEncoder({ table: items, replica: 'default' }).encode({ kind: 'insert', newTuple: ['1', null, null] }, { ...pos, op: -1 }), 'invalid_position'],
    ['64-bit xid', () => new ChangeEncoder({ table: items, replica: 'default' }).encode({ kind: 'insert', newTuple: ['1', null, null] }, { ...pos, txid: 2 ** 32 }), 'invalid_position'],
    ['LSN above u64', () => new ChangeEncoder({ table: items, replica: 'default' }).encode({ kind: 'insert', newTuple: ['1', null, null] }, { ...pos, lsn: 2n ** 64n }), 'invalid_position'],
    ['short tuple', () => new ChangeEncoder({ table: items, replica: 'default' }).encode({ kind: 'insert', newTuple: ['1'] }, pos), 'invalid_tuple'],
    ['full update without old row', () => new ChangeEncoder({ table: items, replica: 'full' }).encode({ kind: 'update', newTuple: ['1', 'a', 'b'], oldTuple: undefined }, pos), 'missing_old_row'],
    ['full delete with key-only old row', () => new ChangeEncoder({ table: items, replica: 'full' }).encode({ kind: 'delete', oldTuple: ['1', null, null], oldTupleKind: 'key' }, pos), 'missing_old_row'],
  ] as const)('rejects %s', (_name, run, code) => {
    expect(run).toThrow(ChangeEncodingError)
    try {
      run()
    } catch (error) {
      expect((error as ChangeEncodingError).code).toBe(code)
    }
  })

  it('writes the same bytes into a scratch as on its own, across its slabs and past them', () => {
    const encoder = new ChangeEncoder({ table: items, replica: 'full' })
    const scratch = new LineScratch()
    const chars = ['a', 'Z', '0', ' ', '"', '\\', '/', '\n', '\u0000', '\u001f', '\u007f', 'é', '€', '\u2028', '\ud83d\ude00', '\ud800', '\udfff']
    let seed = 7
    const next = (n: number): number => {
      seed = (seed * 1103515245 + 12345) % 2 ** 31
      return seed % n
    }
    const randomText = (n: number): string => Array.from({ length: n }, () => chars[next(chars.length)]).join('')
    const written: Array<[Uint8Array, string]> = []
    for (let n = 0; n < 3000; n++) {
      // Mostly short values; now and then one past a scratch slab (256 KiB) and one that is pure ASCII.
      const long = n % 997 === 0 ? 300_000 : n % 3 === 0 ? 2000 : 40
      const title = n % 5 === 0 ? 'x'.repeat(next(long) + 1) : randomText(next(long) + 1)
      const change: EncodableChange =
        n % 4 === 0
          ? { kind: 'update', newTuple: [String(n), title, null], oldTuple: [String(n + 1), 'old ' + title, 'n'], oldTupleKind: 'full' }
          : n % 4 === 1
            ? { kind: 'update', newTuple: [String(n), title, randomText(3)], oldTuple: [String(n), 'before', null], oldTupleKind: 'full' }
            : n % 4 === 2
              ? { kind: 'delete', oldTuple: [String(n), title, null], oldTupleKind: 'full' }
              : { kind: 'insert', newTuple: [String(n), title, randomText(5)] }
      const position: ChangePosition = { lsn: 2n ** 63n + BigInt(n), op: n * 2, txid: 4_000_000_000 + n, last: n % 7 === 0 }
      const own = encoder.encode(change, position)
      const lines = encoder.encode(change, position, scratch)
      expect(lines.map(text)).toEqual(own.map(text))
      for (const line of lines) {
        written.push([line.bytes, text(line)])
        // A line past a slab gets memory of its own, sized by an exact count (not six bytes per character).
        if (line.bytes.length > 256 * 1024) expect(line.bytes.buffer.byteLength - line.bytes.length).toBeLessThan(4096)
      }
      for (const line of own) {
        const parsed = JSON.parse(text(line)) as { value: Record<string, string | null> }
        // Re-serialised by JSON.stringify: the same text, so the escaping is JSON.stringify's.
        expect(JSON.stringify(parsed)).toBe(text(line))
      }
    }
    // Every line of the "transaction" is still intact in the scratch at its end.
    for (const [bytes, expected] of written) expect(Buffer.from(bytes).toString('utf8')).toBe(expected)
  })

  it.each([0n, 9n, 10n, 2n ** 32n, 2n ** 53n - 1n, 2n ** 53n, 2n ** 53n + 1n, 2n ** 63n])('writes the LSN %s in decimal', (lsn) => {
    const [line] = new ChangeEncoder({ table: items, replica: 'default' }).encode({ kind: 'insert', newTuple: ['1', null, null] }, { ...pos, lsn })
    expect(JSON.parse(Buffer.from(line!.bytes).toString()).headers.lsn).toBe(lsn.toString())
  })

  it('rejects unchanged-TOAST markers', () => {
    const encoder = new ChangeEncoder({ table: items, replica: 'default' })
    const change: EncodableChange = { kind: 'update', newTuple: ['1', 'a', UNCHANGED_TOAST], oldTuple: undefined }
    expect(() => encoder.encode(change, pos)).toThrow(UnchangedToastError)
  })

  it('shares one encoder across changes without state', () => {
    const encoder = new ChangeEncoder({ table: items, replica: 'default' })
    const a = text(encoder.encode({ kind: 'insert', newTuple: ['1', 'a', null] }, pos)[0] as EncodedLine)
    encoder.encode({ kind: 'delete', oldTuple: ['9', null, null], oldTupleKind: 'key' }, last)
    expect(text(encoder.encode({ kind: 'insert', newTuple: ['1', 'a', null] }, pos)[0] as EncodedLine)).toBe(a)
  })

  it('accepts the replication stage change objects as they are', () => {
    const relation = { schema: 'public', table: 'items' } as unknown as Relation
    const changes: readonly Change[] = [
      { kind: 'update', relation, newTuple: ['1', 'b', null], oldTuple: ['1', 'a', null], oldTupleKind: 'full', unchangedToast: [] },
    ]
    const encoder = new ChangeEncoder({ table: items, replica: 'default' })
    for (const change of changes) {
      if (change.kind === 'truncate') continue
      const [line] = encoder.encode(change, pos)
      expect((JSON.parse(text(line!)) as { key: string }).key).toBe('"public"."items"/"1"')
    }
  })
})
