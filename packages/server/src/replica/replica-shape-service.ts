// `ShapeService` over a storage directory that another process (the writer)
// owns: the read replica of `sluice start --read-only`. The HTTP layer is the
// writer's, unchanged, so a replica answers with the writer's handles,
// offsets, ETags and stored bytes.
//
// What it needs and what it never does: it reads the store through the
// storage engine's read-only store, which follows the writer's published
// watermark and never writes; it reads the Postgres catalog to normalise a
// request's definition and to build the schema header exactly as the writer
// does (plain SELECTs: no replication slot, no publication change); it takes
// no writer lock. What only the writer can do (create a shape, run a subset
// snapshot, delete a shape) is answered 503 with `retry-after`, so the client
// or the load balancer retries, and a retry that reaches the writer does it.
import { EventEmitter } from 'node:events'
import type { ShapeDefinitionParams, SubsetRequest } from '@sluice/protocol'
import type { ReadOnlyFileLogStore, ShapeLog } from '@sluice/storage'
import type { HealthReport } from '../health-report.js'
import type { Queryable } from '../replication/queryable.js'
import type { FlushListener, ResolvedShape, ShapeService, ShapeStatus } from '../shape-service.js'
import type { ShapeDefinition } from '../shapes/definition/index.js'
import { byHandles } from '../shapes/compaction/log-ids.js'
import { restoreProblem } from '../shapes/restore-shapes.js'
import { ShapeError } from '../shapes/shape-error.js'
import { type CompiledSubset, compileSubset } from '../shapes/snapshot/index.js'
import { TableCache } from '../shapes/table-cache.js'
import type { TableInfo } from '../shapes/table-catalog.js'
import { loadWhereParser } from '../where/index.js'
import { ReplicaError } from './replica-error.js'
import { ReplicaShapes } from './replica-shapes.js'
import { StoreWatch, type StoreWatchStats, type WatchFn } from './store-watch.js'

export interface ReplicaShapeServiceOptions {
  /** Opened with `pollIntervalMs: 0`: the watch below decides when it re-reads. */
  readonly store: ReadOnlyFileLogStore
  /** The store's root directory. */
  readonly dir: string
  /** Catalog reads. */
  readonly db: Queryable
  /** How long a table's catalog answer is reused (the writer's --table-cache). */
  readonly tableCacheMs: number
  /** The fallback re-read of the watermark and of `shapes/` (see StoreWatch). */
  readonly fallbackMs: number
  readonly watch?: WatchFn
  readonly logger?: { warn(data: object, message: string): void; info(data: object, message: string): void }
}

/** What the replica did so far (tests and logs). */
export interface ReplicaStats extends StoreWatchStats {
  /** Shapes the replica knows the store holds. */
  readonly shapes: number
  /** Scans of `shapes/`. */
  readonly scans: number
  /** Re-reads of the watermark that notifications or the fallback timer asked for. */
  readonly polls: number
}

/** The replica never publishes a table: only `addToPublication` would, and the replica never creates a shape. */
const NO_PUBLICATION = { addTable: (): Promise<never> => Promise.reject(new ReplicaError('read_only_replica')) }

export class ReplicaShapeService implements ShapeService {
  private readonly store: ReadOnlyFileLogStore
  private readonly shapes: ReplicaShapes
  private readonly tables: TableCache
  private readonly events = new EventEmitter<{ invalidated: [handle: string] }>()
  private readonly watch: StoreWatch
  private polls = 0

  private constructor(options: ReplicaShapeServiceOptions) {
    this.store = options.store
    this.tables = new TableCache(options.db, NO_PUBLICATION, options.tableCacheMs)
    this.shapes = new ReplicaShapes({
      store: options.store,
      dir: options.dir,
      fs: options.store.baseFs,
      onGone: (handle) => this.events.emit('invalidated', handle),
      onBadMeta: (handle, error) => options.logger?.warn({ handle, err: error }, 'shape meta unreadable; not served'),
      onScanError: (error) => options.logger?.warn({ err: error }, 'scan of the shapes directory failed'),
    })
    this.shapes.rescan(true)
    this.watch = new StoreWatch({
      dir: options.dir,
      fallbackMs: options.fallbackMs,
      onPublished: () => {
        this.polls++
        this.store.poll()
      },
      onShapesChanged: () => this.shapes.rescan(),
      onWatchError: (error) => options.logger?.warn({ err: error }, 'watching the store for changes failed; re-reading it on the fallback timer'),
      ...(options.watch === undefined ? {} : { watch: options.watch }),
    })
  }

