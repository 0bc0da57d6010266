// The replication stage: pgoutput over a replication connection, decoded to raw
// text tuples, assembled into transactions for a ChangeSink (docs/architecture.md §2);
// streamed transactions wait in a StreamBuffer (in memory, or spilled to disk)
// until BufferingSink hands them on, committed, to a TransactionSink.
export { assertNoUnchangedToast } from './assert-no-unchanged-toast.js'
export { DEFAULT_BACKOFF, backoffDelay } from './backoff.js'
export type { BackoffPolicy } from './backoff.js'
export type {
  Awaitable,
  BufferedTransaction,
  Change,
  ChangeSink,
  DeleteChange,
  InsertChange,
  StreamAbort,
  StreamAbortReason,
  StreamCommit,
  StreamedChange,
  Transaction,
  TransactionSink,
  TruncateChange,
  UpdateChange,
} from './change-sink.js'
export { DISPLAY_SETTINGS, startupOptions } from './display-settings.js'
export { MemoryStreamBuffer } from './memory-stream-buffer.js'
export { DEFAULT_PUBLICATION_NAME, DEFAULT_SLOT_NAME, quoteLiteral, validatePublicationName, validateSlotName } from './pg-names.js'
export { PgoutputDecoder, decodePgoutput } from './pgoutput-decoder.js'
export type { DecodeContext } from './pgoutput-decoder.js'
export { UNCHANGED_TOAST } from './pgoutput-messages.js'
export type {
  BeginMessage,
  CommitMessage,
  DeleteMessage,
  InsertMessage,
  LogicalMessage,
  OldTupleKind,
  OriginMessage,
  PgoutputMessage,
  PgoutputTag,
  Relation,
  RelationColumn,
  RelationMessage,
  ReplicaIdentity,
  StreamAbortMessage,
  StreamCommitMessage,
  StreamStartMessage,
  StreamStopMessage,
  TruncateMessage,
  Tuple,
  TupleValue,
  TypeMessage,
  UnchangedToast,
  UpdateMessage,
} from './pgoutput-messages.js'
export { SluicePgoutputPlugin } from './pgoutput-plugin.js'
export type { DecodeFailure, PgoutputPluginOptions, ProtoVersion, StreamSetup } from './pgoutput-plugin.js'
export { PublicationManager } from './publication-manager.js'
export type { AddTableResult, PublicationManagerOptions } from './publication-manager.js'
export type { Queryable } from './queryable.js'
export { RelationCache, relationChanged } from './relation-cache.js'
export type { TypeInfo } from './relation-cache.js'
export {
  DEFAULT_LIVENESS_TIMEOUT_MS,
  DEFAULT_STATUS_INTERVAL_MS,
  ReplicationClient,
} from './replication-client.js'
export type { ConnectedInfo, DisconnectedInfo, ReplicationClientEvents, ReplicationClientOptions } from './replication-client.js'
export {
  InvalidNameError,
  PgoutputDecodeError,
  ProtocolViolationError,
  PublicationNotFoundError,
  REPLICATION_ERROR_CODES,
  ReplicationError,
  ReplicationPrivilegeError,
  ServerConfigurationError,
  SlotMismatchError,
  SlotNotFoundError,
  TableNotFoundError,
  UnchangedToastError,
  UnknownRelationError,
} from './replication-errors.js'
export type { ReplicationErrorCode } from './replication-errors.js'
export { SLOT_PLUGIN, SlotManager } from './slot-manager.js'
export {
  DEFAULT_QUEUE_FLUSH_BYTES,
  DEFAULT_QUEUE_READ_BYTES,
  DEFAULT_SPILL_BATCH_BYTES,
  DEFAULT_SPILL_BATCH_CHANGES,
  DEFAULT_SPILL_MEMORY_BYTES,
  DEFAULT_SPILL_READ_BYTES,
  SPILL_ERROR_CODES,
  SPILL_FILE_SUFFIX,
  SPILL_FORMAT_VERSION,
  SPILL_HEADER_BYTES,
  SpillDir,
  SpillError,
  SpillQueue,
  SpillStreamBuffer,
} from './spill/index.js'
export type { QueueCodec, SpillDirOptions, SpillErrorCode, SpillFile, SpillQueueOptions, SpillStreamBufferOptions } from './spill/index.js'
export { BufferingSink, wholeTransactions } from './stream-buffer.js'
export type { StreamAhead, StreamBuffer } from './stream-buffer.js'
export type { EnsureSlotResult, SlotInfo, SlotManagerOptions } from './slot-manager.js'
export { DEFAULT_MAX_TRANSACTION_BYTES, DEFAULT_STREAM_BATCH_SIZE, TransactionAssembler } from './transaction-assembler.js'
export type { TransactionAssemblerOptions } from './transaction-assembler.js'
