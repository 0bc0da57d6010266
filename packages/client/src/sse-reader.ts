/**
 * A minimal reader for `text/event-stream` bodies (the WHATWG format): lines
 * end in `\n`, `\r\n` or `\r`; `data:` lines accumulate (joined by `\n`), a
 * blank line dispatches the event, `:` lines are comments (keep-alives), and
 * other fields (`event:`, `id:`, `retry:`) mean nothing in the Shape API.
 *
 * An async generator, so bytes are read from the network only as fast as the
 * consumer takes events: a slow subscriber leaves the rest in the socket.
 */
export async function* readSseEvents(body: ReadableStream<Uint8Array>, watch?: ReadWatch): AsyncGenerator<string, void, undefined> {
  const reader = body.getReader()
  const decoder = new TextDecoder()
  let pending = ''
  let data: string[] = []
  // A `\r` at the end of one read may be the first half of a `\r\n`.
  let skipLeadingLf = false
  try {
    for (;;) {
      watch?.waiting()
      const { done, value } = await reader.read()
      watch?.got()
      if (done) break
      pending += decoder.decode(value, { stream: true })
      if (skipLeadingLf && pending.startsWith('\n')) pending = pending.slice(1)
      skipLeadingLf = false
      let start = 0
      for (let i = 0; i < pending.length; i++) {
        const ch = pending.charCodeAt(i)
        if (ch !== LF && ch !== CR) continue
        const line = pending.slice(start, i)
        if (ch === CR) {
          if (i + 1 < pending.length) {
            if (pending.charCodeAt(i + 1) === LF) i++
          } else skipLeadingLf = true
        }
        start = i + 1
        if (line === '') {
          if (data.length > 0) {
            const event = data.join('\n')
            data = []
            yield event
          }
        } else if (line.startsWith('data:')) {
          data.push(line.charCodeAt(5) === SPACE ? line.slice(6) : line.slice(5))
        } else if (line === 'data') {
          data.push('')
        }
      }
      pending = pending.slice(start)
    }
    // An event without its blank line at the end of the stream is incomplete: the
    // format says to drop it, and the stream re-requests from its last offset.
  } finally {
    // Ends the request when the consumer stops early (abort, error, return).
    await reader.cancel().catch(() => {})
  }
}

/** Told when the reader starts waiting for the network and when bytes (or the end) came. */
export interface ReadWatch {
  waiting(): void
  got(): void
}

const LF = 0x0a
const CR = 0x0d
const SPACE = 0x20
