import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { KEEP_ALIVE_COMMENT, MalformedEntriesError, frameEntries, frameEvent, splitEntries } from '../../../src/http/live/index.js'

/** The stored format: each entry's JSON followed by `,`. */
function stored(lines: readonly string[]): Buffer {
  return Buffer.from(lines.map((l) => `${l},`).join(''))
}

/** What the HTTP body parser sees: `[` + bytes without the last `,` + `]`. */
function parseWhole(bytes: Buffer): unknown[] {
  if (bytes.length === 0) return []
  return JSON.parse(`[${bytes.subarray(0, bytes.length - 1).toString('utf8')}]`) as unknown[]
}

const AWKWARD = [
  'a,b', ',', ',,', '}', '{', '},{', ']', '[', '"', '\\', '\\\\', '\\"', '"\\', '\\\\"', 'x\\', '\\u0022',
  'é', '😀', '\u2028\u2029', '\u0000', '\n\r\t', '{"a":1},{"b":2}', 'data: x\n\n', '日本語,テキスト', '',
]

describe('splitting stored entries without parsing', () => {
  it('splits awkward string values exactly', () => {
    const values = AWKWARD.map((s, i) => ({ key: `"public"."t"/"${s}"`, value: { id: String(i), text: s, [s]: [s, { [s]: s }] }, headers: { operation: 'insert' } }))
    const lines = values.map((v) => JSON.stringify(v))
    const bytes = stored(lines)
    const parts = splitEntries(bytes)
    expect(parts.map((p) => p.toString('utf8'))).toEqual(lines)
    expect(parts.map((p) => JSON.parse(p.toString('utf8')))).toEqual(parseWhole(bytes))
    // Views, not copies.
    expect(parts[0]!.buffer).toBe(bytes.buffer)
  })

  it('handles empty input, a missing last separator, bare scalars and nested arrays', () => {
    expect(splitEntries(Buffer.alloc(0))).toEqual([])
    expect(splitEntries(Buffer.from('{"a":1}')).map(String)).toEqual(['{"a":1}'])
    expect(splitEntries(Buffer.from('1,"x,y",[1,[2,3]],{"a":[{}]},null,')).map(String)).toEqual(['1', '"x,y"', '[1,[2,3]]', '{"a":[{}]}', 'null'])
    expect(splitEntries(new Uint8Array(Buffer.from('{"a":"\\\\"},{"b":"\\""},'))).map(String)).toEqual(['{"a":"\\\\"}', '{"b":"\\""}'])
  })

  it('rejects corrupt bytes instead of guessing', () => {
    expect(() => splitEntries(Buffer.from('{"a":"x},'))).toThrow(MalformedEntriesError)
    expect(() => splitEntries(Buffer.from('{"a":1'))).toThrow(MalformedEntriesError)
    expect(() => splitEntries(Buffer.from('{"a":1}},'))).toThrow(MalformedEntriesError)
    expect(() => splitEntries(Buffer.from('{"a":"\\"},'))).toThrow(MalformedEntriesError)
  })

  it('property: splitting agrees with JSON.parse of the whole array, for any JSON values with any unicode', () => {
    const text = fc.oneof(
      fc.string({ unit: 'binary' }),
      fc.string({ unit: fc.constantFrom('"', '\\', ',', '{', '}', '[', ']', ':', 'a', 'é', '😀', '\n') }),
      fc.constantFrom(...AWKWARD),
    )
    const value = fc.letrec((tie) => ({
      v: fc.oneof(
        { depthSize: 'small' },
        text,
        fc.double({ noNaN: true, noDefaultInfinity: true }),
        fc.boolean(),
        fc.constant(null),
        fc.array(tie('v'), { maxLength: 4 }),
        fc.dictionary(text, tie('v'), { maxKeys: 4 }),
      ),
    })).v
    fc.assert(
      fc.property(fc.array(value, { maxLength: 12 }), (values) => {
        const lines = values.map((v) => JSON.stringify(v))
        const bytes = stored(lines)
        const parts = splitEntries(bytes)
        expect(parts.map((p) => JSON.parse(p.toString('utf8')))).toEqual(parseWhole(bytes))
        expect(parts.map((p) => p.toString('utf8'))).toEqual(lines)
        const { events, entryCount } = frameEntries(bytes)
        expect(entryCount).toBe(lines.length)
        expect(events.toString('utf8')).toBe(lines.map((l) => `data: ${l}\n\n`).join(''))
      }),
      { numRuns: 2000 },
    )
  })

  it('property: any JSON from fast-check jsonValue splits back exactly', () => {
    fc.assert(
      fc.property(fc.array(fc.jsonValue(), { maxLength: 10 }), (values) => {
        const lines = values.map((v) => JSON.stringify(v))
        const bytes = stored(lines)
        expect(splitEntries(bytes).map((p) => JSON.parse(p.toString('utf8')))).toEqual(parseWhole(bytes))
      }),
      { numRuns: 1000 },
    )
  })

  it('frames events byte-exactly', () => {
    const { events, entryCount } = frameEntries(stored(['{"a":"x,y"}', '{"b":"}\\""}']))
    expect(entryCount).toBe(2)
    expect(events.toString()).toBe('data: {"a":"x,y"}\n\ndata: {"b":"}\\""}\n\n')
    expect(frameEvent('{"headers":{"control":"up-to-date"}}').toString()).toBe('data: {"headers":{"control":"up-to-date"}}\n\n')
    expect(frameEvent(Buffer.from('{}')).toString()).toBe('data: {}\n\n')
    expect(KEEP_ALIVE_COMMENT.toString()).toBe(': keep-alive\n\n')
  })
})
