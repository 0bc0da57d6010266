import type { ShapeLog } from '@sluice/storage'
import type { SpillQueue } from '../replication/index.js'
import type { WhereClause } from '../where/index.js'
import type { ShapeDefinition } from './definition/index.js'
import type { Invalidation, RouteSpec, TransactionPart } from './route-contracts.js'
import type { SubqueryShape } from './subquery/subquery-shape.js'
import type { TableInfo } from './table-catalog.js'

/** A shape retired by something other than a replicated transaction. */
export interface ShapeRemoval {
  /**
   * 'deleted': on request, or restored but no longer matching its table;
   * 'replication_gap': restored, but the slot had moved past the store's
   * watermark, so its log misses changes (see Pipeline.start);
   * 'expired': no request used it for the shape TTL; 'evicted': the least
   * recently used when a new shape needed room past the shape limit.
   */
  readonly kind: 'deleted' | 'replication_gap' | 'expired' | 'evicted'
  readonly detail: string
}

/** A shape the manager holds: ready (restored or created) or still being created. */
export interface LiveShape {
  readonly handle: string
  readonly definition: ShapeDefinition
  readonly where: WhereClause | undefined
  readonly table: TableInfo
  /**
   * Resolves with the log once the snapshot is finished and published (the
   * compacted log once there is one). Undefined for a shape that had its log
   * from the start (restored): `log` is it, and a restart of 100k shapes makes
   * no promise each.
   */
  ready: Promise<ShapeLog> | undefined
  log: ShapeLog | undefined
  /** The log a compaction replaced, still taking copies of the parts until it is deleted (compaction/shape-compactor.ts). */
  retiring?: ShapeLog | undefined
  /** Set when invalidated while the snapshot runs: the creation stops and cleans up. */
  cancelled: Invalidation | ShapeRemoval | undefined
  /** Only while the shape is being created (an idle controller costs ~300 bytes per shape). */
  abort: AbortController | undefined
  queue: SpillQueue<TransactionPart> | undefined
  /** The stamp of the last request that used it (`ShapeUses`): what expiry and eviction go by. */
  lastUsed: number
  /** Set for a shape whose where clause has subqueries: it sits between the router and the log. */
  subquery?: SubqueryShape | undefined
}

/** How the router knows the shape. */
export function routeSpec(shape: LiveShape): RouteSpec {
  if (shape.subquery !== undefined) return shape.subquery.outerSpec()
  return {
    handle: shape.handle,
    table: shape.table,
    where: shape.where,
    columns: shape.definition.columns,
    replica: shape.definition.replica,
  }
}
