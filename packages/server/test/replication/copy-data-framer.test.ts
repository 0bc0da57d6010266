import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { CopyDataFramer } from '../../src/replication/copy-data-framer.js'

/** One protocol message: type byte, length (counting itself), payload. */
function message(type: string, payload: Buffer): Buffer {
  const header = Buffer.alloc(5)
  header[0] = type.charCodeAt(0)
  header.writeUInt32BE(payload.length + 4, 1)
  return Buffer.concat([header, payload])
}

type Event = { copy: string } | { other: string }

/** What a framer reports for `chunks`, with runs of other messages joined (how they are cut into calls does not matter). */
function frame(chunks: readonly Buffer[]): { events: Event[]; framer: CopyDataFramer } {
  const events: Event[] = []
  const framer = new CopyDataFramer({
    copyData: (buf, start, end) => events.push({ copy: buf.subarray(start, end).toString('hex') }),
    other: (bytes) => {
      const last = events.at(-1)
      if (last !== undefined && 'other' in last) last.other += bytes.toString('hex')
      else events.push({ other: bytes.toString('hex') })
    },
  })
  for (const chunk of chunks) framer.push(chunk)
  return { events, framer }
}

/** `bytes` cut at the given points. */
function cut(bytes: Buffer, points: readonly number[]): Buffer[] {
  const at = [...new Set(points.map((p) => p % (bytes.length + 1)))].sort((a, b) => a - b)
  const chunks: Buffer[] = []
  let from = 0
  for (const p of [...at, bytes.length]) {
    // Copies, as a socket gives: the framer must not rely on chunks staying around.
    chunks.push(Buffer.from(bytes.subarray(from, p)))
    from = p
  }
  return chunks
}

describe('CopyDataFramer', () => {
  it('reports CopyData payloads and hands other messages on whole, in order', () => {
    const stream = Buffer.concat([
      message('W', Buffer.from([0, 0, 0])),
      message('d', Buffer.from('wabc')),
      message('d', Buffer.alloc(0)),
      message('N', Buffer.from('notice\0')),
      message('E', Buffer.from('error\0')),
      message('d', Buffer.from('k')),
      message('c', Buffer.alloc(0)),
    ])
    const { events, framer } = frame([stream])
    expect(events).toEqual([
      { other: message('W', Buffer.from([0, 0, 0])).toString('hex') },
      { copy: Buffer.from('wabc').toString('hex') },
      { copy: '' },
      { other: Buffer.concat([message('N', Buffer.from('notice\0')), message('E', Buffer.from('error\0'))]).toString('hex') },
      { copy: Buffer.from('k').toString('hex') },
      { other: message('c', Buffer.alloc(0)).toString('hex') },
    ])
    expect(framer.buffered).toBe(0)
  })

  it('gives the same messages however the stream is cut into chunks (random streams and cuts)', () => {
    const payload = fc.oneof(
      { weight: 5, arbitrary: fc.uint8Array({ maxLength: 64 }) },
      { weight: 1, arbitrary: fc.integer({ min: 60_000, max: 300_000 }).map((n) => new Uint8Array(n).fill(n & 0xff)) },
    )
    const msg = fc.tuple(fc.constantFrom('d', 'd', 'd', 'N', 'E', 'C', 'Z', 'c'), payload).map(([t, p]) => message(t, Buffer.from(p)))
    fc.assert(
      fc.property(fc.array(msg, { maxLength: 30 }), fc.array(fc.nat(), { maxLength: 40 }), (messages, points) => {
        const stream = Buffer.concat(messages)
        const whole = frame([stream])
        const chunked = frame(cut(stream, points))
        expect(chunked.events).toEqual(whole.events)
        expect(whole.events.filter((e) => 'copy' in e)).toHaveLength(messages.filter((m) => m[0] === 0x64).length)
        expect(chunked.framer.buffered).toBe(0)
      }),
      { numRuns: process.env.SOAK === '1' ? 5_000 : 300 },
    )
  })

  it('holds a message cut short until the rest comes', () => {
    const m = message('d', Buffer.from('0123456789'))
    const { events, framer } = frame([m.subarray(0, 3)])
    expect(events).toEqual([])
    expect(framer.buffered).toBe(3)
    framer.push(m.subarray(3, 9))
    expect(framer.buffered).toBe(9)
    framer.push(Buffer.concat([m.subarray(9), message('d', Buffer.from('x'))]))
    expect(framer.buffered).toBe(0)
  })

  it('hands bytes that are not a message (a length below 4) and all after them to the other side, untouched', () => {
    const good = message('d', Buffer.from('ok'))
    const bad = Buffer.from([0x64, 0, 0, 0, 2, 1, 2, 3])
    const later = message('d', Buffer.from('later'))
    const { events } = frame([Buffer.concat([good, bad]), later])
    expect(events).toEqual([{ copy: Buffer.from('ok').toString('hex') }, { other: Buffer.concat([bad, later]).toString('hex') }])
  })
})
