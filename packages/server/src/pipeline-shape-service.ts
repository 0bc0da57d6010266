// `ShapeService` over a running pipeline's parts: the shape manager, the store,
// the router's recent transactions and the pool that runs subset snapshots.
// Each method is one call into the part that owns the answer; the per-request
// ones (resolve, ready, status, lastSeenLsn) add no allocation or await.
import { type LogOffset, type ShapeDefinitionParams, type SubsetRequest, offsetOutOfBounds } from '@sluice/protocol'
import type { ShapeLog, ShapeLogStore } from '@sluice/storage'
import type pg from 'pg'
import type { HealthReport } from './health-report.js'
import {
  type FlushListener,
  type ResolvedShape,
  type ShapeService,
  type ShapeStatus,
  type SubsetRun,
  type SubsetSink,
  headOffset,
} from './shape-service.js'
import { type ShapeDefinition, compileDefinition } from './shapes/definition/index.js'
import type { CreationGate, ShapeInvalidated, ShapeManager } from './shapes/shape-manager.js'
import { byHandles } from './shapes/compaction/log-ids.js'
import { SnapshotError, SubsetError, buildSubsetQuery, compileSubset, runSubsetSnapshot } from './shapes/snapshot/index.js'
import { tagHeadersSql } from './shapes/subquery/snapshot-sql.js'
import type { CompiledSubset } from './shapes/snapshot/index.js'
import { type TableInfo, whereColumns } from './shapes/table-catalog.js'

/** One subset query, row streaming included, may take this long before Postgres cancels it. */
export const SUBSET_STATEMENT_TIMEOUT_MS = 60_000

export interface PipelineShapeServiceParts {
  readonly shapes: ShapeManager
  readonly store: ShapeLogStore
  /** The xids of the transactions routed last (ShapeRouter.recentXids), read before each subset snapshot attempt. */
  readonly router: { readonly recentXids: readonly number[] }
  /** Runs subset snapshots; its size bounds how many run at once (more wait for a connection). */
  readonly subsetPool: pg.Pool
  /** The commit LSN of the last transaction routed, kept by the pipeline's router callback. */
  readonly routed: { readonly lsn: bigint }
  /** The pipeline's health (PipelineHealth). */
  readonly health: { report(): HealthReport }
}

export class PipelineShapeService implements ShapeService {
  private readonly shapes: ShapeManager
  private readonly store: ShapeLogStore
  private readonly router: PipelineShapeServiceParts['router']
  private readonly subsetPool: pg.Pool
  private readonly routed: PipelineShapeServiceParts['routed']
  private readonly pipelineHealth: PipelineShapeServiceParts['health']

  constructor(parts: PipelineShapeServiceParts) {
    this.shapes = parts.shapes
    this.store = parts.store
    this.router = parts.router
    this.subsetPool = parts.subsetPool
    this.routed = parts.routed
    this.pipelineHealth = parts.health
  }

  health(): HealthReport {
    return this.pipelineHealth.report()
  }

  resolve(params: ShapeDefinitionParams, gate?: CreationGate, client?: string): Promise<ResolvedShape> {
    return this.shapes.resolve(params, gate, client)
  }

  setInUse(inUse: (handle: string) => boolean): void {
    this.shapes.setInUse(inUse)
  }

  ready(handle: string): Promise<ShapeLog> {
    return this.shapes.ready(handle)
  }

  status(handle: string): ShapeStatus {
    return this.shapes.status(handle)
  }

  lookup(definition: ShapeDefinition): string | undefined {
    return this.shapes.lookup(definition)
  }

  async find(params: ShapeDefinitionParams): Promise<string | undefined> {
    const shapes = this.shapes
    for (const handle of shapes.handles()) {
      const def = shapes.definition(handle)
      const table = shapes.table(handle)
      if (def === undefined || table === undefined) continue
      if (def.schema !== params.table.schema || def.table !== params.table.name) continue
      const { definition } = await compileDefinition(params, whereColumns(table))
      return shapes.lookup(definition)
    }
    return undefined
  }

  delete(handle: string): Promise<boolean> {
    return this.shapes.delete(handle)
  }

  get(handle: string): ShapeLog | undefined {
    // A compacted shape's log is stored under another id (shapes/compaction/log-ids.ts).
    return this.shapes.log(handle) ?? this.store.get(handle)
  }

  onFlush(listener: FlushListener): () => void {
    // Waiters wait on handles: a compacted log's id names its handle with a suffix.
    return this.store.onFlush((result) => listener(byHandles(result)))
  }

  onInvalidated(listener: (handle: string) => void): () => void {
    const shapes = this.shapes
    const onEvent = (event: ShapeInvalidated): void => listener(event.handle)
    shapes.on('invalidated', onEvent)
    return () => shapes.off('invalidated', onEvent)
  }

  /**
   * Not the store's watermark itself, which also moves over WAL no shape
   * subscribes to (idle positions, see ReplicationClientOptions.promiseIdle):
   * up-to-date answers would then change with unrelated WAL, and repeat
   * requests would stop being byte-identical.
   */
  get lastSeenLsn(): bigint {
    const durable = this.store.durableLsn
    const routed = this.routed.lsn
    return routed < durable ? routed : durable
  }

  /** The writer never issued an offset past its head: the protocol's 400. */
  offsetNotReached(): Error {
    return offsetOutOfBounds()
  }

  compileSubset(subset: SubsetRequest, table: TableInfo): Promise<CompiledSubset> {
    return compileSubset(subset, table)
  }

  async runSubset(run: SubsetRun, sink: SubsetSink): Promise<void> {
    const { shape, log } = run
    const plan = this.shapes.where(shape.handle)?.subqueries
    // A subquery shape's subset rows carry its tags, by the real subqueries in the subset's own snapshot.
    const headers = plan === undefined ? undefined : tagHeadersSql(shape.table, shape.handle, plan, (p) => plan.positions[p]!.sql)
    const query = buildSubsetQuery({ table: shape.table, definition: shape.definition, subset: run.subset, snapshotMark: run.snapshotMark, headers })
    try {
      await runSubsetSnapshot<LogOffset>(
        this.subsetPool,
        {
          table: shape.table,
          query,
          fix: () => ({ recentXids: this.router.recentXids, position: headOffset(log) }),
          signal: run.signal,
          statementTimeoutMs: SUBSET_STATEMENT_TIMEOUT_MS,
        },
        sink,
      )
    } catch (error) {
      throw subsetFailure(error)
    }
  }
}

/**
 * What Postgres refused in the subset query as built (an order_by column of a
 * type without ordering, say) is the request's fault; an error raised on some
 * row likewise, reported by SQLSTATE only, since its message may quote values
 * of rows outside the shape. Anything else is passed on as it is.
 */
function subsetFailure(error: unknown): unknown {
  if (!(error instanceof SnapshotError)) return error
  if (error.code === 'invalid_query') return new SubsetError('invalid_query', postgresMessage(error), { cause: error })
  if (error.code === 'evaluation_error') {
    return new SubsetError('evaluation_error', `Postgres raised an error evaluating the subset on some row (SQLSTATE ${error.sqlState ?? 'unknown'})`, { cause: error })
  }
  return error
}

function postgresMessage(error: SnapshotError): string {
  const cause = error.cause
  return cause instanceof Error ? cause.message : error.message
}
