import type { Change } from './change-sink.js'
import { UnchangedToastError } from './replication-errors.js'

/**
 * Throws `UnchangedToastError` when an update still carries unchanged-TOAST
 * markers, i.e. a consumer that needs whole rows met a table that is not
 * REPLICA IDENTITY FULL (docs/protocol.md §9: the error asks for it).
 */
export function assertNoUnchangedToast(change: Change): void {
  if (change.kind !== 'update' || change.unchangedToast.length === 0) return
  const { relation } = change
  const columns = change.unchangedToast.map((i) => relation.columns[i]?.name ?? `#${i}`)
  throw new UnchangedToastError(relation.schema, relation.table, columns)
}
