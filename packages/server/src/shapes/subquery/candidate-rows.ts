import type { RowValues } from '@sluice/protocol'
import type { SubqueryPlan, SubqueryView } from '../../where/index.js'
import type { TableInfo } from '../table-catalog.js'

/*
 * The inner rows behind a nested subquery's view. A subquery whose own clause
 * has subqueries (`p_id IN (SELECT id FROM p WHERE gp_id IN (SELECT …))`)
 * changes its result set when a deeper view changes, with no change to its
 * own table: which `p` rows enter or leave is only known from the rows. So
 * such a subquery keeps the rows of its table that some value of the deeper
 * views could put in its result: those for which a disjunct of its clause
 * holds apart from its subqueries (every row, for a clause that is one
 * subquery). Only the columns the clause, the select list and the key read
 * are kept. A deeper move re-judges the rows whose left-side value moved,
 * found through an index; a move of a tuple with a NULL, or a view becoming
 * empty or not, re-judges them all (NULLs make IN's answer depend on the
 * whole set), and any move of a dependency re-judges the rows whose row-form
 * left side holds a NULL beside a value.
 */

interface Entry {
  readonly row: RowValues
  /** Rows with this key (only a table without a primary key has more than one). */
  copies: number
  /** Whether the rows count in the view: the clause held when last judged. */
  counted: boolean
  /** The index keys the row is filed under. */
  readonly filed: readonly string[]
}

/** What the rows need of their dependency state (dependency-state.ts). */
export interface RowsOwner {
  readonly table: TableInfo
  readonly select: readonly string[]
  readonly plan: SubqueryPlan
  /** The current views of the clause's subqueries, by dependency. */
  childViews(): readonly SubqueryView[]
  /** The view the counted rows' selected values make. */
  readonly view: SubqueryView
  /** The clause's verdict on the row, with the current child views. */
  matches(row: RowValues): boolean
}

export class CandidateRows {
  private readonly entries = new Map<string, Entry>()
  /** `<dependency>\0<tuple key>` → keys of the rows whose left side holds the tuple. */
  private readonly index = new Map<string, Set<string>>()
  private readonly kept: readonly string[]
  private readonly keyColumns: readonly string[]

  constructor(
    private readonly owner: RowsOwner,
    clauseColumns: readonly string[],
  ) {
    const { table } = owner
    this.keyColumns = table.primaryKey.length > 0 ? table.primaryKey : table.columns.map((c) => c.name)
    this.kept = [...new Set([...this.keyColumns, ...owner.select, ...clauseColumns])]
  }

  /** Columns a row must carry (the snapshot reads these). */
  get columns(): readonly string[] {
    return this.kept
  }

  get size(): number {
    return this.entries.size
  }

  /** Forgets every row (a snapshot that is taken again reloads them). */
  clear(): void {
    this.entries.clear()
    this.index.clear()
  }

  private keyOf(row: RowValues): string {
    return JSON.stringify(this.keyColumns.map((c) => row[c] ?? null))
  }

  private selected(row: RowValues): unknown[] {
    return this.owner.view.parse(this.owner.select.map((c) => row[c] ?? null))
  }

  /**
   * Whether some value of the subqueries could put the row in the result: a
   * disjunct whose other literals all hold. An error is not TRUE (Postgres
   * would raise it, and the row is in no result).
   */
  private candidate(row: RowValues): boolean {
    const { plan } = this.owner
    const holds = (p: number): boolean => {
      const position = plan.positions[p]!
      if (position.dep !== undefined) return true
      try {
        const value = position.value(row)
        return position.negated ? value === false : value === true
      } catch {
        return false
      }
    }
    return plan.disjuncts.some((disjunct) => disjunct.every(holds))
  }

  private fileKeys(row: RowValues): string[] {
    const views = this.owner.childViews()
    const keys: string[] = []
    for (const position of this.owner.plan.positions) {
      if (position.dep === undefined) continue
      const view = views[position.dep]!
      const values = view.parse(position.left.map((c) => row[c] ?? null))
      if (!values.includes(null)) keys.push(`${position.dep}\u0000${view.keyOf(values)}`)
      // A row form holding a NULL beside other values, `(b, NULL) IN S`, is
      // NULL as soon as S holds a tuple agreeing with its other values, so any
      // move of the dependency may change it. A NULL alone is re-judged by the
      // full scans (see the module comment).
      else if (!values.every((v) => v === null)) keys.push(partlyNullKey(position.dep))
    }
    return [...new Set(keys)]
  }

  /**
   * One more row; `counted` is the clause's verdict (the snapshot's, or with
   * the current views). `touch` is told of a tuple before the view changes.
   */
  add(row: RowValues, touch: (values: readonly unknown[]) => void, counted?: boolean): void {
    const key = this.keyOf(row)
    let entry = this.entries.get(key)
    if (entry === undefined) {
      const matched = counted ?? this.owner.matches(row)
      if (!matched && !this.candidate(row)) return
      const trimmed: Record<string, string | null> = {}
      for (const c of this.kept) trimmed[c] = row[c] ?? null
      entry = { row: trimmed, copies: 0, counted: matched, filed: this.fileKeys(trimmed) }
      this.entries.set(key, entry)
      for (const k of entry.filed) {
        let set = this.index.get(k)
        if (set === undefined) this.index.set(k, (set = new Set()))
        set.add(key)
      }
    }
    entry.copies++
    if (entry.counted) {
      const values = this.selected(entry.row)
      touch(values)
      this.owner.view.add(values)
    }
  }

  /** One row less (a delete, or an update's old row). */
  remove(row: RowValues, touch: (values: readonly unknown[]) => void): void {
    const key = this.keyOf(row)
    const entry = this.entries.get(key)
    if (entry === undefined) return
    if (entry.counted) {
      const values = this.selected(entry.row)
      touch(values)
      this.owner.view.remove(values)
    }
    if (--entry.copies > 0) return
    this.entries.delete(key)
    for (const k of entry.filed) {
      const set = this.index.get(k)
      set?.delete(key)
      if (set?.size === 0) this.index.delete(k)
    }
  }

  /**
   * Re-judges the rows a deeper move may change: those whose left side holds
   * a moved tuple of dependency `dep`, or every row when `all`.
   */
  rejudge(moved: ReadonlyMap<number, readonly (readonly unknown[])[]>, all: boolean, touch: (values: readonly unknown[]) => void): void {
    let keys: Iterable<string>
    if (all) keys = [...this.entries.keys()]
    else {
      const views = this.owner.childViews()
      const found = new Set<string>()
      for (const [dep, tuples] of moved) {
        for (const values of tuples) for (const key of this.index.get(`${dep}\u0000${views[dep]!.keyOf(values)}`) ?? []) found.add(key)
        for (const key of this.index.get(partlyNullKey(dep)) ?? []) found.add(key)
      }
      keys = found
    }
    for (const key of keys) {
      const entry = this.entries.get(key)!
      const now = this.owner.matches(entry.row)
      if (now === entry.counted) continue
      entry.counted = now
      const values = this.selected(entry.row)
      touch(values)
      for (let i = 0; i < entry.copies; i++) {
        if (now) this.owner.view.add(values)
        else this.owner.view.remove(values)
      }
    }
  }
}

/** The index key of the rows whose left side for dependency `dep` is a row form holding a NULL and a value. */
function partlyNullKey(dep: number): string {
  return `${dep}\u0000\u0001partly-null`
}
