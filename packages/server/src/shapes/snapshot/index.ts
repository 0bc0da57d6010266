// Initial snapshots of shapes (docs/protocol.md §9, docs/architecture.md §2) and subset snapshots (§6): the row query built in SQL,
// the REPEATABLE READ run that streams it, and the snapshot's visibility rules for stitching.
export {
  encodeSnapshotEnd,
  formatPgSnapshot,
  isFullXidVisible,
  isVisibleInSnapshot,
  parsePgSnapshot,
  widenXid,
} from './pg-snapshot.js'
export type { PgSnapshot } from './pg-snapshot.js'
export { SNAPSHOT_ERROR_CODES, SnapshotError, snapshotErrorFrom } from './snapshot-error.js'
export type { SnapshotErrorCode } from './snapshot-error.js'
export { buildSnapshotQuery, columnText } from './snapshot-query.js'
export type { SnapshotQueryOptions } from './snapshot-query.js'
export { DEFAULT_SNAPSHOT_BATCH_BYTES, DEFAULT_SNAPSHOT_BATCH_ROWS, DEFAULT_SNAPSHOT_LOCK_TIMEOUT_MS, runSnapshot } from './run-snapshot.js'
export type {
  SnapshotOptions,
  SnapshotRequest,
  SnapshotResult,
  SnapshotSink,
  SnapshotStart,
  SnapshotTableRequest,
  SnapshotTextRequest,
} from './run-snapshot.js'
export { SubsetError } from './subset-error.js'
export type { SubsetErrorField, SubsetErrorReason } from './subset-error.js'
export { MAX_ORDER_BY_KEYS, MAX_ORDER_BY_LENGTH, orderBySql, parseOrderBy, parseOrderBySync } from './subset-order-by.js'
export type { OrderByKey } from './subset-order-by.js'
export { buildSubsetQuery, compileSubset } from './subset-query.js'
export type { BuildSubsetQueryOptions, CompiledSubset, SubsetQuery } from './subset-query.js'
export { MAX_SUBSET_ATTEMPTS, runSubsetSnapshot } from './run-subset.js'
export type { SubsetFix, SubsetRunRequest, SubsetSink, SubsetStart } from './run-subset.js'
