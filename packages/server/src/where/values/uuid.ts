import { invalidSyntax } from '../where-error.js'

const HEX = /^[0-9a-fA-F]{2}$/

/**
 * `uuid_in`: 32 hex digits, optionally in braces, with a hyphen allowed after
 * any group of four digits; the result is the canonical lowercase 8-4-4-4-12
 * form, so values compare (byte order) and hash as plain strings.
 */
export function parseUuid(text: string): string {
  if (text.length === 36 && CANONICAL.test(text)) return text
  let i = 0
  const braces = text.charAt(0) === '{'
  if (braces) i++
  let hex = ''
  for (let byte = 0; byte < 16; byte++) {
    const pair = text.slice(i, i + 2)
    if (!HEX.test(pair)) throw invalidSyntax('uuid', text)
    hex += pair
    i += 2
    if (text.charAt(i) === '-' && byte % 2 === 1 && byte < 15) i++
  }
  if (braces) {
    if (text.charAt(i) !== '}') throw invalidSyntax('uuid', text)
    i++
  }
  if (i !== text.length) throw invalidSyntax('uuid', text)
  hex = hex.toLowerCase()
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`
}

const CANONICAL = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/
