import type { RowValues } from '@sluice/protocol'

/*
 * How the router finds the subquery shapes (`col IN (SELECT …)`) an outer-table
 * row reaches without asking each of them: a shape is filed under every value
 * currently in its view, and kept in step as values enter and leave (the
 * shape tells the index through a `ViewSink`). A row then looks its own value
 * up once per domain, so the cost per change does not grow with the number of
 * such shapes. A shape that cannot be narrowed right now (its views are not
 * loaded yet, a move-in is in flight, or its clause has a disjunct without a
 * positive subquery) is "broad": it gets every row of the table, as before.
 */

/** One positive subquery of a shape that every row in the shape must satisfy in some disjunct. */
export interface ViewFiling {
  /**
   * Rows look their key up once per domain: filings with the same domain
   * compute the same key for a row (same left columns, same types).
   */
  readonly domain: string
  /** The row's key as the view keys its tuples; undefined when the row cannot be in (a NULL on the left). */
  readonly rowKey: (row: RowValues) => string | undefined
}

/** What the index hears from a shape filed by its views. */
export interface ViewSink {
  /** `key` entered the view of filing number `filing`. */
  file(filing: number, key: string): void
  unfile(filing: number, key: string): void
  /** While broad, the shape takes every row of its table. */
  broad(on: boolean): void
}

/** What a shape routed by its views gives the router (RouteSpec.views). */
export interface ViewRouting {
  /**
   * A row can be in the shape only if it meets one of these filings (one per
   * disjunct, deduplicated); empty when some disjunct has no positive
   * subquery: then the shape stays broad.
   */
  readonly filings: readonly ViewFiling[]
  /** The index starts listening: the shape seeds it with its current values and state. */
  connect(sink: ViewSink): void
  /** The keys the shape has filed under `filing` and not unfiled (its view's tuples once seeded), for taking it out. */
  keys(filing: number): Iterable<string>
  disconnect(): void
}

/** One filing of one shape: what a bucket holds. */
class FilingRef<S> {
  constructor(
    readonly placement: Placement<S>,
    readonly filing: number,
  ) {}
}

class Placement<S> {
  broad = false
  /** The `collect` call that last returned the shape: a shape found twice in one call is returned once. */
  mark = 0
  readonly refs: FilingRef<S>[] = []
  constructor(
    readonly shape: S,
    readonly routing: ViewRouting,
  ) {}
}

interface Domain<S> {
  readonly rowKey: (row: RowValues) => string | undefined
  /** Key → the one filing under it, or a Set once a second joins (most values belong to few shapes). */
  readonly byKey: Map<string, FilingRef<S> | Set<FilingRef<S>>>
  /** Every filing of the domain, for a row whose key cannot be computed. */
  readonly refs: Set<FilingRef<S>>
}

export class ViewIndex<S> {
  private readonly placements = new Map<S, Placement<S>>()
  private readonly broadShapes = new Set<Placement<S>>()
  private readonly domains = new Map<string, Domain<S>>()
  private domainList: Domain<S>[] = []
  private mark = 0
  private entries = 0

  get size(): number {
    return this.placements.size
  }

  /** Values filed, over every shape and filing. */
  get filed(): number {
    return this.entries
  }

  has(shape: S): boolean {
    return this.placements.has(shape)
  }

  /** Whether the shape takes every row right now. */
  isBroad(shape: S): boolean {
    return this.placements.get(shape)?.broad ?? false
  }

