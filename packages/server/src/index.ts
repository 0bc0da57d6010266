// The public API of @sluice/server: what an embedder needs to run Sluice in its
// own process, listed by name. Everything else (the stages' classes, codecs,
// caches, the where compiler) is internal and may change without notice; the
// `sluice` CLI (`main.ts`) and the tests reach it by path.

// A whole server from a config: embedded Postgres when needed, pipeline, HTTP, /metrics.
export { type CreateServerOptions, type SluiceServer, createServer } from './server.js'
// A read replica of a writer's storage directory (`sluice start --read-only`): the same HTTP app, no pipeline.
export { type CreateReplicaServerOptions, type ReplicaServer, createReplicaServer } from './replica/replica-server.js'

// Configuration: one schema for flags, env vars and --help.
export {
  ConfigError,
  LOG_LEVELS,
  type LogLevel,
  SETTINGS,
  type Setting,
  type SettingType,
  type SluiceConfig,
  loadConfig,
} from './config.js'
export { type CreateLoggerOptions, type SluiceLogger, createLogger } from './logger.js'
export { type EmbeddedPostgres, EmbeddedPostgresError } from './embedded-postgres.js'
export { type YoungGcSetting, configureYoungGc } from './young-gc.js'
// SIGINT/SIGTERM for a process that runs a server: repeats within a second are one request.
export { REPEAT_WINDOW_MS, type ShutdownSignalHandlers, onShutdownSignals } from './shutdown-signals.js'

// The pipeline on its own (replication -> shapes -> storage), for an embedder with its own HTTP server.
export { DEFAULT_SUBSET_CONNECTIONS, Pipeline, type PipelineOptions, type ReplicationGap } from './pipeline.js'
export { PipelineHealth } from './pipeline-health.js'
// What /v1/health reports: its stable reason codes and the body.
export { HEALTH_REASONS, type HealthReason, type HealthReasonCode, type HealthReport, healthBody } from './health-report.js'
export type { ShapeLogger } from './shapes/shape-manager.js'
export { DEFAULT_PUBLICATION_NAME, DEFAULT_SLOT_NAME } from './replication/index.js'

// The port between the HTTP layer and the pipeline (`pipeline.shapeService`).
export {
  type CompiledSubset,
  type FlushListener,
  type PgSnapshot,
  type ResolvedShape,
  type ShapeDefinition,
  type ShapeService,
  type ShapeStatus,
  type SubsetRun,
  type SubsetSink,
  type SubsetStart,
  type TableColumn,
  type TableInfo,
  headOffset,
  isShapeInvalidated,
} from './shape-service.js'

// The HTTP app (fastify), built apart from listen(), and the metrics it reports to.
export {
  type BodyPath,
  type BodyPathName,
  type BuildAppOptions,
  DEFAULT_HTTP_OPTIONS,
  type HttpMetrics,
  type HttpOptions,
  type ShapeWaiters,
  buildApp,
  resolveBodyPath,
} from './http/index.js'
export { type MetricsOptions, ServerMetrics } from './metrics.js'

// Errors an embedder can meet, each with a stable `code`; one table of every code, its status and wire body.
export { SERVER_ERRORS, ServerError, httpStatusOf, isServerErrorCode } from './errors.js'
export type { ServerErrorCode, ServerErrorSpec } from './errors.js'
export {
  REPLICATION_ERROR_CODES,
  ReplicationError,
  type ReplicationErrorCode,
  SPILL_ERROR_CODES,
  SpillError,
  type SpillErrorCode,
} from './replication/index.js'
export { SHAPE_ERROR_CODES, ShapeError, type ShapeErrorCode } from './shapes/shape-error.js'
export {
  SNAPSHOT_ERROR_CODES,
  SnapshotError,
  type SnapshotErrorCode,
  SubsetError,
  TableCatalogError,
  type TableCatalogErrorCode,
  TableNotSupportedError,
} from './shapes/index.js'
export { WhereClauseError } from './where/index.js'
// Catalog reads as the shape pipeline makes them (bench/catalog measures them).
export { loadTable, loadTableStates, type TableState } from './shapes/table-catalog.js'
