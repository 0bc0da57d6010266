/**
 * Character strings under the `C` collation: ordering is by Unicode code point,
 * which is the byte order of their UTF-8 form. `lower`/`upper` change ASCII
 * letters only, as Postgres does under `C`.
 *
 * `bpchar` (char(n)) values keep their padding; comparisons and `length`
 * ignore trailing spaces, LIKE and `octet_length` do not.
 */

/** Code-point order of two JS (UTF-16) strings, i.e. UTF-8 byte order. */
export function compareText(a: string, b: string): number {
  const n = Math.min(a.length, b.length)
  for (let i = 0; i < n; i++) {
    const x = a.charCodeAt(i)
    const y = b.charCodeAt(i)
    if (x !== y) {
      // UTF-16 code units order surrogates (D800-DFFF) below E000-FFFF, but the code
      // points they encode are above; move both ranges to restore code-point order.
      if (x >= 0xd800 && y >= 0xd800) return fixup(x) - fixup(y)
      return x - y
    }
  }
  return a.length - b.length
}

function fixup(unit: number): number {
  return unit >= 0xe000 ? unit - 0x800 : unit + 0x2000
}

/** Strips trailing ASCII spaces: how bpchar compares, and its cast to text. */
export function trimBpchar(s: string): string {
  let end = s.length
  while (end > 0 && s.charCodeAt(end - 1) === 32) end--
  return end === s.length ? s : s.slice(0, end)
}

export function compareBpchar(a: string, b: string): number {
  return compareText(trimBpchar(a), trimBpchar(b))
}

/** Number of characters (code points). */
export function charLength(s: string): number {
  let n = s.length
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i)
    if (c >= 0xd800 && c <= 0xdbff && i + 1 < s.length) {
      const d = s.charCodeAt(i + 1)
      if (d >= 0xdc00 && d <= 0xdfff) {
        n--
        i++
      }
    }
  }
  return n
}

export function octetLength(s: string): number {
  return Buffer.byteLength(s, 'utf8')
}

export function lowerAscii(s: string): string {
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i)
    if (c >= 65 && c <= 90) return s.slice(0, i) + s.slice(i).replace(/[A-Z]+/g, (m) => m.toLowerCase())
  }
  return s
}

export function upperAscii(s: string): string {
  return /[a-z]/.test(s) ? s.replace(/[a-z]+/g, (m) => m.toUpperCase()) : s
}

/** The first `n` characters (code points) of `s`. */
export function truncateChars(s: string, n: number): string {
  if (s.length <= n) return s
  let count = 0
  let i = 0
  while (i < s.length && count < n) {
    const c = s.charCodeAt(i)
    i += c >= 0xd800 && c <= 0xdbff && i + 1 < s.length ? 2 : 1
    count++
  }
  return s.slice(0, i)
}

/** An explicit cast to varchar(n): silently truncated to n characters. */
export function applyVarcharLength(s: string, n: number): string {
  return truncateChars(s, n)
}

/** An explicit cast to char(n): truncated or space-padded to exactly n characters. */
export function applyBpcharLength(s: string, n: number): string {
  const length = charLength(s)
  if (length === n) return s
  if (length > n) return truncateChars(s, n)
  return s + ' '.repeat(n - length)
}
