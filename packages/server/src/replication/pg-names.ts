import { InvalidNameError } from './replication-errors.js'

export const DEFAULT_SLOT_NAME = 'sluice_slot'
export const DEFAULT_PUBLICATION_NAME = 'sluice_publication'

/** NAMEDATALEN - 1: Postgres truncates longer names, which would silently point elsewhere. */
const MAX_NAME_BYTES = 63
/** Postgres's own rule for slot names (ReplicationSlotValidateName). */
const SLOT_NAME = /^[a-z0-9_]+$/

export function validateSlotName(name: string): string {
  if (!SLOT_NAME.test(name) || name.length > MAX_NAME_BYTES) {
    throw new InvalidNameError('slot', name, `1-${MAX_NAME_BYTES} characters of lower-case letters, digits and underscores`)
  }
  return name
}

/** Any identifier is a valid publication name; it is always quoted. */
export function validatePublicationName(name: string): string {
  if (name === '' || Buffer.byteLength(name) > MAX_NAME_BYTES || name.includes('\0')) {
    throw new InvalidNameError('publication', name, `1-${MAX_NAME_BYTES} bytes, no NUL`)
  }
  return name
}

/** A SQL string literal (standard_conforming_strings, always on since Postgres 9.1). */
export function quoteLiteral(value: string): string {
  return `'${value.replaceAll("'", "''")}'`
}
