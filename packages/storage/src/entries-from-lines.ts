import type { LogEntryInput } from './contract.js'
import { StorageError } from './errors.js'

/**
 * `appendLines`' parallel arrays as entries, for a store whose append path
 * takes entries anyway (the memory store, the benchmark's peers).
 */
export function entriesFromLines(tx: bigint, ops: readonly number[], jsons: readonly Uint8Array[], count: number): LogEntryInput[] {
  if (!Number.isInteger(count) || count < 0 || count > ops.length || count > jsons.length) {
    throw new StorageError('invalid_append', `${count} entries asked of arrays of ${ops.length} ops and ${jsons.length} lines`)
  }
  const entries = new Array<LogEntryInput>(count)
  for (let i = 0; i < count; i++) {
    const op = ops[i]!
    if (!Number.isSafeInteger(op)) throw new StorageError('invalid_append', `op ${op} is not an integer below 2^53`)
    entries[i] = { offset: { tx, op: BigInt(op) }, json: jsons[i]! }
  }
  return entries
}
