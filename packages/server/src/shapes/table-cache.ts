import type { ShapeDefinitionParams } from '@sluice/protocol'
import type { PublicationManager, Queryable } from '../replication/index.js'
import { type CompiledDefinition, compileDefinition } from './definition/index.js'
import { ShapeError } from './shape-error.js'
import { type TableInfo, loadTable, whereColumns } from './table-catalog.js'

/** Compiled request definitions remembered per table version. */
const MAX_COMPILED_PER_TABLE = 10_000

/**
 * How long a table the role may not publish (not its owner, say) is answered
 * from memory. Only an administrator can fix that, and every client that asks
 * meanwhile would otherwise run the refused ALTER again; after this long (or a
 * DDL change to the table) it is tried again, so a fix is noticed soon.
 */
const PRIVILEGE_REFUSAL_MS = 30_000

/**
 * The shape manager's catalog cache: tables as the catalog describes them
 * (one object per table version), the definitions compiled against each
 * version, and which tables are known to be in the publication.
 */
export class TableCache {
  /**
   * Catalog lookups in flight, shared by the requests that arrive meanwhile, so
   * a burst of requests for one table costs one catalog query. With
   * `cacheMs` answers are also reused for that long after they arrive
   * (kept short: a table dropped and created again within that window is
   * still answered with its old shapes).
   */
  private readonly lookups = new Map<string, { at: number; done: boolean; info: Promise<TableInfo | undefined> }>()
  /** Catalog answers already interned, to their interned object: `load` interns each answer once, not per request. */
  private readonly interned = new WeakMap<TableInfo, TableInfo>()
  private readonly versions = new Map<number, { readonly text: string; readonly info: TableInfo }>()
  /**
   * Per table, the definitions compiled against its current version. Keyed by
   * oid rather than by the version object, so that `forget` and `prune` reach
   * them: a version object outlives `forget` while anything still holds it.
   */
  private readonly compiledDefinitions = new Map<number, { readonly info: TableInfo; readonly known: Map<string, CompiledDefinition> }>()
  private readonly lastCompiled = new WeakMap<ShapeDefinitionParams, { readonly info: TableInfo; readonly result: CompiledDefinition }>()
  /** Tables known to be in the publication with REPLICA IDENTITY FULL. */
  private readonly published = new Set<number>()
  private readonly tableAdds = new Map<string, Promise<unknown>>()
  /** Tables whose publishing Postgres refused for want of a privilege, with when. */
  private readonly refused = new Map<number, { readonly error: unknown; readonly at: number }>()

  constructor(
    private readonly db: Queryable,
    /** Only `addToPublication` uses it (a read replica, which never publishes, gives one that refuses). */
    private readonly publication: Pick<PublicationManager, 'addTable'>,
    private readonly cacheMs: number,
  ) {}

  /** The table, from the cache or the catalog; undefined when it does not exist (then nothing is kept for it). */
  async load(schema: string, name: string): Promise<TableInfo | undefined> {
    const key = tableKey(schema, name)
    const now = Date.now()
    let cached = this.lookups.get(key)
    if (cached === undefined || (cached.done && now - cached.at >= this.cacheMs)) {
      const entry = { at: now, done: false, info: loadTable(this.db, { schema, name }) }
      cached = entry
      this.lookups.set(key, entry)
      entry.info.then(
        () => {
          entry.done = true
          if (this.cacheMs <= 0 && this.lookups.get(key) === entry) this.lookups.delete(key)
        },
        // A failed load is not worth remembering.
        () => this.lookups.get(key) === entry && this.lookups.delete(key),
      )
    }
    const loaded = await cached.info
    const info = loaded === undefined ? undefined : this.internLoaded(loaded)
    if (info === undefined) this.lookups.delete(key)
    return info
  }

  private internLoaded(loaded: TableInfo): TableInfo {
    const known = this.interned.get(loaded)
    // Still the current version (`forget` drops it): as `intern` would answer, without serialising the answer again.
    if (known !== undefined && this.versions.get(known.oid)?.info === known) return known
    const info = this.intern(loaded)
    this.interned.set(loaded, info)
    return info
  }

  /** The one object for this table version (see `intern`), for a table loaded elsewhere. */
  adopt(info: TableInfo): TableInfo {
    return this.intern(info)
  }

  /** The table from the catalog, not the cache (what `load` answers from then on). */
  reload(schema: string, name: string): Promise<TableInfo | undefined> {
    this.lookups.delete(tableKey(schema, name))
    return this.load(schema, name)
  }

  /**
   * The request's definition and where clause compiled against this version of
   * the table, remembered per version (TableInfo objects are interned, see
   * `intern`): a client following a shape sends the same parameters on every
   * request, and parsing its where clause each time costs more than serving
   * the response.
   */
  async compiled(info: TableInfo, params: ShapeDefinitionParams): Promise<CompiledDefinition> {
    // The same parameters object again (the HTTP layer reuses the parse of a repeated query): no key to build.
    const last = this.lastCompiled.get(params)
    if (last !== undefined && last.info === info) return last.result
    const result = await this.compiledByKey(info, params)
    this.lastCompiled.set(params, { info, result })
    return result
  }

