/**
 * Query-string decoding with Rails/Plug bracket nesting.
 *
 * The Shape API sends positional where-clause values as `params[1]=a&params[2]=b`
 * (the official client URL-encodes the brackets: `params%5B1%5D=a`). Plain
 * URLSearchParams keeps such keys flat, so this decoder nests them the way Plug
 * does, which is what Electric validates against:
 *
 *   a=1&a=2          { a: '2' }            a repeated plain key: the last one wins
 *   live             { live: '' }          no `=`: empty value
 *   p[1]=x&p[2]=y    { p: { 1: 'x', 2: 'y' } }
 *   p[]=x&p[]=y      { p: ['x', 'y'] }
 *   p[a][b]=x        { p: { a: { b: 'x' } } }
 *
 * Keys and values are form-decoded (`+` is a space) before brackets are read.
 * A later assignment of a different kind replaces the earlier value (`p=x&p[1]=y`
 * gives `{ p: { 1: 'y' } }`). A key whose brackets do not parse (`p[1`, `p]`,
 * `p[1]x`) is kept whole as a plain key, as is a key starting with `[`.
 *
 * Decoding never fails: a `%` not followed by two hex digits stays literal and
 * bytes that are not UTF-8 become U+FFFD, as in WHATWG URLSearchParams. Such
 * values then fail the parameter's own validation, which names the parameter.
 *
 * Objects are created without a prototype, so keys like `__proto__` are data.
 */

export type QueryValue = string | readonly QueryValue[] | QueryObject

export interface QueryObject {
  readonly [key: string]: QueryValue
}

type MutableValue = string | MutableValue[] | MutableObject
interface MutableObject {
  [key: string]: MutableValue
}

export function decodeQueryString(query: string): QueryObject {
  const root = newObject()
  const text = query.startsWith('?') ? query.slice(1) : query
  if (text === '') return root
  for (const pair of text.split('&')) {
    if (pair === '') continue
    const eq = pair.indexOf('=')
    const key = decodeFormComponent(eq < 0 ? pair : pair.slice(0, eq))
    const value = eq < 0 ? '' : decodeFormComponent(pair.slice(eq + 1))
    const path = splitKey(key)
    if (path[0] === '') continue
    assign(root, path, value)
  }
  return root
}

export function isQueryObject(value: unknown): value is QueryObject {
  return typeof value === 'object' && value !== null && !Array.isArray(value)
}

function newObject(): MutableObject {
  return Object.create(null) as MutableObject
}

/** `a[b][]` → ['a', 'b', '']; a malformed bracket suffix keeps the key whole. */
function splitKey(key: string): string[] {
  const open = key.indexOf('[')
  if (open <= 0) return [key]
  const path = [key.slice(0, open)]
  let i = open
  while (i < key.length) {
    if (key[i] !== '[') return [key]
    const close = key.indexOf(']', i + 1)
    if (close < 0) return [key]
    path.push(key.slice(i + 1, close))
    i = close + 1
  }
  return path
}

function assign(root: MutableObject, path: readonly string[], value: string): void {
  let target: MutableObject = root
  for (let depth = 0; depth < path.length - 1; depth++) {
    const segment = path[depth] ?? ''
    const next = path[depth + 1] ?? ''
    const isLast = depth === path.length - 2
    if (isLast && next === '') {
      // `a[]=v`: append to a list.
      const existing = target[segment]
      if (Array.isArray(existing)) existing.push(value)
      else target[segment] = [value]
      return
    }
    const existing = target[segment]
    if (existing !== undefined && typeof existing === 'object' && !Array.isArray(existing)) {
      target = existing
    } else {
      const created = newObject()
      target[segment] = created
      target = created
    }
  }
  target[path[path.length - 1] ?? ''] = value
}

const decoder = new TextDecoder('utf-8', { fatal: false })
const encoder = new TextEncoder()

function decodeFormComponent(raw: string): string {
  const text = raw.includes('+') ? raw.replaceAll('+', ' ') : raw
  if (!text.includes('%')) return text
  try {
    return decodeURIComponent(text)
  } catch {
    return decodeLeniently(text)
  }
}

function decodeLeniently(text: string): string {
  const bytes: number[] = []
  let i = 0
  while (i < text.length) {
    const ch = text.charCodeAt(i)
    if (ch === 0x25 && isHex(text.charCodeAt(i + 1)) && isHex(text.charCodeAt(i + 2))) {
      bytes.push(Number.parseInt(text.slice(i + 1, i + 3), 16))
      i += 3
      continue
    }
    const codePoint = text.codePointAt(i) ?? ch
    const char = String.fromCodePoint(codePoint)
    for (const byte of encoder.encode(char)) bytes.push(byte)
    i += char.length
  }
  return decoder.decode(Uint8Array.from(bytes))
}

function isHex(code: number): boolean {
  return (code >= 0x30 && code <= 0x39) || (code >= 0x41 && code <= 0x46) || (code >= 0x61 && code <= 0x66)
}
