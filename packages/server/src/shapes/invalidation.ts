import type { Relation } from '../replication/index.js'
import type { Invalidation } from './route-contracts.js'
import type { TableInfo } from './table-catalog.js'

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
