/**
 * Postgres identifiers as the Shape API accepts them in `table` and `columns`
 * (docs/protocol.md §2). Syntax only: whether the table or column exists is the
 * server's question.
 *
 *   foo          unquoted: a letter or `_`, then letters, marks, digits, `_`, `$`;
 *                ASCII A-Z downcased (Postgres' rule; other letters keep their case)
 *   "Foo ""x"""  quoted: case kept, `""` stands for `"`; a lone `"` inside is an error
 *
 * Either form may be at most 63 characters once parsed (NAMEDATALEN - 1).
 * Electric counts grapheme clusters, so this does too; Postgres itself counts
 * bytes and truncates instead, but refusing is safer than silently matching a
 * different, truncated name.
 *
 * The error texts are Electric's, since they reach clients in 400 bodies.
 */

export interface RelationName {
  readonly schema: string
  readonly name: string
}

export type Parsed<T> = { readonly ok: true; readonly value: T } | { readonly ok: false; readonly error: string }

export const DEFAULT_SCHEMA = 'public'
export const MAX_IDENTIFIER_LENGTH = 63

const QUOTE = 0x22
const UNQUOTED = /^[\p{L}_][\p{L}\p{M}_0-9$]*$/u
const ZERO_LENGTH = 'Invalid zero-length delimited identifier'

const ok = <T>(value: T): Parsed<T> => ({ ok: true, value })
const fail = <T>(error: string): Parsed<T> => ({ ok: false, error })

/** Parses one identifier, quoted or not. */
export function parseIdentifier(text: string): Parsed<string> {
  const parsed = text.length >= 1 && text.charCodeAt(0) === QUOTE && text.charCodeAt(text.length - 1) === QUOTE
    ? parseQuoted(text.slice(1, -1))
    : parseUnquoted(text)
  if (parsed.ok && characterCount(parsed.value) > MAX_IDENTIFIER_LENGTH) {
    return fail(`Identifier is too long (max length is ${MAX_IDENTIFIER_LENGTH})`)
  }
  return parsed
}

function parseQuoted(inner: string): Parsed<string> {
  if (inner === '') return fail(ZERO_LENGTH)
  // `""` is an escaped quote; a quote with no quote on either side is an error.
  // Like Electric (and unlike Postgres) a run of three or more quotes passes and
  // unescapes pairwise: `a"""b` becomes `a""b`.
  let out = ''
  let i = 0
  while (i < inner.length) {
    const q = inner.indexOf('"', i)
    if (q < 0) {
      out += inner.slice(i)
      break
    }
    out += inner.slice(i, q)
    if (inner.charCodeAt(q + 1) === QUOTE) {
      out += '"'
      i = q + 2
    } else if (q > 0 && inner.charCodeAt(q - 1) === QUOTE) {
      // Third quote of a run: the pair before it was consumed already.
      out += '"'
      i = q + 1
    } else {
      return fail(`Invalid identifier with unescaped quote: ${inner}`)
    }
  }
  return ok(out)
}

function parseUnquoted(text: string): Parsed<string> {
  if (text === '') return fail(ZERO_LENGTH)
  if (!UNQUOTED.test(text)) return fail(`Invalid unquoted identifier contains special characters: ${text}`)
  return ok(text.replace(/[A-Z]+/g, (upper) => upper.toLowerCase()))
}

const ASCII = /^[\x00-\x7f]*$/
let segmenter: Intl.Segmenter | undefined

function characterCount(text: string): number {
  if (ASCII.test(text)) return text.length
  segmenter ??= new Intl.Segmenter()
  let count = 0
  for (const _segment of segmenter.segment(text)) count++
  return count
}

/**
 * Parses `table` into schema and name: `name`, `schema.name`, either part quoted.
 * Dots split only outside double quotes.
 */
export function parseRelation(text: string): Parsed<RelationName> {
  const parts = splitOutsideQuotes(text, '.')
  if (parts.length > 2) return fail(`Invalid relation identifier, too many delimiters: ${text}`)
  const [first = '', second] = parts
  if (second === undefined) {
    const name = parseIdentifier(first)
    return name.ok ? ok({ schema: DEFAULT_SCHEMA, name: name.value }) : name
  }
  const schema = parseIdentifier(first)
  if (!schema.ok) return schema
  const name = parseIdentifier(second)
  return name.ok ? ok({ schema: schema.value, name: name.value }) : name
}

/** Left to right, a quote toggles "inside"; separators inside quotes are kept. */
function splitOutsideQuotes(text: string, separator: string): string[] {
  const parts: string[] = []
  let inQuotes = false
  let start = 0
  for (let i = 0; i < text.length; i++) {
    const ch = text[i]
    if (ch === '"') inQuotes = !inQuotes
    else if (ch === separator && !inQuotes) {
      parts.push(text.slice(start, i))
      start = i + 1
    }
  }
  parts.push(text.slice(start))
  return parts
}

/**
 * Parses `columns` (or `queryable_columns`): identifiers separated by commas
 * outside quotes, in the order given.
 *
 * "Outside quotes" is decided the way Electric decides it: a comma splits when
 * an even number of quotes follows it. For balanced input that is the usual
 * rule; for unbalanced input it decides which error the client sees
 * (`"id,"name"` complains about `"id`, not about the unescaped quote).
 */
export function parseColumnList(text: string): Parsed<string[]> {
  const columns: string[] = []
  let end = text.length
  let quotesAfter = 0
  const pieces: string[] = []
  for (let i = text.length - 1; i >= 0; i--) {
    const ch = text[i]
    if (ch === '"') quotesAfter++
    else if (ch === ',' && quotesAfter % 2 === 0) {
      pieces.push(text.slice(i + 1, end))
      end = i
    }
  }
  pieces.push(text.slice(0, end))
  for (let i = pieces.length - 1; i >= 0; i--) {
    const column = parseIdentifier(pieces[i] ?? '')
    if (!column.ok) return column
    columns.push(column.value)
  }
  return ok(columns)
}

/** Double-quotes an identifier for SQL, doubling any quote inside it. */
export function quoteIdentifier(name: string): string {
  return `"${name.replaceAll('"', '""')}"`
}

/** `"schema"."name"`, each part quoted for SQL. */
export function formatRelation(relation: RelationName): string {
  return `${quoteIdentifier(relation.schema)}.${quoteIdentifier(relation.name)}`
}