  private async compiledByKey(info: TableInfo, params: ShapeDefinitionParams): Promise<CompiledDefinition> {
    const key = JSON.stringify([params.where ?? null, params.params, params.columns ?? null, params.queryableColumns ?? null, params.replica, params.log])
    const entry = this.compiledDefinitions.get(info.oid)
    const hit = entry?.info === info ? entry.known.get(key) : undefined
    if (hit !== undefined) return hit
    const result = await compileDefinition(params, whereColumns(info), async (schema, name) => {
      const inner = await this.load(schema, name)
      return inner === undefined ? undefined : whereColumns(inner)
    })
    checkColumns(info, result.definition.columns)
    // A clause with subqueries also depends on its inner tables' versions: compiled afresh each time.
    if (result.where?.subqueries !== undefined) return result
    let current = this.compiledDefinitions.get(info.oid)
    // Those remembered were compiled against an older version of the table: stale.
    if (current?.info !== info) {
      current = { info, known: new Map() }
      this.compiledDefinitions.set(info.oid, current)
    }
    const { known } = current
    // Bounded: hostile clients can send endless distinct clauses.
    if (known.size >= MAX_COMPILED_PER_TABLE) known.clear()
    known.set(key, result)
    return result
  }

  /** Adds the table to the publication once per table at a time (concurrent creations share the call). */
  async addToPublication(info: TableInfo): Promise<void> {
    // Published, and FULL as loaded (a partition created since makes a partitioned table count as not FULL).
    if (this.published.has(info.oid) && info.replicaIdentity === 'full') return
    const refusal = this.refused.get(info.oid)
    if (refusal !== undefined && Date.now() - refusal.at < PRIVILEGE_REFUSAL_MS) throw refusal.error
    const key = String(info.oid)
    const pending = this.tableAdds.get(key) ?? this.publication.addTable(info.schema, info.name).finally(() => this.tableAdds.delete(key))
    this.tableAdds.set(key, pending)
    try {
      await pending
    } catch (error) {
      if ((error as { code?: unknown }).code === 'insufficient_privilege') this.refused.set(info.oid, { error, at: Date.now() })
      throw error
    }
    this.refused.delete(info.oid)
    this.published.add(info.oid)
  }

  /** How many compiled definitions are remembered, over every table. */
  get compiledCount(): number {
    let count = 0
    for (const { known } of this.compiledDefinitions.values()) count += known.size
    return count
  }

  /**
   * Drops the compiled definitions that `keep` refuses (those of shapes that
   * expired or were evicted), so retired shapes leave nothing here. One pass
   * over what is remembered, run by the expiry sweep, not per request.
   */
  prune(keep: (definition: CompiledDefinition['definition']) => boolean): void {
    for (const [oid, { known }] of this.compiledDefinitions) {
      for (const [key, compiled] of known) if (!keep(compiled.definition)) known.delete(key)
      if (known.size === 0) this.compiledDefinitions.delete(oid)
    }
  }

  /** After a table's shapes were invalidated (DDL, TRUNCATE, a replaced table): ask the catalog again next time. */
  forget(info: TableInfo): void {
    this.lookups.delete(tableKey(info.schema, info.name))
    this.versions.delete(info.oid)
    this.compiledDefinitions.delete(info.oid)
    this.published.delete(info.oid)
    this.refused.delete(info.oid)
  }

  /**
   * One TableInfo object per table version, shared by all its shapes: each
   * catalog answer is a fresh object graph (and pg's row objects give each
   * answer hidden classes of its own), which would cost every shape about a
   * kilobyte. Any difference in what was loaded makes a new version.
   */
  private intern(info: TableInfo): TableInfo {
    const text = JSON.stringify(info)
    const known = this.versions.get(info.oid)
    if (known !== undefined && known.text === text) return known.info
    this.versions.set(info.oid, { text, info })
    return info
  }
}

function tableKey(schema: string, name: string): string {
  return `${schema}\u0000${name}`
}

function checkColumns(info: TableInfo, columns: readonly string[] | undefined): void {
  if (columns === undefined) return
  const known = new Set(info.columns.map((c) => c.name))
  const unknown = columns.filter((c) => !known.has(c))
  if (unknown.length > 0) {
    throw new ShapeError('invalid_columns', `unknown column${unknown.length > 1 ? 's' : ''}: ${unknown.map((c) => JSON.stringify(c)).join(', ')}`, { columnProblem: { kind: 'unknown', columns: unknown } })
  }
  const missing = info.primaryKey.filter((c) => !columns.includes(c))
  if (missing.length > 0) {
    throw new ShapeError('invalid_columns', `the selected columns must include the primary key; missing: ${missing.map((c) => JSON.stringify(c)).join(', ')}`, { columnProblem: { kind: 'missing_primary_key', columns: missing } })
  }
}
