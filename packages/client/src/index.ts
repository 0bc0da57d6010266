export {
  DEFAULT_LIVE_REQUEST_TIMEOUT_MS,
  DEFAULT_MIN_SSE_CONNECTION_MS,
  DEFAULT_SSE_IDLE_TIMEOUT_MS,
  type Dynamic,
  type RetryOptions,
  type ShapeParams,
  type ShapeStreamOptions,
  type Timers,
  type WhereParams,
  realTimers,
} from './stream-options.js'
export { ShapeStream, type Subscriber } from './shape-stream.js'
export { isRetryable } from './errors.js'
export { type OpenShapeOptions, Shape, type ShapeData, type ShapeOptions, defaultStorageKey } from './shape.js'
export {
  type AbortEvent,
  type EventType,
  type FatalErrorEvent,
  type InitialPosition,
  type LiveState,
  MAX_SHORT_SSE_CONNECTIONS,
  type MustRefetchEvent,
  type RecoveredEvent,
  type ResponseEvent,
  type RetryableErrorEvent,
  type SseBatchEvent,
  type SseEndedEvent,
  type SseUnsupportedEvent,
  type StateKind,
  type StoppedState,
  type StreamEvent,
  type StreamState,
  type SyncingState,
  TRANSITIONS,
  type TransitionTable,
  initialState,
  transition,
} from './stream-state.js'
export {
  type ChangeMessage,
  type Message,
  isChangeMessage,
  isControlMessage,
  isEventMessage,
  isMustRefetchMessage,
  isUpToDateMessage,
  parseBody,
  parseMessage,
} from './messages.js'
export {
  DEFAULT_PARSERS,
  type JsonValue,
  type ParseFunction,
  type Parsers,
  type Row,
  type RowParser,
  type Value,
  columnParser,
  createRowParser,
} from './value-parser.js'
export { type ArrayValue, parseArrayLiteral } from './array-literal.js'
export { type BackoffOptions, DEFAULT_BACKOFF, backoffDelay, parseRetryAfter } from './backoff.js'
export { readSseEvents } from './sse-reader.js'
export { type PersistedRowTags, type TagHeaders, TagTracker } from './tag-tracker.js'
export { MemoryShapeStorage, PERSISTED_SHAPE_VERSION, type PersistedShape, type ShapeStorage } from './storage.js'
export { decodePersistedShape, encodePersistedShape } from './storage-codec.js'
export { LocalStorageShapeStorage, type StringStorage } from './local-storage.js'
export { IndexedDbShapeStorage } from './indexed-db.js'
export { type SnapshotVisibility, type Txid, lowXid, snapshotVisibility, toXid8, visibleInSnapshot } from './txid.js'
export {
  AbortedError,
  ClientError,
  type ClientErrorCode,
  FetchError,
  InvalidArrayLiteralError,
  InvalidOptionsError,
  InvalidResponseError,
  InvalidTransitionError,
  InvalidTxidError,
  MissingHeadersError,
  NetworkError,
  ParserNullValueError,
  StorageCodecError,
  StorageSaveError,
  SubscriberError,
} from './errors.js'
