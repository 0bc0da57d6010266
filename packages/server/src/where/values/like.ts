import { EvaluationError } from '../where-error.js'
import { lowerAscii } from './text.js'

/**
 * LIKE / ILIKE as Postgres matches them under the C collation: `%` any run of
 * characters, `_` exactly one character (code point), backslash escapes the
 * next character. ILIKE lower-cases ASCII letters of both sides first.
 *
 * The pattern is split at `%` into segments of literal text and `_`; the first
 * segment must match at the start, the last at the end, and each middle one at
 * its leftmost position after the previous (which is optimal when only `%`
 * varies in length). On text without surrogate pairs (each `_` then one code
 * unit) a middle segment with `_`s is found by shift-and in one pass,
 * O(text × ⌈segment / 32⌉), and the last is checked at its one place; text
 * with surrogate pairs falls back to trying each position, O(text × pattern).
 * Either way a hostile pattern cannot make a row's evaluation explode the way
 * a backtracking regex could, and the common case cannot be made quadratic.
 */

export type LikeMatcher = (text: string) => boolean

const ANY_ONE = -1
const ANY_MANY = -2
/** A pattern ending in a lone backslash: Postgres raises an error only if matching gets that far. */
const DANGLING_ESCAPE = -3

/** Code points of the pattern with escapes resolved; wildcards as negative markers. */
function tokenize(pattern: string): number[] {
  const tokens: number[] = []
  const chars = Array.from(pattern)
  for (let i = 0; i < chars.length; i++) {
    const c = chars[i] ?? ''
    if (c === '\\') {
      const next = chars[i + 1]
      if (next === undefined) {
        tokens.push(DANGLING_ESCAPE)
        break
      }
      tokens.push(next.codePointAt(0) ?? 0)
      i++
    } else if (c === '%') {
      // Consecutive %s match what one does.
      if (tokens[tokens.length - 1] !== ANY_MANY) tokens.push(ANY_MANY)
    } else if (c === '_') tokens.push(ANY_ONE)
    else tokens.push(c.codePointAt(0) ?? 0)
  }
  return tokens
}

/** Literal runs separated by `_` (each `_` one code point): a stretch of pattern without `%`. */
type Segment = readonly string[]

function segmentsOf(tokens: readonly number[]): Segment[] {
  const segments: Segment[] = []
  let parts: string[] = ['']
  for (const t of tokens) {
    if (t === ANY_MANY) {
      segments.push(parts)
      parts = ['']
    } else if (t === ANY_ONE) parts.push('')
    else parts[parts.length - 1] += String.fromCodePoint(t)
  }
  segments.push(parts)
  return segments
}

function isLowSurrogate(s: string, i: number): boolean {
  const c = s.charCodeAt(i)
  return c >= 0xdc00 && c <= 0xdfff && i > 0 && s.charCodeAt(i - 1) >= 0xd800 && s.charCodeAt(i - 1) <= 0xdbff
}

/** Any UTF-16 surrogate: text without them has one code unit per code point. */
const SURROGATE = /[\uD800-\uDFFF]/

/**
 * A segment with `_`s as a fixed-length pattern over code units (for text
 * without surrogates): the bit-parallel shift-and automaton, one state bit per
 * pattern position, in 32-bit words.
 */
class ShiftAnd {
  /** Code units the segment spans (each `_` one). */
  readonly length: number
  private readonly words: number
  /** Per code unit of the pattern, the positions it (or a `_`) may stand at. */
  private readonly masks = new Map<number, Uint32Array>()
  /** Positions of `_`: what any other code unit may stand at. */
  private readonly wildcard: Uint32Array
  private readonly state: Uint32Array
  /** The literal text the segment starts with: no match starts anywhere else, so the search skips to it. */
  private readonly first: string