  static async open(options: ReplicaShapeServiceOptions): Promise<ReplicaShapeService> {
    await loadWhereParser()
    return new ReplicaShapeService(options)
  }

  stats(): ReplicaStats {
    return { ...this.watch.stats(), shapes: this.shapes.size, scans: this.shapes.scanCount, polls: this.polls }
  }

  /** A replica serves what the store holds whether or not the writer runs: nothing here depends on it. */
  health(): HealthReport {
    return { reasons: [] }
  }

  async resolve(params: ShapeDefinitionParams): Promise<ResolvedShape> {
    const found = await this.locate(params)
    if (found === undefined) {
      const { schema, name } = params.table
      throw new ShapeError('table_not_found', `table ${JSON.stringify(schema)}.${JSON.stringify(name)} does not exist`)
    }
    const { info, definition, handle } = found
    if (handle === undefined) throw new ReplicaError('shape_not_on_replica')
    // Made for another version of the table: the writer replaces it at the next request that reaches it.
    const problem = restoreProblem(info, this.shapes.meta(handle)?.table)
    if (problem !== undefined) throw new ReplicaError('shape_not_on_replica', `the stored shape ${handle} cannot serve the table as it is now: ${problem}`)
    return { handle, definition, table: info }
  }

  ready(handle: string): Promise<ShapeLog> {
    const log = this.get(handle)
    return log === undefined ? Promise.reject(new ShapeError('shape_invalidated', `shape ${handle} does not exist`)) : Promise.resolve(log)
  }

  /** A replica expires nothing: the writer decides what lives, and its deletions reach the replica as 409s. */
  setInUse(): void {}

  status(handle: string): ShapeStatus {
    return this.shapes.status(handle)
  }

  lookup(definition: ShapeDefinition): string | undefined {
    return this.shapes.lookup(definition)
  }

  async find(params: ShapeDefinitionParams): Promise<string | undefined> {
    return (await this.locate(params))?.handle
  }

  /** The request's table, its normalised definition and the writer's handle for it; undefined: no such table. */
  private async locate(params: ShapeDefinitionParams): Promise<{ info: TableInfo; definition: ShapeDefinition; handle: string | undefined } | undefined> {
    const info = await this.tables.load(params.table.schema, params.table.name)
    if (info === undefined) return undefined
    const { definition } = await this.tables.compiled(info, params)
    return { info, definition, handle: this.shapes.lookup(definition) }
  }

  delete(): Promise<boolean> {
    return Promise.reject(new ReplicaError('read_only_replica'))
  }

  get(handle: string): ShapeLog | undefined {
    const id = this.shapes.logId(handle)
    if (id === undefined) return undefined
    const log = this.store.get(id)
    if (log !== undefined) return log
    // Gone before the watch reported it: the writer deleted a generation a compaction replaced (or the shape).
    this.shapes.rescan(true)
    const now = this.shapes.logId(handle)
    return now === undefined || now === id ? undefined : this.store.get(now)
  }

  onFlush(listener: FlushListener): () => void {
    // Waiters wait on handles: a compacted log's id is its handle with a suffix.
    return this.store.onFlush((result) => listener(byHandles(result)))
  }

  onInvalidated(listener: (handle: string) => void): () => void {
    this.events.on('invalidated', listener)
    return () => this.events.off('invalidated', listener)
  }

  /**
   * The watermark the writer published. The writer answers with the commit
   * LSN of the last transaction it routed when that is lower (idle WAL moves
   * its watermark too); a replica cannot know that one, so the up-to-date
   * control message's `global_last_seen_lsn` may be ahead of the writer's.
   */
  get lastSeenLsn(): bigint {
    return this.store.durableLsn
  }

  /**
   * An offset past what this replica has seen was most likely issued by the
   * writer, which this server follows with a delay (a notification, or
   * `--replica-poll` on a file system without them), or it is stuck while no
   * writer publishes: a 503 the client retries (or the load balancer passes on
   * to another server), not the 400 that would stop a client for good.
   */
  offsetNotReached(): Error {
    return new ReplicaError('offset_not_on_replica')
  }

  compileSubset(subset: SubsetRequest, table: TableInfo): Promise<CompiledSubset> {
    return compileSubset(subset, table)
  }

  /** A subset snapshot must be stitched to the writer's replication position, which only the writer knows. */
  runSubset(): Promise<void> {
    return Promise.reject(new ReplicaError('read_only_replica'))
  }

  close(): void {
    this.watch.close()
    this.shapes.close()
    this.events.removeAllListeners()
  }
}
