import type { RowValues } from '@sluice/protocol'
import { type IndexableConjunct, type WhereClause, isCanonicalInt } from '../where/index.js'
import { ViewIndex, type ViewRouting } from './view-index.js'

/**
 * Finds the shapes of ONE table that a row belongs to, without evaluating
 * every shape's where clause (docs/architecture.md §4).
 *
 * Keep one `ShapeIndex` per table: conjunct domains name a key function of
 * columns, not of a relation, so shapes of two tables must not share one.
 *
 * A shape lives in exactly one place:
 * - no where clause: `everything`, returned for every row;
 * - a clause with an indexable conjunct: one hash index per conjunct domain,
 *   key → shapes, under the one conjunct chosen by {@link chooseConjunct};
 * - anything else (OR, ranges, LIKE...): `scan`, evaluated per row;
 * - a subquery shape (`col IN (SELECT …)`, given its `ViewRouting`): filed
 *   under its views' current values in a `ViewIndex` (view-index.ts).
 *
 * `affected(row)` computes each domain's row keys once (not once per shape) and
 * visits only the shapes filed under those keys, so its cost is
 * O(domains + candidates + scan shapes), independent of how many indexed
 * shapes exist.
 *
 * `S` must not be a Map: a bucket holding one bare shape is told from a
 * bucket of several by its type.
 */
export class ShapeIndex<S> {
  private readonly everything = new Set<S>()
  private readonly scan = new Map<S, WhereClause>()
  private readonly domains = new Map<string, DomainIndex<S>>()
  /** The domains' values, for `affected` (walked per row change; a Map iterator each time is garbage per change). */
  private domainList: Array<DomainIndex<S>> = []
  private readonly placements = new Map<S, Placement<S>>()
  /** Subquery shapes, filed under their views' values. */
  readonly views = new ViewIndex<S>()

  /** Number of registered shapes. */
  get size(): number {
    return this.placements.size
  }

  has(shape: S): boolean {
    return this.placements.has(shape)
  }

  /**
   * Registers `shape`; `where` undefined means the shape takes every row.
   * Adding a shape that is already registered replaces its clause, so a caller
   * never leaves a stale entry behind.
   */
  add(shape: S, where: WhereClause | undefined, views?: ViewRouting): void {
    if (this.placements.has(shape)) this.remove(shape)
    if (views !== undefined) {
      this.views.add(shape, views)
      this.placements.set(shape, 'views')
      return
    }
    if (where === undefined) {
      this.everything.add(shape)
      this.placements.set(shape, 'everything')
      return
    }
    const conjunct = chooseConjunct(where)
    if (conjunct === undefined) {
      this.scan.set(shape, where)
      this.placements.set(shape, 'scan')
      return
    }
    let domain = this.domains.get(conjunct.domain)
    if (domain === undefined) {
      // Any conjunct of the domain computes the same row keys, so the first one stands for all.
      const first = conjunct
      domain = { rowKeys: (row) => first.rowKeys(row), byKey: new Map(), shapes: 0 }
      this.domains.set(conjunct.domain, domain)
      this.domainList = [...this.domains.values()]
    }
    // `exact`: the chosen conjunct is the whole clause, so a key hit is the verdict.
    const filedUnder = fileKeys(conjunct, domain)
    const entry = new Entry(shape, where, conjunct.kind, conjunct.keys, where.exact === conjunct, conjunct.domain, filedUnder)
    for (const text of filedUnder) {
      const key = mapKey(text)
      const bucket = domain.byKey.get(key)
      if (bucket === undefined) domain.byKey.set(key, entry.alone ? shape : entry)
      else if (bucket instanceof Map) bucket.set(shape, entry)
      else {
        const other = this.entryOf(bucket)
        domain.byKey.set(key, new Map([[other.shape, other], [shape, entry]]))
      }
    }
    domain.shapes++
    this.placements.set(shape, entry)
  }

