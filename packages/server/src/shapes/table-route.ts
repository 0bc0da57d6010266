import type { RowValues } from '@sluice/protocol'
import type { DeleteChange, Relation, UpdateChange } from '../replication/index.js'
import { ChangeEncoder } from './change-encoder.js'
import type { RouteSpec, ShapeTarget } from './route-contracts.js'
import { type RowMaker, rowMaker } from './row-maker.js'
import { ShapeIndex } from './shape-index.js'
import { type TableInfo, tableDescription } from './table-catalog.js'

/*
 * The router's per-table state: the shapes on one table, the index that finds
 * which of them a row reaches, the encoders they share, and how a change's
 * rows are read for them.
 */

/** A shape as the router holds it. */
export interface RoutedShape {
  readonly spec: RouteSpec
  readonly route: TableRoute
  readonly encoder: ChangeEncoder
  target: ShapeTarget
  /** Routed by its views (RouteSpec.views): takes an update whole when either of its rows reaches it. */
  readonly whole: boolean
  /** Set while a transaction is being routed when the shape is being invalidated: take nothing more. */
  doomed: boolean
  /** The number of the last update whose old row (`oldRowMark`) or new row (`newRowMark`) the shape held (see routeChange). */
  oldRowMark: number
  newRowMark: number
  /**
   * Whether the shape took part in the transaction being routed (the one numbered `txnMark`, see
   * take), and its place in that transaction's `touched` list: where its items wait. One
   * transaction is routed at a time (the replication client awaits each).
   */
  txnMark: number
  txnSlot: number
}

export interface TableRoute {
  readonly info: TableInfo
  readonly index: ShapeIndex<RoutedShape>
  /** Shapes with the same replica mode and columns share one encoder (and so each line's bytes). */
  readonly encoders: Map<string, { encoder: ChangeEncoder; users: number }>
  readonly shapes: Set<RoutedShape>
  /** Column names of the relation the cached `names` and `makeRow` were taken from. */
  relation: Relation | undefined
  names: readonly string[]
  makeRow: RowMaker
}

export function newTableRoute(info: TableInfo): TableRoute {
  const names = info.columns.map((c) => c.name)
  return {
    info,
    index: new ShapeIndex(),
    encoders: new Map(),
    shapes: new Set(),
    relation: undefined,
    names,
    makeRow: rowMaker(names),
  }
}

/** Encoder keys of the shapes that select every column, one string per replica mode (a restart adds 100k shapes). */
const allColumnsKeys = new Map<string, string>()

function allColumnsKey(replica: string): string {
  let key = allColumnsKeys.get(replica)
  if (key === undefined) allColumnsKeys.set(replica, (key = `${replica}\u0000*`))
  return key
}

/** Adds a shape to its table's route (and index), sharing an encoder with the shapes that project alike. */
export function joinRoute(route: TableRoute, spec: RouteSpec, target: ShapeTarget): RoutedShape {
  const encoderKey = spec.columns === undefined ? allColumnsKey(spec.replica) : `${spec.replica}\u0000${spec.columns.join('\u0000')}`
  let shared = route.encoders.get(encoderKey)
  if (shared === undefined) {
    const encoder = new ChangeEncoder({ table: tableDescription(spec.table), columns: spec.columns, replica: spec.replica })
    shared = { encoder, users: 0 }
    route.encoders.set(encoderKey, shared)
  }
  shared.users++
  const shape: RoutedShape = {
    spec,
    route,
    encoder: shared.encoder,
    target,
    whole: spec.views !== undefined,
    doomed: false,
    oldRowMark: 0,
    newRowMark: 0,
    txnMark: 0,
    txnSlot: 0,
  }
  route.shapes.add(shape)
  route.index.add(shape, spec.where, spec.views)
  return shape
}

/** Takes a shape out of its route; true when the route has no shape left. */
export function leaveRoute(shape: RoutedShape): boolean {
  const route = shape.route
  route.shapes.delete(shape)
  route.index.remove(shape)
  for (const [key, shared] of route.encoders) {
    if (shared.encoder === shape.encoder && --shared.users === 0) route.encoders.delete(key)
  }
  return route.shapes.size === 0
}

/** Takes the column names (and the row maker) from the relation the change names, when it is a new one. */
export function followRelation(route: TableRoute, relation: Relation): void {
  if (route.relation === relation) return
  route.relation = relation
  route.names = relation.columns.map((c) => c.name)
  route.makeRow = rowMaker(route.names)
}

/**
 * The row before an update, for deciding which shapes held it. With a full old
 * row (REPLICA IDENTITY FULL, which Sluice sets) that is it; with only the key
 * logged, the new row with the old key; with nothing logged (the key did not
 * change), the new row.
 */
export function oldRowOf(names: readonly string[], makeRow: RowMaker, change: UpdateChange, newRow: RowValues): RowValues {
  const old = change.oldTuple
  if (old === undefined) return newRow
  if (change.oldTupleKind === 'full') return makeRow(old)
  const row: Record<string, string | null> = { ...newRow }
  change.relation.keyColumns.forEach((i) => {
    const value = old[i]
    row[names[i] as string] = typeof value === 'string' ? value : null
  })
  return row
}

/** The delete a shape gets when an update moves the row out of it. */
export function movedOut(change: UpdateChange): DeleteChange {
  if (change.oldTuple !== undefined && change.oldTupleKind !== undefined) {
    return { kind: 'delete', relation: change.relation, oldTuple: change.oldTuple, oldTupleKind: change.oldTupleKind }
  }
  // Nothing logged: the key did not change, so the new row names the same row.
  return { kind: 'delete', relation: change.relation, oldTuple: change.newTuple, oldTupleKind: 'key' }
}
