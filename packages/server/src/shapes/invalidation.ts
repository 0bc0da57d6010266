import type { Relation } from '../replication/index.js'
import type { Invalidation } from './route-contracts.js'
import { type TableInfo, type TableState, tableChange } from './table-catalog.js'

/*
 * Why the router stops routing to a table's shapes: the reasons it reports to
 * `ShapeRouterOptions.invalidate`, one builder per kind.
 */

/** A Relation message says the table's columns are no longer the ones its shapes were made for. */
export function schemaChanged(info: TableInfo): Invalidation {
  return { kind: 'schema_change', schema: info.schema, table: info.name, detail: `the schema of ${qualified(info.schema, info.name)} changed` }
}

/** A Relation message names the table with another oid: it was dropped and this one created in its place. */
export function tableReplaced(relation: Relation): Invalidation {
  return {
    kind: 'table_replaced',
    schema: relation.schema,
    table: relation.table,
    detail: `${qualified(relation.schema, relation.table)} was dropped and created again`,
  }
}

/**
 * The catalog describes the table otherwise than the shapes were made for it:
 * gone or renamed ('table_dropped'), or a change of its columns, primary key or
 * replica identity ('schema_change'); undefined when nothing that matters changed.
 */
export function catalogChanged(info: TableInfo, now: TableState | undefined): Invalidation | undefined {
  const detail = tableChange(info, now)
  if (detail === undefined) return undefined
  const gone = now === undefined || now.oid !== info.oid || now.schema !== info.schema || now.name !== info.name
  return { kind: gone ? 'table_dropped' : 'schema_change', schema: info.schema, table: info.name, detail }
}

export function truncated(info: TableInfo, lsn: bigint): Invalidation {
  return { kind: 'truncate', schema: info.schema, table: info.name, detail: `${qualified(info.schema, info.name)} was truncated`, lsn }
}

/**
 * A change a shape cannot encode (an unchanged-TOAST value without REPLICA
 * IDENTITY FULL, a malformed tuple): the shape can no longer be kept exact.
 */
export function unroutable(info: TableInfo, error: unknown, lsn: bigint): Invalidation {
  return { kind: 'unroutable_change', schema: info.schema, table: info.name, detail: error instanceof Error ? error.message : String(error), lsn }
}

function qualified(schema: string, name: string): string {
  return `${JSON.stringify(schema)}.${JSON.stringify(name)}`
}