  constructor(segment: Segment) {
    this.first = segment[0] ?? ''
    const units: number[] = []
    segment.forEach((part, p) => {
      for (let i = 0; i < part.length; i++) units.push(part.charCodeAt(i))
      if (p < segment.length - 1) units.push(ANY_ONE)
    })
    this.length = units.length
    this.words = Math.max(1, Math.ceil(units.length / 32))
    this.wildcard = new Uint32Array(this.words)
    this.state = new Uint32Array(this.words)
    units.forEach((unit, i) => {
      if (unit === ANY_ONE) this.wildcard[i >>> 5]! |= 1 << (i & 31)
    })
    units.forEach((unit, i) => {
      if (unit === ANY_ONE) return
      let mask = this.masks.get(unit)
      if (mask === undefined) this.masks.set(unit, (mask = Uint32Array.from(this.wildcard)))
      mask[i >>> 5]! |= 1 << (i & 31)
    })
  }

  /** Where the leftmost match starting at or after `from` ends, or -1. */
  findEnd(s: string, from: number): number {
    const state = this.state
    state.fill(0)
    const words = this.words
    const last = this.length - 1
    const lastWord = last >>> 5
    const lastBit = 1 << (last & 31)
    const first = this.first
    const start = first.length > 0 ? s.indexOf(first, from) : from
    if (start < 0) return -1
    for (let i = start; i < s.length; i++) {
      const mask = this.masks.get(s.charCodeAt(i)) ?? this.wildcard
      let carry = 1
      let alive = 0
      for (let w = 0; w < words; w++) {
        const d = state[w]!
        const next = ((d << 1) | carry) & mask[w]!
        state[w] = next
        alive |= next
        carry = d >>> 31
      }
      if ((state[lastWord]! & lastBit) !== 0) return i + 1
      if (alive === 0 && first.length > 0) {
        // No match under way: the next can only start where the segment's first text does.
        const at = s.indexOf(first, i + 1)
        if (at < 0) return -1
        i = at - 1
      }
    }
    return -1
  }
}

/** A segment and, when it has `_`s and no surrogates of its own, its shift-and automaton. */
interface Prepared {
  readonly segment: Segment
  readonly shift: ShiftAnd | undefined
}

function prepare(segment: Segment): Prepared {
  return { segment, shift: segment.length > 1 && !SURROGATE.test(segment.join('')) ? new ShiftAnd(segment) : undefined }
}

/** Where `segment` ends if it matches `s` at code-unit offset `at`, or -1. */
function matchAt(segment: Segment, s: string, at: number): number {
  let i = at
  for (let p = 0; p < segment.length; p++) {
    const part = segment[p] as string
    if (part.length > 0) {
      if (!s.startsWith(part, i)) return -1
      i += part.length
    }
    if (p < segment.length - 1) {
      if (i >= s.length) return -1
      i += isLowSurrogate(s, i + 1) ? 2 : 1
    }
  }
  return i
}

/**
 * First segment anchored at the start, last at the end, the ones between at
 * their leftmost place: with only `%` varying in length, leftmost is optimal.
 */
function segmentMatch(prepared: readonly Prepared[], s: string): boolean {
  const head = prepared[0]!.segment
  let pos = matchAt(head, s, 0)
  if (pos < 0) return false
  if (prepared.length === 1) return pos === s.length
  const plain = !SURROGATE.test(s)
  for (let k = 1; k < prepared.length - 1; k++) {
    const { segment, shift } = prepared[k]!
    if (plain && shift !== undefined) {
      pos = shift.findEnd(s, pos)
      if (pos < 0) return false
      continue
    }
    const first = segment[0] as string
    let end = -1
    for (let at = pos; at <= s.length; at++) {
      if (first.length > 0) {
        at = s.indexOf(first, at)
        if (at < 0) return false
      }
      if (isLowSurrogate(s, at)) continue
      end = matchAt(segment, s, at)
      if (end >= 0) break
    }
    if (end < 0) return false
    pos = end
  }
  const tail = prepared[prepared.length - 1]!.segment
  if (plain) {
    // One code unit a `_`: the tail can only start at one place.
    const at = s.length - (tail.length - 1) - tail.reduce((sum, part) => sum + part.length, 0)
    return at >= pos && matchAt(tail, s, at) === s.length
  }
  for (let at = s.length; at >= pos; at--) {
    if (isLowSurrogate(s, at)) continue
    if (matchAt(tail, s, at) === s.length) return true
  }
  return false
}

