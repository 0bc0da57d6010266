/*
 * JSON written byte by byte into a Buffer, exactly as JSON.stringify would
 * write it: the primitives the change encoder builds its lines from. Each
 * returns the position after what it wrote; the caller has made room.
 */

/** Latin-1 bytes of an ASCII text (the line's fixed parts). */
export const ascii = (text: string): Uint8Array => Buffer.from(text, 'latin1')

export const QUOTE = 0x22
const BACKSLASH = 0x5c
const SLASH = 0x2f
/** JSON.stringify's escape of each control character, as bytes. */
export const CONTROL_ESCAPES: readonly Uint8Array[] = Array.from({ length: 0x20 }, (_, c) => Buffer.from(JSON.stringify(String.fromCharCode(c)).slice(1, -1), 'latin1'))
/** Worst UTF-8 bytes per UTF-16 unit of a string once escaped: `\u001f` for a control character or a lone surrogate. */
const MAX_BYTES_PER_UNIT = 6

/** From this many bytes a native copy (`set`) beats a loop; below it the call's set-up costs more than the bytes. */
const SET_BYTES = 32

export function putBytes(buf: Buffer, at: number, bytes: Uint8Array): number {
  if (bytes.length >= SET_BYTES) {
    buf.set(bytes, at)
    return at + bytes.length
  }
  // A loop below that: names and the line's short fixed parts, under what a native copy pays to start.
  for (let i = 0; i < bytes.length; i++) buf[at + i] = bytes[i]!
  return at + bytes.length
}

/** A non-negative integer in decimal. */
export function putUint(buf: Buffer, at: number, n: number): number {
  if (n < 10) {
    buf[at] = 0x30 + n
    return at + 1
  }
  let digits = 1
  for (let v = n; v >= 10; v = Math.floor(v / 10)) digits++
  let i = at + digits - 1
  for (let v = n; ; v = Math.floor(v / 10)) {
    buf[i--] = 0x30 + (v % 10)
    if (v < 10) break
  }
  return at + digits
}

/** A character JSON escapes, or one outside ASCII (printable ASCII and DEL are written as they are). */
const NOT_PLAIN = /["\\\u0000-\u001f\u0080-\uffff]/
/** From this length a plain string is checked by the regex and copied natively, not byte by byte. */
const NATIVE_COPY_UNITS = 24

/** `s` as a JSON string, exactly as JSON.stringify writes it, UTF-8 encoded. */
export function putJsonString(buf: Buffer, at: number, s: string): number {
  if (s.length >= NATIVE_COPY_UNITS && !NOT_PLAIN.test(s)) {
    // A long value (a payload, a timestamp): one native copy, not a loop per character.
    buf[at] = QUOTE
    at += 1 + buf.write(s, at + 1, 'latin1')
    buf[at] = QUOTE
    return at + 1
  }
  buf[at] = QUOTE
  const end = putEscaped(buf, at + 1, s, false)
  if (end < 0) {
    // Non-ASCII (and maybe a lone surrogate to escape): JSON.stringify's text, encoded.
    return at + buf.write(JSON.stringify(s), at, 'utf8')
  }
  buf[end] = QUOTE
  return end + 1
}

/**
 * `s` escaped as inside a JSON string (with `slashes`,
 * each `/` doubled first: a key value's own escaping inside a row key); -1 at
 * the first unit past ASCII (the caller writes the whole string another way).
 */
export function putEscaped(buf: Buffer, at: number, s: string, slashes: boolean): number {
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i)
    if (c >= 0x20 && c < 0x80) {
      if (c === QUOTE || c === BACKSLASH) buf[at++] = BACKSLASH
      else if (slashes && c === SLASH) buf[at++] = SLASH
      buf[at++] = c
    } else if (c < 0x20) {
      at = putBytes(buf, at, CONTROL_ESCAPES[c]!)
    } else {
      return -1
    }
  }
  return at
}

/** Past this many UTF-16 units a string's room is counted exactly, not at the worst case (six times its length). */
const EXACT_BOUND_UNITS = 1024

/**
 * Bytes a JSON string of `s` can take: for a short one the worst case, for a
 * long one exactly what `putJsonString` writes, so a huge value (a TOAST-sized
 * text) does not ask for six times its size.
 */
export function jsonBound(s: string): number {
  if (s.length <= EXACT_BOUND_UNITS) return s.length * MAX_BYTES_PER_UNIT + 2
  let n = 2
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i)
    if (c >= 0x20 && c < 0x80) n += c === QUOTE || c === BACKSLASH ? 2 : 1
    else if (c < 0x20) n += CONTROL_ESCAPES[c]!.length
    else if (c < 0x800) n += 2
    else if (c >= 0xd800 && c <= 0xdbff && (s.charCodeAt(i + 1) & 0xfc00) === 0xdc00) {
      n += 4 // a surrogate pair: one 4-byte character
      i++
    } else if (c >= 0xd800 && c <= 0xdfff) n += MAX_BYTES_PER_UNIT // a lone surrogate, escaped
    else n += 3
  }
  return n
}

/** Decimal digits of a u64 at most. */
export const MAX_U64_DIGITS = 20

/**
 * An LSN in decimal. Below 2^53 (every LSN in practice) its digits are written
 * straight from a Number: no string or Buffer per change.
 */
export function putLsn(buf: Buffer, at: number, lsn: bigint): number {
  if (lsn <= MAX_SAFE_LSN) return putUint(buf, at, Number(lsn))
  const digits = lsn.toString()
  for (let i = 0; i < digits.length; i++) buf[at + i] = digits.charCodeAt(i)
  return at + digits.length
}
const MAX_SAFE_LSN = BigInt(Number.MAX_SAFE_INTEGER)
