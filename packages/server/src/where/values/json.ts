import { EvaluationError } from '../where-error.js'
import type { Numeric } from './numeric.js'
import { formatNumeric, numericKey, parseNumeric } from './numeric.js'

/**
 * JSON as Postgres reads it: RFC 8259 syntax, checked the way its lexer checks
 * it (no leading zeros, no trailing garbage, only four whitespace characters),
 * numbers kept as exact `numeric`.
 *
 * A jsonb value is held as two strings: `text`, Postgres's normalised output
 * (`{"a": 1, "b": [true, null]}`, keys by length then bytes, last duplicate
 * kept), and `key`, equal for exactly the values `jsonb_eq` calls equal
 * (numbers compared as numerics: 1.0 = 1).
 */
export interface Jsonb {
  readonly text: string
  readonly key: string
}

type Node =
  | { readonly t: 'null' }
  | { readonly t: 'bool'; readonly v: boolean }
  | { readonly t: 'num'; readonly v: Numeric }
  | { readonly t: 'str'; readonly v: string }
  | { readonly t: 'arr'; readonly v: readonly Node[] }
  | { readonly t: 'obj'; readonly v: readonly (readonly [string, Node])[] }

/** How deep a document may nest; Postgres stops at its stack limit, far deeper than real data. */
const MAX_JSON_DEPTH = 1000

class JsonParser {
  private i = 0

  constructor(
    private readonly s: string,
    private readonly forJsonb: boolean,
  ) {}

  fail(detail?: string): never {
    const type = this.forJsonb ? 'json' : 'json'
    throw new EvaluationError(
      'invalid_text_representation',
      `invalid input syntax for type ${type}${detail === undefined ? '' : `: ${detail}`}`,
    )
  }

  skip(): void {
    const s = this.s
    while (this.i < s.length) {
      const c = s.charCodeAt(this.i)
      if (c === 32 || c === 9 || c === 10 || c === 13) this.i++
      else break
    }
  }

  document(): Node {
    this.skip()
    const node = this.value(0)
    this.skip()
    if (this.i !== this.s.length) this.fail()
    return node
  }

  value(depth: number): Node {
    if (depth > MAX_JSON_DEPTH) this.fail('nesting too deep')
    const s = this.s
    const c = s.charAt(this.i)
    if (c === '{') {
      this.i++
      const entries: [string, Node][] = []
      this.skip()
      if (s.charAt(this.i) === '}') {
        this.i++
        return { t: 'obj', v: entries }
      }
      for (;;) {
        this.skip()
        if (s.charAt(this.i) !== '"') this.fail()
        const key = this.string()
        this.skip()
        if (s.charAt(this.i) !== ':') this.fail()
        this.i++
        this.skip()
        entries.push([key, this.value(depth + 1)])
        this.skip()
        const next = s.charAt(this.i)
        this.i++
        if (next === '}') return { t: 'obj', v: entries }
        if (next !== ',') this.fail()
      }
    }
    if (c === '[') {
      this.i++
      const items: Node[] = []
      this.skip()
      if (s.charAt(this.i) === ']') {
        this.i++
        return { t: 'arr', v: items }
      }
      for (;;) {
        this.skip()
        items.push(this.value(depth + 1))
        this.skip()
        const next = s.charAt(this.i)
        this.i++
        if (next === ']') return { t: 'arr', v: items }
        if (next !== ',') this.fail()
      }
    }
    if (c === '"') return { t: 'str', v: this.string() }
    if (c === '-' || (c >= '0' && c <= '9')) return this.number()
    const word = /^[A-Za-z0-9_$\x80-\uffff]+/.exec(s.slice(this.i, this.i + 64))?.[0] ?? ''
    this.i += word.length
    if (word === 'true') return { t: 'bool', v: true }
    if (word === 'false') return { t: 'bool', v: false }
    if (word === 'null') return { t: 'null' }
    return this.fail(word === '' ? undefined : `Token "${word}" is invalid.`)
  }

  number(): Node {
    const m = /^-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?/.exec(this.s.slice(this.i))
    if (m === null) this.fail()
    const token = m[0]
    this.i += token.length
    // Postgres treats letters or digits glued to a number as part of one invalid token.
    if (/^[A-Za-z0-9_$]/.test(this.s.charAt(this.i))) this.fail()
    return { t: 'num', v: parseNumeric(token) }
  }

  string(): string {
    const s = this.s
    this.i++
    let out = ''
    let start = this.i
    for (;;) {
      if (this.i >= s.length) this.fail()
      const c = s.charCodeAt(this.i)
      if (c === 34) {
        out += s.slice(start, this.i)
        this.i++
        return out
      }
      if (c < 0x20) this.fail()
      if (c !== 92) {
        this.i++
        continue
      }
      out += s.slice(start, this.i)
      const e = s.charAt(this.i + 1)
      this.i += 2
      switch (e) {
        case '"':
        case '\\':
        case '/':
          out += e
          break
        case 'b':
          out += '\b'
          break
        case 'f':
          out += '\f'
          break
        case 'n':
          out += '\n'
          break
        case 'r':
          out += '\r'
          break
        case 't':
          out += '\t'
          break
        case 'u':
          out += this.unicodeEscape()
          break
        default:
          this.fail()
      }
      start = this.i
    }
  }

