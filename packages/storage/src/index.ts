// The package's public surface. Shared pieces at src/, the file engine in
// src/file/, the memory engine in src/memory/.
export type {
  AppendOptions,
  SnapshotAppendOptions,
  FlushListenerOptions,
  FlushResult,
  LogEntryInput,
  LogHead,
  LogRead,
  ShapeLog,
  ShapeLogStore,
  SnapshotWriter,
  Span,
} from './contract.js'
export { STORAGE_ERROR_CODES, StorageError, FlushError } from './errors.js'
export type { StorageErrorCode } from './errors.js'
export type { FsPort } from './fs-port.js'
export { nodeFs, writeFullyAsync } from './fs-port.js'
export { forEachConcurrently } from './concurrently.js'
export {
  DEFAULT_CHUNK_BYTES,
  DEFAULT_FLUSH_BYTES,
  DEFAULT_FLUSH_INTERVAL_MS,
  DEFAULT_HEADS_INTERVAL_MS,
  DEFAULT_MAX_OPEN_FILES,
  DEFAULT_TAIL_BUDGET_BYTES,
} from './defaults.js'
export { FileLogStore, openFileLogStore } from './file/file-store.js'
export type { CheckpointStats, FileStoreOptions, FileStoreStats } from './file/store-options.js'
export { LOCK_RETRY_MS, type StoreLockOptions } from './file/store-lock.js'
export type { StatFiles } from './file/stat-files.js'
export type { FileShapeLog } from './file/file-log.js'
export { ReadOnlyFileLogStore, openReadOnlyLogStore } from './file/read-only-store.js'
export { SHAPE_BUCKETS, bucketOf, bucketPath, isBucketName, listBuckets, shapeDir, shapesRoot } from './file/shape-dirs.js'
export { LIVE_WATERMARK_FILE, WATERMARK_FILE } from './file/watermark.js'
export type { ReadOnlyStoreOptions } from './file/read-only-store.js'
export { MemoryLogStore } from './memory/memory-store.js'
export { entriesFromLines } from './entries-from-lines.js'
export type { MemoryStoreOptions } from './memory/memory-store.js'
export { readSpans, readSpansAsync, readSpansInto, readSpansIntoAsync } from './read-spans.js'