  add(shape: S, routing: ViewRouting): void {
    if (this.placements.has(shape)) this.remove(shape)
    const placement = new Placement(shape, routing)
    this.placements.set(shape, placement)
    routing.filings.forEach((filing, i) => {
      let domain = this.domains.get(filing.domain)
      if (domain === undefined) {
        domain = { rowKey: filing.rowKey, byKey: new Map(), refs: new Set() }
        this.domains.set(filing.domain, domain)
        this.domainList = [...this.domains.values()]
      }
      const ref = new FilingRef(placement, i)
      placement.refs.push(ref)
      domain.refs.add(ref)
    })
    // Broad until the shape says otherwise, and for good without a filing.
    this.setBroad(placement, true)
    const narrowable = placement.refs.length > 0
    routing.connect({
      file: (filing, key) => {
        if (this.placements.get(shape) === placement) this.file(placement, filing, key)
      },
      unfile: (filing, key) => {
        if (this.placements.get(shape) === placement) this.unfile(placement, filing, key)
      },
      broad: (on) => {
        if (this.placements.get(shape) === placement) this.setBroad(placement, on || !narrowable)
      },
    })
  }

  remove(shape: S): void {
    const placement = this.placements.get(shape)
    if (placement === undefined) return
    placement.refs.forEach((ref, i) => {
      for (const key of placement.routing.keys(i)) this.unfile(placement, i, key)
      const domain = this.domainOf(placement, i)
      domain.refs.delete(ref)
      if (domain.refs.size === 0) {
        this.domains.delete(placement.routing.filings[i]!.domain)
        this.domainList = [...this.domains.values()]
      }
    })
    this.placements.delete(shape)
    this.broadShapes.delete(placement)
    placement.routing.disconnect()
  }

  /**
   * Writes the shapes `row` may belong to into `out` from `count` on; returns
   * the new count. Each shape once, whatever number of its values and filings
   * the row meets.
   */
  collect(row: RowValues, out: S[], count: number): number {
    const mark = ++this.mark
    for (const placement of this.broadShapes) {
      placement.mark = mark
      out[count++] = placement.shape
    }
    const domains = this.domainList
    for (let d = 0; d < domains.length; d++) {
      const domain = domains[d]!
      if (domain.byKey.size === 0) continue
      let key: string | undefined
      try {
        key = domain.rowKey(row)
      } catch {
        // The row's value cannot be read as the views read theirs: every shape of the domain judges it.
        for (const ref of domain.refs) count = take(ref, mark, out, count)
        continue
      }
      if (key === undefined) continue
      const bucket = domain.byKey.get(key)
      if (bucket === undefined) continue
      if (bucket instanceof FilingRef) count = take(bucket, mark, out, count)
      else for (const ref of bucket) count = take(ref, mark, out, count)
    }
    return count
  }

  private setBroad(placement: Placement<S>, on: boolean): void {
    placement.broad = on
    if (on) this.broadShapes.add(placement)
    else this.broadShapes.delete(placement)
  }

  private domainOf(placement: Placement<S>, filing: number): Domain<S> {
    return this.domains.get(placement.routing.filings[filing]!.domain)!
  }

  private file(placement: Placement<S>, filing: number, key: string): void {
    const ref = placement.refs[filing]
    if (ref === undefined) return
    const domain = this.domainOf(placement, filing)
    const bucket = domain.byKey.get(key)
    if (bucket === undefined) domain.byKey.set(key, ref)
    else if (bucket instanceof FilingRef) {
      if (bucket === ref) return
      domain.byKey.set(key, new Set([bucket, ref]))
    } else {
      if (bucket.has(ref)) return
      bucket.add(ref)
    }
    this.entries++
  }

  private unfile(placement: Placement<S>, filing: number, key: string): void {
    const ref = placement.refs[filing]
    if (ref === undefined) return
    const domain = this.domainOf(placement, filing)
    const bucket = domain.byKey.get(key)
    if (bucket === undefined) return
    if (bucket instanceof FilingRef) {
      if (bucket !== ref) return
      domain.byKey.delete(key)
    } else {
      if (!bucket.delete(ref)) return
      if (bucket.size === 1) domain.byKey.set(key, bucket.values().next().value!)
    }
    this.entries--
  }
}

function take<S>(ref: FilingRef<S>, mark: number, out: S[], count: number): number {
  const placement = ref.placement
  if (placement.mark === mark) return count
  placement.mark = mark
  out[count++] = placement.shape
  return count
}
