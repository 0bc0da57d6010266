// Spilling to disk: bounded-memory buffers for streamed transactions and for
// queues of routed parts (docs/architecture.md §2; the limits in docs/protocol.md §11). Files go through the storage engine's FsPort.
export { SPILL_ERROR_CODES, SpillError } from './errors.js'
export type { SpillErrorCode } from './errors.js'
export { SPILL_FORMAT_VERSION, SPILL_HEADER_BYTES, SPILL_MAGIC } from './format.js'
export type { SpillFileKind } from './format.js'
export { SPILL_FILE_SUFFIX, SpillDir } from './spill-dir.js'
export type { SpillDirOptions, SpillFile } from './spill-dir.js'
export { DEFAULT_QUEUE_FLUSH_BYTES, DEFAULT_QUEUE_READ_BYTES, SpillQueue } from './spill-queue.js'
export type { QueueCodec, SpillQueueOptions } from './spill-queue.js'
export {
  DEFAULT_SPILL_BATCH_BYTES,
  DEFAULT_SPILL_BATCH_CHANGES,
  DEFAULT_SPILL_MEMORY_BYTES,
  DEFAULT_SPILL_READ_BYTES,
  SpillStreamBuffer,
} from './spill-stream-buffer.js'
export type { SpillStreamBufferOptions } from './spill-stream-buffer.js'