  /** Unregisters `shape`; unknown shapes are ignored. Empty buckets and domains are dropped so they cost nothing per row. */
  remove(shape: S): void {
    const placement = this.placements.get(shape)
    if (placement === undefined) return
    this.placements.delete(shape)
    if (placement === 'everything') {
      this.everything.delete(shape)
      return
    }
    if (placement === 'scan') {
      this.scan.delete(shape)
      return
    }
    if (placement === 'views') {
      this.views.remove(shape)
      return
    }
    const domain = this.domains.get(placement.domain)
    if (domain === undefined) return
    for (const text of placement.filedUnder) {
      const key = mapKey(text)
      const bucket = domain.byKey.get(key)
      if (bucket === undefined) continue
      if (!(bucket instanceof Map)) {
        if ((bucket instanceof Entry ? bucket.shape : bucket) === shape) domain.byKey.delete(key)
        continue
      }
      bucket.delete(shape)
      if (bucket.size === 1) {
        const [rest] = bucket.values()
        domain.byKey.set(key, rest!.alone ? rest!.shape : rest!)
      }
    }
    domain.shapes--
    if (domain.shapes === 0) {
      this.domains.delete(placement.domain)
      this.domainList = [...this.domains.values()]
    }
  }

  /** The shapes `row` belongs to, each once. */
  affected(row: RowValues): Set<S> {
    const out: S[] = []
    const count = this.collect(row, out)
    return new Set(out.slice(0, count))
  }

  /**
   * Writes the shapes `row` belongs to into `out` from index 0 and returns how
   * many; entries past that count are left over from earlier calls. Each shape
   * comes once without a Set to ensure it: a shape sits in one place, an
   * `equals` domain yields one key per row, and an elements domain's keys are
   * made distinct while the shapes there are filed under a single key. The
   * router's path: a Set per change was a measurable share of its garbage.
   */
  collect(row: RowValues, out: S[]): number {
    let count = 0
    if (this.everything.size > 0) for (const shape of this.everything) out[count++] = shape
    const domains = this.domainList
    for (let d = 0; d < domains.length; d++) {
      const domain = domains[d]!
      const rowKeys = domain.rowKeys(row)
      if (rowKeys.length === 0) continue // NULL (or an error computing it): no conjunct of the domain holds
      if (rowKeys.length === 1) {
        count = this.visit(domain, rowKeys[0]!, undefined, row, out, count)
        continue
      }
      // An array row ({a,a}) may repeat keys, and `contains` needs membership tests.
      const keySet = new Set(rowKeys)
      for (const key of keySet) count = this.visit(domain, key, keySet, row, out, count)
    }
    if (this.scan.size > 0) for (const [shape, where] of this.scan) if (where.matches(row)) out[count++] = shape
    if (this.views.size > 0) count = this.views.collect(row, out, count)
    return count
  }

  private visit(domain: DomainIndex<S>, key: string, keySet: ReadonlySet<string> | undefined, row: RowValues, out: S[], count: number): number {
    const bucket = domain.byKey.get(mapKey(key))
    if (bucket === undefined) return count
    if (bucket instanceof Entry) {
      if (accepts(bucket, key, keySet, row)) out[count++] = bucket.shape
      return count
    }
    if (!(bucket instanceof Map)) {
      out[count++] = bucket
      return count
    }
    for (const entry of bucket.values()) {
      if (accepts(entry, key, keySet, row)) out[count++] = entry.shape
    }
    return count
  }

  /** The entry of a bucket that holds one shape. */
  private entryOf(bucket: S | Entry<S>): Entry<S> {
    if (bucket instanceof Entry) return bucket
    const placement = this.placements.get(bucket)
    if (!(placement instanceof Entry)) throw new Error('a shape filed alone in the index has no placement')
    return placement
  }

  /**
   * For an update: the shapes holding the row before (`inOld`) and after
   * (`inNew`). In both → update for that shape; only old → delete; only new →
   * insert (docs/protocol.md §3.2). `oldRow` must carry every column the clauses
   * read (replica identity full, or the new row overlaid with the old key),
   * or old-side membership is unknown.
   */
  affectedByUpdate(oldRow: RowValues, newRow: RowValues): { readonly inOld: Set<S>; readonly inNew: Set<S> } {
    return { inOld: this.affected(oldRow), inNew: this.affected(newRow) }
  }
}

/**
 * The conjunct to file a clause under: an `equals` with the fewest keys (each
 * key is a bucket the shape sits in, and a single value is the most selective
 * lookup), else an `any` (one key), else a `contains` (confirmed after lookup).
 */
export function chooseConjunct(where: WhereClause): IndexableConjunct | undefined {
  let best: IndexableConjunct | undefined
  for (const conjunct of where.conjuncts) {
    if (conjunct.keys.length === 0) continue // `x IN ()` cannot be looked up; leave such clauses to evaluation
    if (best === undefined || rank(conjunct) < rank(best)) best = conjunct
  }
  return best
}

