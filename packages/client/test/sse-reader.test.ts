import { describe, expect, it } from 'vitest'
import { readSseEvents } from '../src/index.js'

function streamOf(parts: Array<string | Uint8Array>): ReadableStream<Uint8Array> {
  const encoder = new TextEncoder()
  return new ReadableStream({
    start(controller) {
      for (const part of parts) controller.enqueue(typeof part === 'string' ? encoder.encode(part) : part)
      controller.close()
    },
  })
}

async function collect(parts: Array<string | Uint8Array>): Promise<string[]> {
  const out: string[] = []
  for await (const event of readSseEvents(streamOf(parts))) out.push(event)
  return out
}

describe('readSseEvents', () => {
  it('one event per blank-line-terminated block; comments and other fields ignored', async () => {
    expect(await collect(['data: {"a":1}\n\n: keep-alive\n\nevent: x\nid: 3\ndata: {"b":2}\n\n'])).toEqual(['{"a":1}', '{"b":2}'])
  })

  it('events split anywhere across reads, CRLF and CR line ends, multi-line data', async () => {
    const text = 'data: one\r\n\r\ndata: two\rdata:three\r\rdata: 4\n\n'
    for (let cut = 0; cut <= text.length; cut++) {
      expect(await collect([text.slice(0, cut), text.slice(cut)]), `cut ${cut}`).toEqual(['one', 'two\nthree', '4'])
    }
  })

  it('multi-byte characters split across reads', async () => {
    const bytes = new TextEncoder().encode('data: ñ日本\n\n')
    expect(await collect([bytes.slice(0, 8), bytes.slice(8)])).toEqual(['ñ日本'])
  })

  it('an unterminated last event is dropped', async () => {
    expect(await collect(['data: a\n\ndata: b\n'])).toEqual(['a'])
  })
})
