import type { ReplicaMode, RowValues } from '@sluice/protocol'
import type { TableInfo } from '../table-catalog.js'
import type { SubqueryPlan, SubqueryView } from '../../where/index.js'
import type { IntakeChange } from './intake.js'
import { type RowTags, rowTags } from './tags.js'

/*
 * A subquery shape's log lines, written as the change encoder writes plain
 * shapes' lines (docs/protocol.md §3.1) plus the subquery headers (§ "Subquery
 * shapes"): `tags`, `removed_tags` on updates, `active_conditions`; and its
 * event lines.
 */

export interface LineContext {
  readonly table: TableInfo
  /** Selected columns in table order. */
  readonly columns: readonly string[]
  readonly replica: ReplicaMode
  readonly lsn: bigint
  readonly txid: number
}

export interface ChangeLine {
  readonly op: number
  readonly operation: 'insert' | 'update' | 'delete'
  readonly key: string
  readonly row: RowValues
  /** Updates: the row before and the changed columns. */
  readonly old?: RowValues
  readonly changed?: readonly string[]
  readonly tags: RowTags
  readonly removedTags?: readonly string[]
  readonly keyChangeTo?: string
  readonly keyChangeFrom?: string
}

function pick(row: RowValues, names: readonly string[]): Record<string, string | null> {
  const out: Record<string, string | null> = {}
  for (const name of names) out[name] = row[name] ?? null
  return out
}

export function changeLine(ctx: LineContext, line: ChangeLine, last: boolean): string {
  const pk = ctx.table.primaryKey
  let value: Record<string, string | null>
  let oldValue: Record<string, string | null> | undefined
  if (line.operation === 'insert') value = pick(line.row, ctx.columns)
  else if (line.operation === 'delete') {
    value = ctx.replica === 'full' || pk.length === 0 ? pick(line.row, ctx.columns) : pick(line.row, ctx.columns.filter((c) => pk.includes(c)))
  } else {
    const changed = new Set(line.changed ?? [])
    if (ctx.replica === 'full') {
      value = pick(line.row, ctx.columns)
      oldValue = pick(line.old ?? line.row, ctx.columns.filter((c) => changed.has(c)))
    } else value = pick(line.row, ctx.columns.filter((c) => pk.includes(c) || changed.has(c)))
  }
  const headers: Record<string, unknown> = { operation: line.operation, relation: [ctx.table.schema, ctx.table.name] }
  if (line.keyChangeTo !== undefined) headers['key_change_to'] = line.keyChangeTo
  if (line.keyChangeFrom !== undefined) headers['key_change_from'] = line.keyChangeFrom
  headers['lsn'] = ctx.lsn.toString()
  headers['op_position'] = line.op
  headers['txids'] = [ctx.txid]
  if (last) headers['last'] = true
  headers['tags'] = line.tags.tags
  if (line.operation === 'update') headers['removed_tags'] = line.removedTags ?? []
  headers['active_conditions'] = line.tags.active
  return JSON.stringify({ key: line.key, value, ...(oldValue === undefined ? {} : { old_value: oldValue }), headers })
}

/**
 * A transaction's outer-table changes as the shape's lines, judged against
 * `views`: an update whose row stays is an update (new tags, `removed_tags`),
 * one whose row enters an insert, one whose row leaves a delete.
 */
export function outerChangeLines(ctx: LineContext, handle: string, plan: SubqueryPlan, views: readonly SubqueryView[], outer: readonly IntakeChange[]): string[] {
  const changes: ChangeLine[] = []
  for (const change of outer) {
    if (change.operation === 'insert' || change.operation === 'delete') {
      const tags = rowTags(handle, plan, views, change.row)
      if (tags.included) changes.push({ op: change.op, operation: change.operation, key: change.key, row: change.row, tags })
      continue
    }
    const after = rowTags(handle, plan, views, change.row)
    const prior = rowTags(handle, plan, views, change.old!)
    if (after.included && prior.included) {
      const removedTags = prior.tags.filter((t) => !after.tags.includes(t))
      changes.push({ op: change.op, operation: 'update', key: change.key, row: change.row, old: change.old!, changed: change.changed, tags: after, removedTags })
    } else if (after.included) changes.push({ op: change.op, operation: 'insert', key: change.key, row: change.row, tags: after })
    else if (prior.included) changes.push({ op: change.op, operation: 'delete', key: change.key, row: change.old!, tags: prior })
  }
  return changes.map((line, i) => changeLine(ctx, line, i === changes.length - 1))
}

export interface MovePattern {
  readonly pos: number
  readonly value: string
}

export function moveEventLine(event: 'move-in' | 'move-out', patterns: readonly MovePattern[], txids: readonly number[]): string {
  return JSON.stringify({ headers: { event, patterns, txids } })
}
