import { createHash } from 'node:crypto'
import type { RowValues } from '@sluice/protocol'
import type { SubqueryPlan, SubqueryView } from '../../where/index.js'
import { withViews } from '../../where/index.js'

/*
 * The row headers of subquery shapes (docs/protocol.md, "Subquery shapes"):
 *
 *   tags               one string per DNF disjunct, `position_count` slots joined by `/`:
 *                      empty outside the disjunct, `1` for a row predicate, and for a
 *                      subquery position the hash of the row's left-side value(s)
 *   active_conditions  each position's truth on the row (negation applied; NULL is false)
 *
 * The hash is md5(TAG_SECRET ‖ handle ‖ N) in lower-case hex, N = `NULL` or
 * `v:<text>` for one column, `<col>:<N>` per column for a row form. Clients
 * only compare hashes, never recompute them: what matters is that one value
 * hashes alike in row tags and in move patterns for the life of a handle,
 * and that a hash is never empty, `1`, or contains `/`.
 */

/** Electric hashes its stack id here; any constant serves (the handle already makes tags per shape). */
export const TAG_SECRET = 'sluice'

export function tagHash(handle: string, columns: readonly string[], texts: readonly (string | null)[]): string {
  return createHash('md5').update(TAG_SECRET).update(handle).update(namespaced(columns, texts)).digest('hex')
}

function namespaced(columns: readonly string[], texts: readonly (string | null)[]): string {
  const one = (text: string | null): string => (text === null ? 'NULL' : `v:${text}`)
  if (columns.length === 1) return one(texts[0] ?? null)
  let out = ''
  for (let i = 0; i < columns.length; i++) out += `${columns[i]}:${one(texts[i] ?? null)}`
  return out
}

export interface RowTags {
  readonly tags: string[]
  readonly active: boolean[]
  /** Some disjunct has every position true: the row is in the shape. */
  readonly included: boolean
}

/** A row's headers against the given views. */
export function rowTags(handle: string, plan: SubqueryPlan, views: readonly SubqueryView[], row: RowValues): RowTags {
  const withV = withViews(row, views)
  const active = plan.positions.map((position) => {
    let value: unknown
    try {
      value = position.value(withV)
    } catch {
      // An error is not TRUE: Postgres would have raised it for the row, which the snapshot could never return.
      return false
    }
    if (value === null) return false
    return position.negated ? value === false : value === true
  })
  const included = plan.disjuncts.some((disjunct) => disjunct.every((p) => active[p] === true))
  // A row out of the shape is written nowhere: its hashes are not worth computing (the common case per shape).
  if (!included) return { tags: [], active, included }
  const slots = plan.positions.map((position) =>
    position.dep === undefined ? '1' : tagHash(handle, position.left, position.left.map((c) => row[c] ?? null)),
  )
  const tags = plan.disjuncts.map((disjunct) => {
    const member = new Set(disjunct)
    return slots.map((slot, i) => (member.has(i) ? slot : '')).join('/')
  })
  return { tags, active, included }
}
