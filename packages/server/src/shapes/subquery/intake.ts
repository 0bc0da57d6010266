import type { RowValues } from '@sluice/protocol'

/*
 * What a subquery shape's members receive from the router: the lines of the
 * shape's tables encoded with every column and REPLICA FULL (route-contracts
 * ShapeTarget), read back into rows. A full line carries the whole new row in
 * `value`, and for an update the changed columns' old values in `old_value`,
 * so both rows are known; a key change arrives as a delete and an insert.
 */

export interface IntakeChange {
  readonly op: number
  readonly operation: 'insert' | 'update' | 'delete'
  readonly key: string
  /** The row after (insert, update) or the row deleted (delete). */
  readonly row: RowValues
  /** An update's row before. */
  readonly old: RowValues | undefined
  /** An update's changed columns. */
  readonly changed: readonly string[]
  readonly keyChangeTo: string | undefined
  readonly keyChangeFrom: string | undefined
}

const decoder = new TextDecoder()

interface FullLine {
  key: string
  value: Record<string, string | null>
  old_value?: Record<string, string | null>
  headers: { operation: 'insert' | 'update' | 'delete'; key_change_to?: string; key_change_from?: string }
}

/**
 * Lines already read, by the line object: the router hands one encoded line
 * (one object) to every member that projects alike, so a change reaching many
 * subquery shapes is parsed once. The objects are new per encoding, so an
 * entry never outlives its bytes' meaning.
 */
const read = new WeakMap<Uint8Array, IntakeChange>()

export function readIntake(op: number, bytes: Uint8Array): IntakeChange {
  const known = read.get(bytes)
  if (known !== undefined && known.op === op) return known
  const change = parse(op, bytes)
  read.set(bytes, change)
  return change
}

function parse(op: number, bytes: Uint8Array): IntakeChange {
  const line = JSON.parse(decoder.decode(bytes)) as FullLine
  const { operation } = line.headers
  const changed = line.old_value === undefined ? [] : Object.keys(line.old_value)
  return {
    op,
    operation,
    key: line.key,
    row: line.value,
    old: operation === 'update' ? { ...line.value, ...line.old_value } : undefined,
    changed,
    keyChangeTo: line.headers.key_change_to,
    keyChangeFrom: line.headers.key_change_from,
  }
}
