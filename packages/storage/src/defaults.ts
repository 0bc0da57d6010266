import { StorageError } from './errors.js'

/** A chunk closes after the entry that makes it reach this many bytes (Electric's default). */
export const DEFAULT_CHUNK_BYTES = 10 * 1024 * 1024

const SHAPE_ID = /^[A-Za-z0-9_-]{1,128}$/

/** Shape ids become directory names, so they are restricted to a safe alphabet. */
export function checkShapeId(id: string): void {
  if (!SHAPE_ID.test(id)) throw new StorageError('invalid_shape_id', `invalid shape id ${JSON.stringify(id)}`)
}
