import { divisionByZero, invalidSyntax, outOfRange } from '../where-error.js'

/**
 * int2 / int4 / int8 as Postgres computes them: int2 and int4 are JS numbers
 * (always integral and in range, never -0), int8 is a bigint. Every operation
 * checks the range of its result type and raises Postgres's error instead of
 * wrapping or losing precision.
 */

export type IntName = 'int2' | 'int4' | 'int8'

const BOUNDS = {
  int2: { min: -32768n, max: 32767n, word: 'smallint' },
  int4: { min: -2147483648n, max: 2147483647n, word: 'integer' },
  int8: { min: -9223372036854775808n, max: 9223372036854775807n, word: 'bigint' },
} as const

/** Postgres's isspace() set, which its input functions skip around a value. */
const SPACE = '[ \\t\\n\\v\\f\\r]*'

// Postgres 16+ integer syntax: decimal, 0x / 0o / 0b prefixes, single underscores between digits.
const INTEGER_SYNTAX = new RegExp(
  `^${SPACE}([+-]?)(0[xX](?:_?[0-9a-fA-F])+|0[oO](?:_?[0-7])+|0[bB](?:_?[01])+|[0-9](?:_?[0-9])*)${SPACE}$`,
)

/** The `int2in` / `int4in` / `int8in` input functions. */
export function parseInteger(name: 'int2' | 'int4', text: string): number
export function parseInteger(name: 'int8', text: string): bigint
export function parseInteger(name: IntName, text: string): number | bigint
export function parseInteger(name: IntName, text: string): number | bigint {
  const match = INTEGER_SYNTAX.exec(text)
  if (match === null) throw invalidSyntax(BOUNDS[name].word, text)
  const digits = (match[2] ?? '').replaceAll('_', '')
  let value = BigInt(digits)
  if (match[1] === '-') value = -value
  const bounds = BOUNDS[name]
  if (value < bounds.min || value > bounds.max) {
    throw outOfRange(`value "${text}" is out of range for type ${bounds.word}`)
  }
  return name === 'int8' ? value : Number(value)
}

/** Fast path for text Postgres itself produced (`-?[0-9]+`); falls back to the full parser. */
export function parseIntegerOutput(name: 'int2' | 'int4', text: string): number {
  const n = Number(text)
  if (Number.isInteger(n) && text.length < 12 && text.length > 0 && text.trim() === text) {
    return checkSmall(name, n === 0 ? 0 : n)
  }
  return parseInteger(name, text)
}

export function checkSmall(name: 'int2' | 'int4', value: number): number {
  const bounds = BOUNDS[name]
  if (!(value >= Number(bounds.min) && value <= Number(bounds.max))) throw outOfRange(`${bounds.word} out of range`)
  return value === 0 ? 0 : value
}

export function checkBig(value: bigint): bigint {
  if (value < BOUNDS.int8.min || value > BOUNDS.int8.max) throw outOfRange('bigint out of range')
  return value
}

/** Converts to a narrower integer type (`int8::int4`), raising Postgres's error when out of range. */
export function narrowInteger(name: IntName, value: number | bigint): number | bigint {
  if (name === 'int8') return checkBig(typeof value === 'bigint' ? value : BigInt(value))
  const bounds = BOUNDS[name]
  const big = typeof value === 'bigint' ? value : BigInt(value)
  if (big < bounds.min || big > bounds.max) throw outOfRange(`${bounds.word} out of range`)
  return Number(big)
}

export type ArithOp = '+' | '-' | '*' | '/' | '%'

/** Binary arithmetic on int2/int4 (result type `name`): exact, with Postgres's range errors. */
export function smallArith(name: 'int2' | 'int4', op: ArithOp, a: number, b: number): number {
  switch (op) {
    case '+':
      return checkSmall(name, a + b)
    case '-':
      return checkSmall(name, a - b)
    case '*':
      // A product beyond 2^53 is inexact in a double, but it is then far outside int4 anyway.
      return checkSmall(name, a * b)
    case '/':
      if (b === 0) throw divisionByZero()
      return checkSmall(name, Math.trunc(a / b))
    case '%':
      if (b === 0) throw divisionByZero()
      // Postgres special-cases MIN % -1 to 0 rather than trapping; so does JS (as -0).
      return checkSmall(name, a % b)
  }
}

export function bigArith(op: ArithOp, a: bigint, b: bigint): bigint {
  switch (op) {
    case '+':
      return checkBig(a + b)
    case '-':
      return checkBig(a - b)
    case '*':
      return checkBig(a * b)
    case '/':
      if (b === 0n) throw divisionByZero()
      return checkBig(a / b)
    case '%':
      if (b === 0n) throw divisionByZero()
      return a % b
  }
}

export function negateSmall(name: 'int2' | 'int4', a: number): number {
  return checkSmall(name, 0 - a)
}

export function negateBig(a: bigint): bigint {
  return checkBig(-a)
}

export function compareNumbers(a: number, b: number): number {
  return a < b ? -1 : a > b ? 1 : 0
}

export function compareBigints(a: bigint, b: bigint): number {
  return a < b ? -1 : a > b ? 1 : 0
}