/** Two-pointer wildcard matching on code points, backtracking to the last `%` only. */
function tokenMatch(p: readonly number[], s: readonly number[]): boolean {
  let pi = 0
  let si = 0
  let star = -1
  let mark = 0
  while (si < s.length) {
    const t = p[pi]
    if (t === DANGLING_ESCAPE) {
      throw new EvaluationError('invalid_escape_sequence', 'LIKE pattern must not end with escape character')
    }
    if (t !== undefined && (t === ANY_ONE || t === s[si])) {
      pi++
      si++
    } else if (t === ANY_MANY) {
      star = pi++
      mark = si
    } else if (star >= 0) {
      pi = star + 1
      si = ++mark
    } else return false
  }
  while (p[pi] === ANY_MANY) pi++
  return pi === p.length
}

function codePoints(s: string): number[] {
  const out: number[] = []
  for (const c of s) out.push(c.codePointAt(0) ?? 0)
  return out
}

/**
 * The last text ILIKE folded, and its fold. The router evaluates every ILIKE
 * shape of a table against the same row value one after another (1,000 shapes
 * `title ILIKE '%…%'` fold one title 1,000 times), so one entry catches nearly
 * every repeat; strings are immutable, so a hit is always right.
 */
let foldedInput = ''
let foldedOutput = ''

function foldOnce(text: string): string {
  if (text === foldedInput) return foldedOutput
  const out = lowerAscii(text)
  foldedInput = text
  foldedOutput = out
  return out
}

export function compileLike(pattern: string, caseInsensitive: boolean): LikeMatcher {
  const tokens = tokenize(caseInsensitive ? lowerAscii(pattern) : pattern)
  const fold = caseInsensitive ? foldOnce : (text: string) => text
  if (tokens.includes(DANGLING_ESCAPE)) return (text) => tokenMatch(tokens, codePoints(fold(text)))
  const segments = segmentsOf(tokens)
  if (segments.every((segment) => segment.length === 1)) {
    // Only literals and %: plain string searches.
    const literals = segments.map((segment) => segment[0] as string)
    if (literals.length === 1) return (text) => fold(text) === literals[0]
    if (literals.length === 2) {
      const [head = '', tail = ''] = literals
      return (text) => {
        const t = fold(text)
        return t.length >= head.length + tail.length && t.startsWith(head) && t.endsWith(tail)
      }
    }
    if (literals.length === 3 && literals[0] === '' && literals[2] === '') {
      const middle = literals[1] as string
      return (text) => fold(text).includes(middle)
    }
  }
  const prepared = segments.map(prepare)
  return (text) => segmentMatch(prepared, fold(text))
}

/**
 * `like_escape(pattern, escape)`: rewrites a pattern written with a custom
 * escape character (or none, for '') into backslash-escape form.
 */
export function likeEscape(pattern: string, escape: string): string {
  const esc = Array.from(escape)
  if (esc.length > 1) {
    throw new EvaluationError('invalid_escape_sequence', 'invalid escape string')
  }
  const chars = Array.from(pattern)
  if (esc.length === 0) return chars.map((c) => (c === '\\' ? '\\\\' : c)).join('')
  const e = esc[0]
  if (e === '\\') return pattern
  let out = ''
  let afterEscape = false
  for (const c of chars) {
    if (c === e && !afterEscape) {
      out += '\\'
      afterEscape = true
    } else if (c === '\\') {
      out += afterEscape ? '\\' : '\\\\'
      afterEscape = false
    } else {
      out += c
      afterEscape = false
    }
  }
  return out
}
