import { InvalidArrayLiteralError } from './errors.js'

/**
 * Postgres array literals, as Postgres prints them (`array_out`):
 *
 *   {}                      empty
 *   {1,2,NULL}              unquoted elements; a bare NULL (any case) is SQL NULL
 *   {"a b","x\"y","NULL"}   quoted elements: `\` escapes the next character; "NULL" is text
 *   {{1,2},{3,4}}           one level of braces per dimension, any depth
 *   [0:1]={7,8}             explicit bounds (non-default lower bound): the prefix is skipped
 *
 * Elements are handed to `parseElement` as their unescaped text, or `null` for
 * SQL NULL, in document order. The delimiter is `,` for every type except `box`
 * (`;`), which is why it is a parameter. Unquoted text is taken as is: Postgres
 * never prints whitespace around elements, and the official client does not trim
 * either, so both read the same strings.
 */
export function parseArrayLiteral<T>(
  input: string,
  parseElement: (text: string | null) => T,
  delimiter = ',',
): ArrayValue<T> {
  let pos = 0
  if (input.charCodeAt(0) === BRACKET) {
    const eq = input.indexOf('=')
    if (eq < 0) throw new InvalidArrayLiteralError(input, 0, 'bounds without "="')
    pos = eq + 1
  }
  const fail = (problem: string): never => {
    throw new InvalidArrayLiteralError(input, pos, problem)
  }

  const parseLevel = (): ArrayValue<T> => {
    if (input.charCodeAt(pos) !== OPEN) fail('expected "{"')
    pos++
    const out: Array<T | ArrayValue<T>> = []
    if (input.charCodeAt(pos) === CLOSE) {
      pos++
      return out
    }
    for (;;) {
      const ch = input.charCodeAt(pos)
      if (ch === OPEN) out.push(parseLevel())
      else if (ch === QUOTE) out.push(parseElement(readQuoted()))
      else out.push(parseElement(readUnquoted()))
      const next = input[pos]
      if (next === delimiter) pos++
      else if (next === '}') {
        pos++
        return out
      } else fail(next === undefined ? 'unterminated array' : `unexpected ${JSON.stringify(next)}`)
    }
  }

  const readQuoted = (): string => {
    pos++ // opening quote
    let text = ''
    let start = pos
    for (;;) {
      const ch = input.charCodeAt(pos)
      if (Number.isNaN(ch)) fail('unterminated quoted element')
      if (ch === BACKSLASH) {
        text += input.slice(start, pos)
        if (pos + 1 >= input.length) fail('dangling backslash')
        text += input[pos + 1]
        pos += 2
        start = pos
      } else if (ch === QUOTE) {
        text += input.slice(start, pos)
        pos++
        return text
      } else pos++
    }
  }

  const readUnquoted = (): string | null => {
    const start = pos
    while (pos < input.length) {
      const ch = input[pos]
      if (ch === delimiter || ch === '}') break
      if (ch === '{' || ch === '"') fail(`unexpected ${JSON.stringify(ch)} in unquoted element`)
      pos++
    }
    if (pos === start) fail('empty unquoted element')
    const text = input.slice(start, pos)
    return text.length === 4 && text.toUpperCase() === 'NULL' ? null : text
  }

  const result = parseLevel()
  if (pos !== input.length) fail('text after the closing "}"')
  return result
}

/** A parsed array: elements or nested arrays, one level per dimension. */
export type ArrayValue<T> = Array<T | ArrayValue<T>>

const OPEN = 0x7b // {
const CLOSE = 0x7d // }
const QUOTE = 0x22 // "
const BACKSLASH = 0x5c // \
const BRACKET = 0x5b // [
