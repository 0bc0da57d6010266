/**
 * Finding entry boundaries in stored log bytes without parsing JSON.
 *
 * The store keeps every entry as its JSON line followed by `,`
 * (`packages/storage/src/contract.ts`), so a run of entries is
 * `{…},{…},…{…},`. A `,` ends an entry iff it is outside every string and at
 * nesting depth 0. One forward scan finds those commas:
 *
 *  - Outside strings only six bytes matter: `"`, `{`, `[`, `}`, `]`, `,`.
 *    Outside strings a JSON line holds only keys' quotes, punctuation, numbers and
 *    literals, so this byte loop is short.
 *  - At a `"` the scan jumps to the closing quote with `Buffer.indexOf` (native
 *    memchr), skipping a candidate quote preceded by an odd run of backslashes
 *    (`\"` is escaped, `\\"` is not). String contents, usually most of the bytes,
 *    are never looked at one by one.
 *  - UTF-8 continuation and lead bytes are all ≥ 0x80, so multi-byte characters
 *    can never be mistaken for one of the ASCII bytes above.
 *
 * Lines are compact JSON (the encoder never emits a raw newline; JSON strings
 * cannot hold one), which is what lets each entry be one SSE `data:` line.
 */

import { ServerError } from '../../errors.js'

const QUOTE = 0x22
const BACKSLASH = 0x5c
const COMMA = 0x2c
const OPEN_BRACE = 0x7b
const OPEN_BRACKET = 0x5b
const CLOSE_BRACE = 0x7d
const CLOSE_BRACKET = 0x5d

export class MalformedEntriesError extends ServerError<'malformed_entries'> {
  override readonly name = 'MalformedEntriesError'
  constructor(message: string) {
    super('malformed_entries', message)
  }
}

/**
 * Calls `onEntry(start, end)` for each entry of `bytes` (stored format: every
 * entry followed by `,`; a last entry without its `,` is accepted too), with
 * `bytes.subarray(start, end)` being the entry's JSON. Returns the number of
 * entries. Throws `MalformedEntriesError` on an unterminated string or
 * unbalanced nesting (corrupt storage, never a client's doing).
 */
export function forEachEntry(bytes: Uint8Array, onEntry: (start: number, end: number) => void): number {
  const buf = Buffer.isBuffer(bytes) ? bytes : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength)
  const n = buf.length
  let depth = 0
  let start = 0
  let count = 0
  let i = 0
  while (i < n) {
    const c = buf[i]!
    if (c === QUOTE) {
      i = closingQuote(buf, i) + 1
      continue
    }
    if (c === OPEN_BRACE || c === OPEN_BRACKET) depth++
    else if (c === CLOSE_BRACE || c === CLOSE_BRACKET) {
      if (--depth < 0) throw new MalformedEntriesError(`unbalanced '${String.fromCharCode(c)}' at byte ${i}`)
    } else if (c === COMMA && depth === 0) {
      onEntry(start, i)
      count++
      start = i + 1
    }
    i++
  }
  if (depth !== 0) throw new MalformedEntriesError(`entry at byte ${start} is not closed`)
  if (start < n) {
    onEntry(start, n)
    count++
  }
  return count
}

/** The entries of `bytes` as views into it (no copy). */
export function splitEntries(bytes: Uint8Array): Buffer[] {
  const buf = Buffer.isBuffer(bytes) ? bytes : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength)
  const out: Buffer[] = []
  forEachEntry(buf, (s, e) => out.push(buf.subarray(s, e)))
  return out
}

/** Index of the `"` closing the string opened at `open`. */
function closingQuote(buf: Buffer, open: number): number {
  let j = open + 1
  for (;;) {
    j = buf.indexOf(QUOTE, j)
    if (j < 0) throw new MalformedEntriesError(`string opened at byte ${open} is not closed`)
    let k = j - 1
    while (buf[k] === BACKSLASH) k--
    // k stops at the opening quote at the latest, which is not a backslash.
    if ((j - 1 - k) % 2 === 0) return j
    j++
  }
}

const DATA = Buffer.from('data: ')
const END = Buffer.from('\n\n')
const FRAME = DATA.length + END.length

/**
 * The SSE events for stored entries: `data: <json>\n\n` per entry, in one
 * buffer (one write per batch). Also returns the number of entries framed.
 */
export function frameEntries(bytes: Uint8Array): { events: Buffer; entryCount: number } {
  const buf = Buffer.isBuffer(bytes) ? bytes : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength)
  const bounds: number[] = []
  let payload = 0
  const entryCount = forEachEntry(buf, (s, e) => {
    bounds.push(s, e)
    payload += e - s
  })
  const events = Buffer.allocUnsafe(payload + entryCount * FRAME)
  let at = 0
  for (let b = 0; b < bounds.length; b += 2) {
    at += DATA.copy(events, at)
    at += buf.copy(events, at, bounds[b]!, bounds[b + 1]!)
    at += END.copy(events, at)
  }
  return { events, entryCount }
}

/** One SSE event carrying `json` (a control line such as up-to-date). */
export function frameEvent(json: string | Uint8Array): Buffer {
  const body = typeof json === 'string' ? Buffer.from(json) : json
  const out = Buffer.allocUnsafe(body.length + FRAME)
  DATA.copy(out, 0)
  out.set(body, DATA.length)
  END.copy(out, DATA.length + body.length)
  return out
}

/** The keep-alive comment Electric sends after `keepalive_interval` of silence. */
export const KEEP_ALIVE_COMMENT = Buffer.from(': keep-alive\n\n')
