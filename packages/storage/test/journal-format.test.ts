/**
 * The journal's byte format (journal-format.ts): groups round-trip every record
 * type, including the watermark record of version 2; version-1 segments still
 * read; damage and unknown versions are refused.
 */
import { describe, expect, it } from 'vitest'
import { encodeHeader } from '../src/format.js'
import { FILE_DATA, FILE_ENTRIES, GroupBuilder, RECORD_WATERMARK, groupCheck, parseGroup } from '../src/file/journal-format.js'
import { readSegmentGroups } from '../src/file/journal-replay.js'

const id = 'shape-1'

function segment(version: number, ...groups: Buffer[]): Buffer {
  const header = encodeHeader('journal')
  header[4] = version
  return Buffer.concat([header, ...groups])
}

function group(fill: (b: GroupBuilder) => void, generation = 3, sequence = 9): Buffer {
  const b = new GroupBuilder(64)
  fill(b)
  return Buffer.concat(b.seal(generation, sequence))
}

describe('journal format', () => {
  it('round-trips writes, truncations, tombstones and the watermark record', () => {
    const bytes = group((b) => {
      b.write(id, FILE_DATA, 2 ** 40 + 5, Buffer.from('hello,'), 0, 6)
      b.truncate(id, FILE_ENTRIES, 48)
      b.tombstone(id)
      b.watermark(0xfedcba9876543210n, 77n)
    })
    const g = parseGroup(bytes, 0, 3)!
    expect(g.sequence).toBe(9)
    expect(g.end).toBe(bytes.length)
    expect(g.watermark).toEqual({ lsn: 0xfedcba9876543210n, sequence: 77n })
    expect(g.records).toHaveLength(3)
    expect(g.records[0]).toMatchObject({ type: 1, id: 'shape-1', file: FILE_DATA, position: 2 ** 40 + 5 })
    expect((g.records[0] as { bytes: Buffer }).bytes.toString()).toBe('hello,')
    expect(g.records[1]).toEqual({ type: 2, id: 'shape-1', file: FILE_ENTRIES, size: 48 })
    expect(g.records[2]).toEqual({ type: 3, id: 'shape-1' })
  })

  it('a group with only a watermark is not empty, and one without has none', () => {
    const b = new GroupBuilder(64)
    expect(b.empty).toBe(true)
    b.watermark(5n, 1n)
    expect(b.empty).toBe(false)
    expect(parseGroup(Buffer.concat(b.seal(1, 1)), 0, 1)!.watermark).toEqual({ lsn: 5n, sequence: 1n })
    expect(parseGroup(group((x) => x.tombstone(id), 1), 0, 1)!.watermark).toBeUndefined()
  })

  it('reads version-1 segments, writes version 2 and refuses other versions', () => {
    expect(encodeHeader('journal')[4]).toBe(2)
    expect(encodeHeader('log')[4]).toBe(1)
    const g = group((b) => b.write(id, FILE_DATA, 16, Buffer.from('x,'), 0, 2))
    expect(readSegmentGroups(segment(1, g), 3).groups).toHaveLength(1)
    expect(readSegmentGroups(segment(2, g, g), 3).groups).toHaveLength(2)
    expect(() => readSegmentGroups(segment(3, g), 3)).toThrow(/format version 3/)
  })

  it('refuses damage: a flipped byte, a group copied into another segment, a watermark record with an id', () => {
    const g = group((b) => b.watermark(10n, 2n))
    const flipped = Buffer.from(g)
    flipped[30]! ^= 1
    expect(parseGroup(flipped, 0, 3)).toBeUndefined()
    expect(parseGroup(g, 0, 4)).toBeUndefined()
    // A watermark record must carry no id: hand-build one with a 1-byte id and a valid check.
    const b = new GroupBuilder(64)
    b.tombstone('a')
    const sealed = Buffer.concat(b.seal(3, 1))
    const bad = Buffer.alloc(sealed.length + 16)
    sealed.copy(bad, 0, 0, sealed.length - 4)
    bad[24] = RECORD_WATERMARK
    bad.writeUInt32LE(sealed.length - 28 + 16, 0)
    bad.writeUInt32LE(groupCheck(bad, 0, bad.length - 4), bad.length - 4)
    expect(parseGroup(bad, 0, 3)).toBeUndefined()
  })
  it('builds groups across chunks: records and heads straddle chunk ends, reused chunks hold nothing of the last group', () => {
    const b = new GroupBuilder(64)
    const longId = 'x'.repeat(128)
    const payload = Buffer.from(Array.from({ length: 1000 }, (_, i) => i % 251))
    for (let round = 0; round < 3; round++) {
      const writes = round + 2
      for (let i = 0; i < writes; i++) b.write(i % 2 === 0 ? longId : id, FILE_DATA, i * 1000, payload, i, 1000 - i)
      b.truncate(longId, FILE_ENTRIES, round)
      const bytes = Buffer.concat(b.seal(3, round))
      const g = parseGroup(bytes, 0, 3)!
      expect(g.end).toBe(bytes.length)
      expect(g.sequence).toBe(round)
      expect(g.records).toHaveLength(writes + 1)
      for (let i = 0; i < writes; i++) {
        expect(g.records[i]).toMatchObject({ type: 1, id: i % 2 === 0 ? longId.toString() : 'shape-1', position: i * 1000 })
        expect(Buffer.compare((g.records[i] as { bytes: Buffer }).bytes, payload.subarray(i))).toBe(0)
      }
      expect(g.records[writes]).toEqual({ type: 2, id: longId.toString(), file: FILE_ENTRIES, size: round })
      b.reset()
      expect(b.empty).toBe(true)
    }
  })

  it('keeps the chunks a huge group grew for the next groups, up to a limit, and sheds them between groups', () => {
    const chunk = 1024 * 1024
    const b = new GroupBuilder(chunk)
    const payload = Buffer.alloc(256 * 1024, 7)
    for (let i = 0; i < 4 * 40; i++) b.write('shape-1', FILE_DATA, i * payload.length, payload, 0, payload.length)
    b.seal(3, 1)
    expect(b.heldBytes).toBeGreaterThanOrEqual(40 * chunk)
    b.reset()
    expect(b.heldBytes).toBe(16 * chunk)
    // Not while a group is being built: its chunks hold records.
    b.write('shape-1', FILE_DATA, 0, payload, 0, payload.length)
    b.shed()
    expect(b.heldBytes).toBe(16 * chunk)
    b.seal(3, 2)
    b.reset()
    b.shed()
    expect(b.heldBytes).toBe(chunk)
    // The next group still builds and parses.
    for (let i = 0; i < 8; i++) b.write('shape-2', FILE_DATA, i * payload.length, payload, 0, payload.length)
    const g = parseGroup(Buffer.concat(b.seal(3, 3)), 0, 3)!
    expect(g.records).toHaveLength(8)
  })
})
