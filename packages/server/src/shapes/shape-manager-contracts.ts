import type { ShapeLogStore } from '@sluice/storage'
import type pg from 'pg'
import type { PublicationManager, Queryable, SpillDir } from '../replication/index.js'
import type { WhereClause } from '../where/index.js'
import type { ShapeDefinition } from './definition/index.js'
import type { ShapeRemoval } from './live-shape.js'
import type { Invalidation } from './route-contracts.js'
import type { ShapeRouter } from './router.js'
import type { TableInfo } from './table-catalog.js'

// What ShapeManager (shape-manager.ts) is given and gives back: its options, the
// admission gate of new shapes, its answers, events and figures.

export interface ShapeManagerOptions {
  readonly store: ShapeLogStore
  readonly router: ShapeRouter
  /** Catalog and publication queries. */
  readonly db: Queryable
  /** Connections for snapshots; `snapshotConnections` of them are used at once. */
  readonly snapshotPool: pg.Pool
  readonly snapshotConnections?: number
  /** Connections for subquery shapes' move-in queries (see MOVE_IN_CONNECTIONS); the snapshot pool when absent. */
  readonly moveInPool?: pg.Pool
  readonly publication: PublicationManager
  /** Scratch space for queues that spill, opened (and so wiped) once by the caller. */
  readonly spillDir: SpillDir
  readonly memoryBudgetBytes?: number
  /** Called with true when replication must pause for memory, false when it may resume. */
  readonly onPressure?: (paused: boolean) => void
  readonly maxShapes?: number
  /** Values held in all subquery shapes' views (0: no bound). Default DEFAULT_MAX_SUBQUERY_VIEW_ENTRIES. */
  readonly maxSubqueryViewEntries?: number
  /** How long a finished catalog lookup is reused (0: only lookups in flight are shared). Default DEFAULT_TABLE_CACHE_MS. */
  readonly tableCacheMs?: number
  /** How often the catalog is checked for DDL on tables with shapes (0: never). Default DEFAULT_CATALOG_CHECK_MS. */
  readonly catalogCheckMs?: number
  /**
   * Past how many transactions, or changes in them, routed during one
   * move-in a subquery shape is dropped. Default DEFAULT_SUBQUERY_MAX_HELD_*.
   */
  readonly subqueryHeld?: { readonly transactions?: number; readonly changes?: number }
  /** Ready shapes no request used for this long expire (0: never). Default DEFAULT_SHAPE_TTL_MS. */
  readonly shapeTtlMs?: number
  /** Milliseconds on a clock that never goes back, for expiry; default `performance.now`. */
  readonly clock?: () => number
  readonly logger?: ShapeLogger
}

/**
 * Admission of new shapes (the HTTP layer's `Admission`): `admit` is called
 * just before a shape is created and rejects to refuse it (perhaps after
 * waiting for a creation slot); it resolves with the release, called once the
 * creation ends. `evict`: whether the creation may evict another shape to make
 * room past `maxShapes`.
 */
export interface CreationGate {
  admit(client: string | undefined): Promise<() => void>
  readonly evict: boolean
}

export interface ShapeLogger {
  info(data: object, message: string): void
  warn(data: object, message: string): void
  error(data: object, message: string): void
}

export interface ResolvedShape {
  readonly handle: string
  readonly definition: ShapeDefinition
  readonly where: WhereClause | undefined
  readonly table: TableInfo
  /** This call created it. */
  readonly created: boolean
}

export interface ShapeInvalidated {
  readonly handle: string
  readonly definition: ShapeDefinition
  readonly reason: Invalidation | ShapeRemoval
}

export interface ShapeManagerEvents {
  /** A shape's log exists and is live. */
  ready: [handle: string]
  invalidated: [ShapeInvalidated]
}

/** Point-in-time figures for logs, metrics and tests. */
export interface ShapeManagerStats {
  readonly shapes: number
  /** Shapes whose initial snapshot has not finished. */
  readonly creating: number
  /** Bytes of routed transactions held in memory for shapes still creating. */
  readonly queuedBytes: number
  /** Queues of creating shapes that moved to disk. */
  readonly spilledQueues: number
  /** Times the replication stream was paused for memory, and whether it is now. */
  readonly pauses: number
  readonly paused: boolean
  /** Shapes expired since start (unused for the shape TTL). */
  readonly expired: number
  /** Shapes evicted since start (least recently used, past the shape limit). */
  readonly evicted: number
  /** Values held in subquery shapes' views (and views being loaded), against `--max-subquery-view-entries`. */
  readonly subqueryViewEntries: number
}
