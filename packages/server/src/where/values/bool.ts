import { invalidSyntax } from '../where-error.js'

const WORDS: readonly [string, boolean, number][] = [
  // word, value, shortest accepted prefix ('o' alone is ambiguous between on and off)
  ['true', true, 1],
  ['false', false, 1],
  ['yes', true, 1],
  ['no', false, 1],
  ['on', true, 2],
  ['off', false, 2],
]

/** `boolin`: t/f, true/false, yes/no, on/off and 1/0, any case, any unique prefix, spaces around. */
export function parseBool(text: string): boolean {
  if (text === 't') return true
  if (text === 'f') return false
  const body = text.replace(/^[ \t\n\v\f\r]+|[ \t\n\v\f\r]+$/g, '').toLowerCase()
  if (body === '1') return true
  if (body === '0') return false
  if (body !== '') {
    for (const [word, value, minimum] of WORDS) {
      if (body.length >= minimum && word.startsWith(body)) return value
    }
  }
  throw invalidSyntax('boolean', text)
}

/** `boolout`, what replication and arrays carry. */
export function formatBool(value: boolean): string {
  return value ? 't' : 'f'
}

/** The bool → text cast (`booltext`), which spells the words out. */
export function boolToText(value: boolean): string {
  return value ? 'true' : 'false'
}

export function compareBool(a: boolean, b: boolean): number {
  return a === b ? 0 : a ? 1 : -1
}
