import type { RowValues } from '@sluice/protocol'
import type { SqlType } from './sql-type.js'
import { codecFor } from './type-codec.js'
import { EvaluationError } from './where-error.js'

/**
 * A subquery's current result set (its "view"), as `left IN (SELECT …)` reads
 * it: each distinct tuple of the selected columns with the number of inner
 * rows that carry it, so a second row with the same value moves nothing and a
 * move happens exactly when a count crosses 0↔1.
 *
 * Tuples are keyed by their types' equality keys (numeric `1.0` = `1`), and
 * membership follows Postgres's three-valued IN: a NULL on the left, or no
 * match while the set holds a tuple with a NULL, is NULL, not FALSE.
 */
/** Hears each tuple that enters or leaves a view (its count crossing 0↔1), with the view's key for it. */
export interface ViewWatcher {
  entered(key: string, values: readonly unknown[]): void
  left(key: string, values: readonly unknown[]): void
}

export class SubqueryView {
  private watcher: ViewWatcher | undefined
  private readonly members = new Map<string, { readonly values: readonly unknown[]; count: number }>()
  /** Members with a NULL in them: they make a miss NULL rather than FALSE. */
  private nullMembers = 0
  private readonly parsers: readonly ((text: string) => unknown)[]
  private readonly keys: readonly ((value: unknown) => string)[]
  private readonly formats: readonly ((value: unknown) => string)[]

  constructor(readonly types: readonly SqlType[]) {
    const codecs = types.map(codecFor)
    this.parsers = codecs.map((c) => c.parseOutput)
    this.formats = codecs.map((c) => c.format)
    this.keys = codecs.map((c) => {
      const key = c.key
      if (key === undefined) throw new Error('a subquery column needs a type with equality')
      return key
    })
  }

  get size(): number {
    return this.members.size
  }

  /** From now on `watcher` hears every tuple entering and leaving (a clone does not inherit it). */
  watch(watcher: ViewWatcher | undefined): void {
    this.watcher = watcher
  }

  /** Every member's key and values. */
  *entries(): IterableIterator<[string, readonly unknown[]]> {
    for (const [key, member] of this.members) yield [key, member.values]
  }

  /** Parses Postgres text values of the selected columns (as a row holds them). */
  parse(texts: readonly (string | null)[]): unknown[] {
    return texts.map((t, i) => (t === null ? null : this.parsers[i]!(t)))
  }

  /** The tuple's key: the same for equal tuples, whatever their spelling. */
  keyOf(values: readonly unknown[]): string {
    let key = ''
    for (let i = 0; i < values.length; i++) {
      const v = values[i]
      key += v === null ? '\u0001' : `\u0002${this.keys[i]!(v)}`
      key += '\u0000'
    }
    return key
  }

  /** Each value's canonical text (what tags hash), or null for NULL. */
  texts(values: readonly unknown[]): (string | null)[] {
    return values.map((v, i) => (v === null ? null : this.formats[i]!(v)))
  }

  has(values: readonly unknown[]): boolean {
    return this.members.has(this.keyOf(values))
  }

  /** One more inner row carries the tuple: true when it just entered the set. */
  add(values: readonly unknown[]): boolean {
    const key = this.keyOf(values)
    const member = this.members.get(key)
    if (member !== undefined) {
      member.count++
      return false
    }
    this.members.set(key, { values, count: 1 })
    if (values.includes(null)) this.nullMembers++
    this.watcher?.entered(key, values)
    return true
  }

  /** One inner row less carries the tuple: true when it just left the set. */
  remove(values: readonly unknown[]): boolean {
    const key = this.keyOf(values)
    const member = this.members.get(key)
    if (member === undefined) return false
    if (--member.count > 0) return false
    this.members.delete(key)
    if (member.values.includes(null)) this.nullMembers--
    this.watcher?.left(key, member.values)
    return true
  }

  /** Takes the tuple out whatever its count. */
  drop(values: readonly unknown[]): void {
    const key = this.keyOf(values)
    const member = this.members.get(key)
    if (member === undefined) return
    this.members.delete(key)
    if (member.values.includes(null)) this.nullMembers--
    this.watcher?.left(key, member.values)
  }

  /** A copy with its own counts. */
  clone(): SubqueryView {
    const copy = new SubqueryView(this.types)
    for (const [key, member] of this.members) copy.members.set(key, { values: member.values, count: member.count })
    copy.nullMembers = this.nullMembers
    return copy
  }

  /** Every member's values. */
  *values(): IterableIterator<readonly unknown[]> {
    for (const member of this.members.values()) yield member.values
  }

  /** `left IN (<this set>)` with Postgres's semantics. */
  test(left: readonly unknown[]): boolean | null {
    if (this.members.size === 0) return false
    const hasNull = left.includes(null)
    if (!hasNull && this.members.has(this.keyOf(left))) return true
    if (!hasNull && this.nullMembers === 0) return false
    // Rare: NULLs on either side. The OR over members of the AND of element equalities, three-valued.
    let result: boolean | null = false
    for (const member of this.members.values()) {
      let all: boolean | null = true
      for (let i = 0; i < left.length && all !== false; i++) {
        const a = left[i]
        const b = member.values[i]
        if (a === null || b === null) all = null
        else if (this.keys[i]!(a) !== this.keys[i]!(b)) all = false
      }
      if (all === true) return true
      if (all === null) result = null
    }
    return result
  }
}

/**
 * Where the evaluator finds a clause's views: a symbol-keyed property of the
 * row object, so the compiled clause stays pure and shared between states.
 */
export const SUBQUERY_VIEWS: unique symbol = Symbol('subquery views')

export type RowWithViews = RowValues & { [SUBQUERY_VIEWS]?: readonly SubqueryView[] }

/** The row with the views attached (a shallow copy: rows may be shared between shapes). */
export function withViews(row: RowValues, views: readonly SubqueryView[]): RowWithViews {
  return Object.assign({}, row, { [SUBQUERY_VIEWS]: views })
}

export function viewOf(row: RowValues, dep: number): SubqueryView {
  const view = (row as RowWithViews)[SUBQUERY_VIEWS]?.[dep]
  if (view === undefined) throw new EvaluationError('missing_value', 'the subquery has no current result set')
  return view
}