function rank(conjunct: IndexableConjunct): number {
  // Kinds first, then key count within equals; keys.length stays below 2^20 in practice (WhereLimits).
  const kind = conjunct.kind === 'equals' ? 0 : conjunct.kind === 'any' ? 1 : 2
  return kind * 2 ** 20 + (conjunct.kind === 'equals' ? conjunct.keys.length : 0)
}

/**
 * A key as the hash index holds it: the text of a safe integer in Postgres's
 * own form (`42`, `-7`; not `007` or `-0`) as that number, anything else as
 * the text. One-to-one, so filing and lookup agree whatever the domain's type.
 * Why: with 100k shapes the lookup was the router's costliest line, each a few
 * cache misses, one of them the stored key string the probe compares against;
 * a number sits in the table itself (and 100k key strings fewer stay on the heap).
 */
type MapKey = string | number

/** Digits of the longest decimal always below 2^53 (with a sign: one more). */
const SAFE_DIGITS = 15

function mapKey(text: string): MapKey {
  const n = text.length
  if (n === 0 || n > SAFE_DIGITS + 1 || !isCanonicalInt(text)) return text
  return n > SAFE_DIGITS && text.charCodeAt(0) !== 45 ? text : Number(text)
}

interface DomainIndex<S> {
  readonly rowKeys: (row: RowValues) => readonly string[]
  /**
   * Key → the one shape filed under it (most keys: `id = $1` shapes), or a Map
   * once a second joins. A Map per key was 100k Maps with 100k shapes, each a
   * table for the collector to trace on every full collection. A shape alone
   * under a key whose hit is its verdict (`Entry.alone`) is filed as itself:
   * with 100k shapes every lookup lands on objects out of the CPU's caches,
   * and the entry between key and shape was one more memory round trip.
   */
  readonly byKey: Map<MapKey, S | Entry<S> | Map<S, Entry<S>>>
  shapes: number
}

class Entry<S> {
  constructor(
    readonly shape: S,
    readonly where: WhereClause,
    readonly kind: IndexableConjunct['kind'],
    readonly keys: readonly string[],
    readonly exact: boolean,
    /** The domain and keys it is filed under: the entry is the shape's placement too (no second object per shape). */
    readonly domain: string,
    readonly filedUnder: readonly string[],
  ) {}

  /** A hit under any of its keys takes the row: nothing to check (see `accepts`), so a bucket can hold the bare shape. */
  get alone(): boolean {
    return this.exact && this.kind !== 'contains'
  }
}

/** Where a shape is filed: an indexed one's entry, or the name of the one place it is in. */
type Placement<S> = 'everything' | 'scan' | 'views' | Entry<S>

/**
 * Keys a shape is filed under. `equals` under every key (a row has one value,
 * so it meets the shape in at most one bucket); `any` under its one key;
 * `contains` under a single key, since a row must hold all of them: filing
 * under each would visit the shape once per key the row holds. The key with
 * the smallest bucket now is taken, spreading shapes like `tags @> '{common,
 * rare}'` onto their rarer key.
 */
function fileKeys(conjunct: IndexableConjunct, domain: DomainIndex<unknown>): readonly string[] {
  // One key (`id = $1`): nothing to deduplicate or choose, and no Set and array per shape.
  if (conjunct.keys.length === 1) return conjunct.keys
  const unique = [...new Set(conjunct.keys)]
  if (conjunct.kind === 'equals') return unique
  let best = unique[0]
  let bestSize = Infinity
  for (const key of unique) {
    const bucket = domain.byKey.get(mapKey(key))
    const size = bucket === undefined ? 0 : bucket instanceof Map ? bucket.size : 1
    if (size < bestSize) {
      best = key
      bestSize = size
    }
  }
  return best === undefined ? [] : [best]
}

/** Whether a candidate found under `key` takes the row. */
function accepts(entry: Entry<unknown>, key: string, keySet: ReadonlySet<string> | undefined, row: RowValues): boolean {
  if (entry.kind === 'contains') {
    // Every contained key must be among the row's elements: a cheap rejection before any evaluation.
    for (const wanted of entry.keys) {
      if (wanted !== key && (keySet === undefined || !keySet.has(wanted))) return false
    }
  }
  return entry.exact || entry.where.matches(row)
}
