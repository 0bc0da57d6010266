// Initial snapshots of shapes (PROTOCOL.md §9, DESIGN.md §2): the row query built in SQL,
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
export { DEFAULT_SNAPSHOT_BATCH_BYTES, DEFAULT_SNAPSHOT_BATCH_ROWS, runSnapshot } from './run-snapshot.js'
export type {
  SnapshotOptions,
  SnapshotRequest,
  SnapshotResult,
  SnapshotSink,
  SnapshotStart,
  SnapshotTableRequest,
  SnapshotTextRequest,
} from './run-snapshot.js'