  hex4(): number {
    const h = this.s.slice(this.i, this.i + 4)
    if (!/^[0-9a-fA-F]{4}$/.test(h)) this.fail('"\\u" must be followed by four hexadecimal digits.')
    this.i += 4
    return Number.parseInt(h, 16)
  }

  unicodeEscape(): string {
    const code = this.hex4()
    if (code >= 0xd800 && code <= 0xdbff) {
      if (this.s.slice(this.i, this.i + 2) !== '\\u') this.fail('Unicode low surrogate must follow a high surrogate.')
      this.i += 2
      const low = this.hex4()
      if (low < 0xdc00 || low > 0xdfff) this.fail('Unicode low surrogate must follow a high surrogate.')
      return String.fromCharCode(code, low)
    }
    if (code >= 0xdc00 && code <= 0xdfff) this.fail('Unicode low surrogate must follow a high surrogate.')
    if (code === 0 && this.forJsonb) {
      throw new EvaluationError('untranslatable_character', 'unsupported Unicode escape sequence')
    }
    return String.fromCharCode(code)
  }
}

/** `json_in`: validates and keeps the text as it is. */
export function parseJson(text: string): string {
  new JsonParser(text, false).document()
  return text
}

/** `jsonb_in`. */
export function parseJsonb(text: string): Jsonb {
  const node = new JsonParser(text, true).document()
  const normal = normalise(node)
  return { text: render(normal), key: keyOf(normal) }
}

function normalise(node: Node): Node {
  if (node.t === 'arr') return { t: 'arr', v: node.v.map(normalise) }
  if (node.t !== 'obj') return node
  const byKey = new Map<string, Node>()
  // The last of duplicate keys wins, as in Postgres.
  for (const [k, v] of node.v) byKey.set(k, normalise(v))
  const entries = [...byKey.entries()].map(([k, v]) => [k, v, Buffer.from(k, 'utf8')] as const)
  entries.sort((a, b) => a[2].length - b[2].length || Buffer.compare(a[2], b[2]))
  return { t: 'obj', v: entries.map(([k, v]) => [k, v] as const) }
}

/** `jsonb_out`. */
function render(node: Node): string {
  switch (node.t) {
    case 'null':
      return 'null'
    case 'bool':
      return node.v ? 'true' : 'false'
    case 'num':
      return formatNumeric(node.v)
    case 'str':
      return escapeJson(node.v)
    case 'arr':
      return `[${node.v.map(render).join(', ')}]`
    case 'obj':
      return `{${node.v.map(([k, v]) => `${escapeJson(k)}: ${render(v)}`).join(', ')}}`
  }
}

function keyOf(node: Node): string {
  switch (node.t) {
    case 'num':
      return `n${numericKey(node.v)}`
    case 'arr':
      return `[${node.v.map(keyOf).join(',')}]`
    case 'obj':
      return `{${node.v.map(([k, v]) => `${escapeJson(k)}:${keyOf(v)}`).join(',')}}`
    default:
      return render(node)
  }
}

/** Postgres's `escape_json`. */
export function escapeJson(s: string): string {
  let out = '"'
  let start = 0
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i)
    if (c >= 0x20 && c !== 34 && c !== 92) continue
    out += s.slice(start, i)
    start = i + 1
    switch (c) {
      case 8:
        out += '\\b'
        break
      case 12:
        out += '\\f'
        break
      case 10:
        out += '\\n'
        break
      case 13:
        out += '\\r'
        break
      case 9:
        out += '\\t'
        break
      case 34:
        out += '\\"'
        break
      case 92:
        out += '\\\\'
        break
      default:
        out += `\\u${c.toString(16).padStart(4, '0')}`
    }
  }
  return `${out + s.slice(start)}"`
}

/** jsonb → numeric / bool casts: only from a scalar of that kind, as Postgres allows. */
export function jsonbScalar(value: Jsonb): Node {
  return new JsonParser(value.text, true).document()
}

export function jsonbToNumeric(value: Jsonb, typeWord: string): Numeric {
  const node = jsonbScalar(value)
  if (node.t !== 'num') throw cannotCast(node, typeWord)
  return node.v
}

export function jsonbToBool(value: Jsonb): boolean {
  const node = jsonbScalar(value)
  if (node.t !== 'bool') throw cannotCast(node, 'boolean')
  return node.v
}

function cannotCast(node: Node, typeWord: string): EvaluationError {
  const kind =
    node.t === 'obj' ? 'object' : node.t === 'arr' ? 'array' : node.t === 'str' ? 'string' : node.t === 'num' ? 'numeric' : node.t === 'bool' ? 'boolean' : 'null'
  return new EvaluationError('invalid_parameter_value', `cannot cast jsonb ${kind} to type ${typeWord}`)
}
