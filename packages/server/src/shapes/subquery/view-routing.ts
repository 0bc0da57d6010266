import type { RowValues } from '@sluice/protocol'
import { type SubqueryPlan, SubqueryView } from '../../where/index.js'
import type { ViewFiling, ViewRouting, ViewSink } from '../view-index.js'
import type { DependencyState } from './dependency-state.js'

/*
 * A subquery shape's side of the router's view index (view-index.ts). A row is
 * in the shape only when some disjunct of its clause holds, and a disjunct
 * with a positive `left IN (SELECT …)` holds only when the row's left value
 * is in that subquery's view (TRUE, not NULL: no NULL on either side). So with
 * one such position picked per disjunct, a row whose values are in none of
 * their views is in no disjunct, and the shape need not see it.
 *
 * The views the shape judges a transaction's outer rows against are never
 * wider than its current ones, except around a move-in: values enter the views
 * when the move starts, and transactions routed meanwhile may be judged after
 * changes that are still held. So the shape is broad from its registration
 * until its views are loaded (the snapshot) and during every move-in.
 */

interface Picked {
  readonly dep: number
  readonly filing: ViewFiling
}

export class ShapeViewRouting implements ViewRouting {
  readonly filings: readonly ViewFiling[]
  private readonly deps: readonly number[]
  private sink: ViewSink | undefined
  /** The roots' views the filings follow, once loaded. */
  private views: readonly SubqueryView[] | undefined
  private broad = true

  constructor(plan: SubqueryPlan) {
    const picked = pick(plan)
    this.filings = picked.map((p) => p.filing)
    this.deps = picked.map((p) => p.dep)
  }

  connect(sink: ViewSink): void {
    this.sink = sink
    if (this.views !== undefined) this.fileAll(sink, this.views)
    sink.broad(this.broad)
  }

  disconnect(): void {
    this.sink = undefined
    for (const view of this.views ?? []) view.watch(undefined)
  }

  *keys(filing: number): Iterable<string> {
    const view = this.views?.[this.deps[filing]!]
    if (view === undefined) return
    for (const [key, values] of view.entries()) if (!values.includes(null)) yield key
  }

  /** The views are loaded: they are followed from now on. */
  seed(roots: readonly DependencyState[]): void {
    const previous = this.views
    const sink = this.sink
    if (previous !== undefined) {
      for (const view of previous) view.watch(undefined)
      if (sink !== undefined) this.deps.forEach((_, i) => [...this.keys(i)].forEach((key) => sink.unfile(i, key)))
    }
    const views = roots.map((s) => s.view)
    this.views = views
    views.forEach((view, dep) => {
      const filings = this.deps.flatMap((d, i) => (d === dep ? [i] : []))
      if (filings.length === 0) return
      view.watch({
        entered: (key, values) => {
          if (values.includes(null)) return
          for (const i of filings) this.sink?.file(i, key)
        },
        left: (key, values) => {
          if (values.includes(null)) return
          for (const i of filings) this.sink?.unfile(i, key)
        },
      })
    })
    if (sink !== undefined) this.fileAll(sink, views)
  }

  /** While broad the shape takes every row of its table (before its views are loaded, and during a move-in). */
  setBroad(on: boolean): void {
    if (this.views === undefined) on = true
    if (on === this.broad) return
    this.broad = on
    this.sink?.broad(on)
  }

  private fileAll(sink: ViewSink, views: readonly SubqueryView[]): void {
    this.deps.forEach((dep, i) => {
      for (const [key, values] of views[dep]!.entries()) if (!values.includes(null)) sink.file(i, key)
    })
  }
}

/** One positive subquery position per disjunct (the first), deduplicated; none when a disjunct has none. */
function pick(plan: SubqueryPlan): Picked[] {
  const picked = new Map<string, Picked>()
  for (const disjunct of plan.disjuncts) {
    const at = disjunct.find((p) => {
      const position = plan.positions[p]!
      return position.dep !== undefined && !position.negated && position.leftValues !== undefined
    })
    if (at === undefined) return []
    const position = plan.positions[at]!
    const dep = position.dep!
    const id = `${dep}\u0000${position.left.join('\u0000')}`
    if (picked.has(id)) continue
    const types = plan.dependencies[dep]!.types
    const keyMaker = new SubqueryView(types)
    const leftValues = position.leftValues!
    const rowKey = (row: RowValues): string | undefined => {
      const values = leftValues(row)
      return values.includes(null) ? undefined : keyMaker.keyOf(values)
    }
    const domain = `${position.left.join('\u0000')}\u0001${types.map((t) => t.key).join('\u0000')}`
    picked.set(id, { dep, filing: { domain, rowKey } })
  }
  return [...picked.values()]
}
