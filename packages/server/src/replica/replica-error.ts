import { ServerError, codeTable } from '../errors.js'

/** What a read replica answers instead of doing what only the writer can (docs/errors.md). */
export const REPLICA_ERROR_CODES = codeTable('shape_not_on_replica', 'offset_not_on_replica', 'read_only_replica')

export type ReplicaErrorCode = keyof typeof REPLICA_ERROR_CODES

export class ReplicaError extends ServerError<ReplicaErrorCode> {
  override readonly name = 'ReplicaError'
}
