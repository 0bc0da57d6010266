import type { SqlType } from './sql-type.js'
import { isScalar } from './sql-type.js'
import { likeEscape } from './values/like.js'
import { charLength, lowerAscii, octetLength, trimBpchar, upperAscii } from './values/text.js'

/**
 * The allow-listed functions (catalog.ts lists their signatures), for the
 * argument types resolution chose. Strict: never called with NULL.
 */
export function functionImpl(name: string, args: readonly SqlType[]): (...values: unknown[]) => unknown {
  const bpchar = isScalar(args[0] as SqlType, 'bpchar')
  switch (name) {
    case 'lower':
      return (s) => lowerAscii(s as string)
    case 'upper':
      return (s) => upperAscii(s as string)
    case 'length':
    case 'char_length':
    case 'character_length':
      return bpchar ? (s) => charLength(trimBpchar(s as string)) : (s) => charLength(s as string)
    case 'octet_length':
      return (s) => octetLength(s as string)
    case 'like_escape':
      return (p, e) => likeEscape(p as string, e as string)
  }
  throw new Error(`no implementation for function ${name}`)
}

