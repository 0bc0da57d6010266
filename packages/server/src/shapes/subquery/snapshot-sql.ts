import type { SubqueryPlan } from '../../where/index.js'
import type { TableInfo } from '../table-catalog.js'
import { columnText } from '../snapshot/snapshot-query.js'
import { TAG_SECRET } from './tags.js'

/*
 * The `tags` and `active_conditions` headers of a subquery shape's snapshot
 * rows, computed in SQL in the snapshot's own transaction (so against the
 * inner tables as the snapshot sees them, as the views it loads do), with the
 * same hash and text as tags.ts computes for replicated rows: each column's
 * text is what its output function prints (what pgoutput sends).
 */

function sqlLiteral(text: string): string {
  return `'${text.replaceAll("'", "''")}'`
}

/** `N(v)` of tags.ts in SQL. */
function namespacedSql(info: TableInfo, columns: readonly string[]): string {
  const one = (name: string): string => {
    const column = info.columns.find((c) => c.name === name)
    if (column === undefined) throw new Error(`column ${name} is not in ${info.schema}.${info.name}`)
    return `COALESCE('v:' || ${columnText(column)}, 'NULL')`
  }
  if (columns.length === 1) return one(columns[0]!)
  return columns.map((name) => `${sqlLiteral(`${name}:`)} || ${one(name)}`).join(' || ')
}

/**
 * Header fragments for buildSnapshotQuery's `headers`. `atomSql(p)` is the SQL
 * of position p's atom: the real subquery for snapshots, the view's values
 * bound as arrays for move-in queries.
 */
export function tagHeadersSql(info: TableInfo, handle: string, plan: SubqueryPlan, atomSql: (position: number) => string): string[] {
  const slots = plan.positions.map((position) =>
    position.dep === undefined
      ? sqlLiteral('1')
      : `pg_catalog.md5(${sqlLiteral(TAG_SECRET + handle)} || ${namespacedSql(info, position.left)})`,
  )
  const tags = plan.disjuncts.map((disjunct) => {
    const member = new Set(disjunct)
    const parts = slots.map((slot, i) => (member.has(i) ? slot : "''"))
    return `'"' || ${parts.join(" || '/' || ")} || '"'`
  })
  const active = plan.positions.map((position, i) => {
    const atom = `(${atomSql(i)})`
    const literal = position.negated ? `(NOT ${atom})` : atom
    return `CASE WHEN COALESCE(${literal}, false) THEN 'true' ELSE 'false' END`
  })
  return [`',"tags":[' || ${tags.join(" || ',' || ")} || '],"active_conditions":[' || ${active.join(" || ',' || ")} || ']'`]
}
