// The one door between the HTTP layer and the rest of the server. `http/` sees
// shapes, their logs and subset snapshots only through `ShapeService`; it runs
// no SQL, reads no pipeline field and imports nothing from `shapes/`. The port
// sits beside `pipeline.ts`, not inside a stage, because what it offers spans
// stages: the shape registry and snapshots (`shapes/`), the logs (storage), the
// router's recent transactions and the pipeline's own subset pool.
// `PipelineShapeService` (pipeline-shape-service.ts) implements it over the
// pipeline; `ReplicaShapeService` (replica/) over a store another process writes.
import { LAST_VIRTUAL, type LogOffset, type ShapeDefinitionParams, type SubsetRequest, isBeforeAll, isVirtual } from '@sluice/protocol'
import type { ShapeLog } from '@sluice/storage'
import type { CompiledSubset, PgSnapshot, ShapeDefinition, TableColumn, TableInfo } from './shapes/index.js'
import type { CreationGate } from './shapes/shape-manager.js'
import type { HealthReport } from './health-report.js'
import { ServerError } from './errors.js'
import { ShapeError } from './shapes/shape-error.js'

export { healthBody } from './health-report.js'
export type { CompiledSubset, CreationGate, HealthReport, PgSnapshot, ShapeDefinition, TableColumn, TableInfo }
/** The shape errors the HTTP layer maps to wire errors (an `invalid_columns` one names its columns as data). */
export type { ShapeError }

/** A request's definition resolved to its current shape (what HTTP needs of ShapeManager's answer). */
export interface ResolvedShape {
  readonly handle: string
  /** The definition as normalised against the table: equal definitions have the same handle. */
  readonly definition: ShapeDefinition
  readonly table: TableInfo
}

/** 'active' (ready or being created), 'expired' (invalidated or deleted) or 'unknown'. */
export type ShapeStatus = 'active' | 'expired' | 'unknown'

/** What a subset snapshot reports before its rows (docs/protocol.md §6). */
export interface SubsetStart {
  readonly snapshot: PgSnapshot
  /** `pg_current_wal_insert_lsn()` after the snapshot: above the commit LSN of everything it sees. */
  readonly insertLsn: bigint
  /** The shape log's head (see `headOffset`) that the snapshot is known to cover. */
  readonly position: LogOffset
}

/** Receives a subset snapshot as it is read; `rows` may return a promise to apply back-pressure. */
export interface SubsetSink {
  /** Once, before any rows. */
  start(info: SubsetStart): void | Promise<void>
  rows(lines: Uint8Array[]): void | Promise<void>
}

export interface SubsetRun {
  readonly shape: ResolvedShape
  /** The shape's ready log: its head is the position the response reports. */
  readonly log: ShapeLog
  readonly subset: CompiledSubset
  /** The response's `snapshot_mark`, echoed in the rows' headers. */
  readonly snapshotMark: number
  /** Cancels the query (the client went away). */
  readonly signal: AbortSignal
}

/** The flushes that advanced logs: what live waiters wake on (see http/live). */
export type FlushListener = (result: { durableLsn: bigint; advanced: readonly string[] }) => void

export interface ShapeService {
  /**
   * The shape for a definition: the existing one, or a new one whose snapshot
   * starts in the background. Throws for a definition that cannot be a shape
   * (`toSluiceError` maps it). A new shape is created only if `gate` admits
   * it for `client` (the requester, as admission control tells clients apart).
   */
  resolve(params: ShapeDefinitionParams, gate?: CreationGate, client?: string): Promise<ResolvedShape>
  /**
   * The shape's log once its snapshot is published. Rejects when it never will
   * be: `isShapeInvalidated(error)` when the shape was invalidated meanwhile.
   */
  ready(handle: string): Promise<ShapeLog>
  status(handle: string): ShapeStatus
  /** The active handle for a definition, without creating a shape. */
  lookup(definition: ShapeDefinition): string | undefined
  /**
   * The active handle for a request's definition, without creating a shape:
   * normalised against the table of a shape already on it (no shape on the
   * table means no match, and no catalog query).
   */
  find(params: ShapeDefinitionParams): Promise<string | undefined>
  /**
   * The error for a request whose offset is past its shape's head and stayed
   * so for the whole wait (docs/protocol.md §4.1). The writer's is the 400 of
   * the protocol: it never issued that offset. A replica's is a 503 the client
   * retries: the writer may have issued it, and this server has not seen it yet.
   */
  offsetNotReached(): Error
  /** Deletes a shape (HTTP DELETE); false if there is none. */
  delete(handle: string): Promise<boolean>
  /** The shape's log as the store holds it, until the shape is deleted: what SSE streams read. */
  get(handle: string): ShapeLog | undefined
  /** Listens to flushes that publish data; returns the unsubscribe. Called when the first live request waits, not per request. */
  onFlush(listener: FlushListener): () => void
  /**
   * Says which shapes live requests wait on: those do not expire, and are
   * evicted only when no other shape can be.
   */
  setInUse(inUse: (handle: string) => boolean): void
  /** Listens to shapes being invalidated (rotated, truncated, deleted, expired, evicted); returns the unsubscribe. */
  onInvalidated(listener: (handle: string) => void): () => void
  /**
   * The global last-processed LSN of docs/protocol.md §3.4: the commit LSN of the
   * last replicated transaction the store has made durable.
   */
  readonly lastSeenLsn: bigint
  /** Checks a subset against the shape's table. Throws `SubsetError` (a 400) for a subset that cannot run. */
  compileSubset(subset: SubsetRequest, table: TableInfo): Promise<CompiledSubset>
  /**
   * Runs a subset snapshot in its own REPEATABLE READ transaction, streaming its
   * rows to the sink. What Postgres refuses in the query as built is thrown as
   * `SubsetError` (a 400); other failures as they come.
   */
  runSubset(run: SubsetRun, sink: SubsetSink): Promise<void>
  /**
   * Whether clients can be kept up to date now (what `/v1/health` answers):
   * empty reasons, or why not (the store cannot commit, replication is down,
   * stopped or paused).
   */
  health(): HealthReport
}

/**
 * Where a reader stands at the head of a log: its last offset, or `0_inf` while
 * it holds only the snapshot (every virtual offset is then in bounds, and a
 * shape with no real entries reports `0_inf` for `offset=now`, docs/protocol.md §4.1).
 */
export function headOffset(log: ShapeLog): LogOffset {
  const last = log.head().lastOffset
  return isBeforeAll(last) || isVirtual(last) ? LAST_VIRTUAL : last
}

/**
 * Whether `resolve` failed because a read replica holds no shape for the
 * definition (yet): the writer has not made it, or deleted the one it had.
 */
export function isNotOnReplica(error: unknown): boolean {
  return error instanceof ServerError && error.code === 'shape_not_on_replica'
}

/** Whether `resolve` failed because the table does not exist (or no longer does). */
export function isTableNotFound(error: unknown): boolean {
  return error instanceof ShapeError && error.code === 'table_not_found'
}

/**
 * The answer to a client that followed a shape (it names the shape's retired
 * handle) whose table is gone: retry later, as its table may come back (a
 * migration dropping and creating it again), rather than a 400 that stops it.
 */
export function shapeTableGone(schema: string, name: string, cause: unknown): ShapeError {
  return new ShapeError('table_gone', `the table ${JSON.stringify(schema)}.${JSON.stringify(name)} of the shape no longer exists`, { cause })
}

/** Whether `ready` failed because the shape was invalidated before its snapshot was published. */
export function isShapeInvalidated(error: unknown): boolean {
  return error instanceof ShapeError && error.code === 'shape_invalidated'
}
