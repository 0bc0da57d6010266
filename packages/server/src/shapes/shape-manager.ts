import { EventEmitter } from 'node:events'
import type { ShapeDefinitionParams } from '@sluice/protocol'
import type { ShapeLog } from '@sluice/storage'
import {
  DEFAULT_CATALOG_CHECK_MS,
  DEFAULT_MAX_SHAPES,
  DEFAULT_MAX_SUBQUERY_VIEW_ENTRIES,
  DEFAULT_MEMORY_BUDGET_BYTES,
  DEFAULT_SHAPE_TTL_MS,
  DEFAULT_SNAPSHOT_CONNECTIONS,
  DEFAULT_SUBQUERY_MAX_HELD_CHANGES,
  DEFAULT_SUBQUERY_MAX_HELD_TRANSACTIONS,
  DEFAULT_TABLE_CACHE_MS,
} from '../defaults.js'
import { type WhereClause, loadWhereParser } from '../where/index.js'
import { CatalogWatch } from './catalog-watch.js'
import { type ShapeDefinition, ShapeRegistry, systemMicrosClock } from './definition/index.js'
import { catalogChanged } from './invalidation.js'
import { type LiveShape, type ShapeRemoval, routeSpec } from './live-shape.js'
import { QueueBudget } from './queue-budget.js'
import type { Invalidation } from './route-contracts.js'
import { ShapeBuilder, creationError } from './shape-builder.js'
import { ShapeError } from './shape-error.js'
import { ShapeLifecycle } from './shape-lifecycle.js'
import { ShapeRestore } from './shape-restore.js'
import { SubqueryShape, viewsFull } from './subquery/subquery-shape.js'
import { ViewBudget } from './subquery/view-budget.js'
import { SnapshotSemaphore } from './snapshot-semaphore.js'
import { TableCache } from './table-cache.js'
import { type TableInfo, loadTable, loadTableStates, tableStateOf } from './table-catalog.js'

export type { ShapeRemoval } from './live-shape.js'
export type {
  ShapeManagerOptions,
  CreationGate,
  ShapeLogger,
  ResolvedShape,
  ShapeInvalidated,
  ShapeManagerEvents,
  ShapeManagerStats,
} from './shape-manager-contracts.js'
import type { CreationGate, ResolvedShape, ShapeManagerEvents, ShapeManagerOptions, ShapeManagerStats } from './shape-manager-contracts.js'

/**
 * Shapes from request to live log (docs/architecture.md §2): the registry of shapes and
 * their handles, and the door the HTTP layer comes through.
 *
 * Resolving a request: the table is loaded from the catalog (`TableCache`),
 * the definition compiled and normalised; an equal definition already
 * registered answers at once. Otherwise the table joins the publication
 * (REPLICA IDENTITY FULL), the definition gets a handle, and the shape is
 * created in the background (`ShapeBuilder`: router, snapshot, stitching).
 *
 * Invalidation (TRUNCATE, DDL, a replaced table, DELETE, a replication slot
 * found ahead of the store at start) retires the handle for good and deletes
 * the log; clients holding the handle get 409 from the HTTP layer and start
 * over with a new one. DDL is noticed three ways (docs/architecture.md §2): a
 * Relation message the router does not expect (or, matching, that the catalog
 * contradicts), a request whose catalog answer contradicts its shape's table,
 * and `CatalogWatch` polling the catalog for what neither sees (a dropped or
 * renamed table, a new key with no write after it).
 *
 * Memory: queues of shapes waiting for their snapshot are the only routed data
 * kept in memory, within `memoryBudgetBytes` (`QueueBudget`).
 *
 * Lifecycle (`ShapeLifecycle`; docs/operations.md, "Shape lifecycle"): every request that
 * resolves to a shape stamps it (`ShapeUses`). A sweep every
 * `shapeTtlMs / 8` (at most a minute) expires the ready shapes unused for
 * `shapeTtlMs` on which no live request waits; a new shape past `maxShapes`
 * evicts the least recently used (`EvictionQueue`). Both retire the handle as
 * an invalidation does (409 for clients that come back, the log deleted) and
 * forget it, so nothing of the shape stays in memory.
 */
export class ShapeManager extends EventEmitter<ShapeManagerEvents> {
  private readonly registry: ShapeRegistry
  private readonly shapes = new Map<string, LiveShape>()
  /** The handles of the shapes made for each table version (TableInfo object): what the catalog watch checks. */
  private readonly byTable = new Map<TableInfo, Set<string>>()
  /** Router handles of subquery shapes' inner-table members, to their shape's handle. */
  private readonly memberOf = new Map<string, string>()
  private readonly maxShapes: number
  /** What every subquery shape's views hold, against `--max-subquery-view-entries`. */
  readonly viewBudget: ViewBudget
  private readonly tables: TableCache
  private readonly queues: QueueBudget
  private readonly builder: ShapeBuilder
  private readonly watch: CatalogWatch
  private readonly lifecycle: ShapeLifecycle
  /** The restore, until `promote` finishes it. */
  private restoring: ShapeRestore | undefined
  /**
   * What the restore did, once promoted: the shapes it brought back and how
   * many stored metas it decoded whole (the rest were read from their indexed
   * layout, restore-shapes.ts).
   */
  restoreStats: { readonly shapes: number; readonly decodedMetas: number } | undefined
  private closed = false

  private constructor(
    private readonly options: ShapeManagerOptions,
    registry: ShapeRegistry,
  ) {
    super()
    this.registry = registry
    this.maxShapes = options.maxShapes ?? DEFAULT_MAX_SHAPES
    this.viewBudget = new ViewBudget(options.maxSubqueryViewEntries ?? DEFAULT_MAX_SUBQUERY_VIEW_ENTRIES)
    this.lifecycle = new ShapeLifecycle(
      {
        shapes: this.shapes,
        invalidate: (handle, reason) => this.invalidateHandles([handle], reason),
        pruneDefinitions: () => this.tables.prune((definition) => this.registry.lookup(definition) !== undefined),
        closed: () => this.closed,
        onSweepError: (error) => options.logger?.error({ err: error }, 'expiring unused shapes failed'),
      },
      { ttlMs: options.shapeTtlMs ?? DEFAULT_SHAPE_TTL_MS, maxShapes: this.maxShapes, clock: options.clock ?? (() => performance.now()) },
    )
    this.tables = new TableCache(options.db, options.publication, options.tableCacheMs ?? DEFAULT_TABLE_CACHE_MS)
    this.queues = new QueueBudget(options.memoryBudgetBytes ?? DEFAULT_MEMORY_BUDGET_BYTES, options.onPressure, (error) =>
      options.logger?.error({ err: error }, 'spilling a snapshot queue failed'),
    )
    this.builder = new ShapeBuilder({
      store: options.store,
      router: options.router,
      snapshotPool: options.snapshotPool,
      spillDir: options.spillDir,
      semaphore: new SnapshotSemaphore(options.snapshotConnections ?? DEFAULT_SNAPSHOT_CONNECTIONS),
      queues: this.queues,
      closed: () => this.closed,
    })
    this.watch = new CatalogWatch({
      db: options.db,
      intervalMs: options.catalogCheckMs ?? DEFAULT_CATALOG_CHECK_MS,
      tables: () => [...this.byTable.keys()],
      invalidate: (info, reason) => this.invalidateHandles(this.handlesFor(info), reason),
      onError: (error) => options.logger?.warn({ err: error }, 'checking the catalog for DDL failed'),
    })
    const manager = this
    this.restoring = new ShapeRestore({
      store: options.store,
      registry,
      router: options.router,
      shapes: this.shapes,
      logger: options.logger,
      add: (shape) => manager.add(shape),
      drop: (shape) => manager.drop(shape),
      // Interned as requests' answers are, so a request finds its restored shape's table by identity.
      loadTable: async (schema, name) => {
        const info = await loadTable(options.db, { schema, name })
        return info === undefined ? undefined : manager.tables.adopt(info)
      },
    })
  }

  /**
   * Rebuilds the registry from the store's logs and routes every shape that
   * still matches its table. Call before replication starts, so no transaction
   * passes a restored shape by.
   */
  static async open(options: ShapeManagerOptions): Promise<ShapeManager> {
    const began = performance.now()
    const manager = await ShapeManager.prepare(options)
    // Nothing changed the store's logs since the prepare's sync (nothing else runs yet): no second pass over every shape.
    await manager.finishRestore({ since: began }, false)
    return manager
  }

  /**
   * The first half of `open`, for a standby whose store is prepared and not
   * promoted yet (`FileLogStore.prepare`): restores and routes the shapes of
   * its logs, writing nothing. `sync` follows the store's logs while the
   * standby waits; `promote` finishes once the store is promoted.
   */
  static async prepare(options: ShapeManagerOptions): Promise<ShapeManager> {
    await loadWhereParser()
    // The floor at the clock: every handle an earlier process issued is 'expired' unless restored (ShapeRegistry.status).
    const manager = new ShapeManager(options, new ShapeRegistry({ floor: systemMicrosClock() }))
    await manager.sync()
    return manager
  }

  /**
   * A prepared manager's: restores the shapes of the store's logs that have
   * none, and forgets those whose log went or was replaced (after the store's
   * `refresh`, and by `promote`).
   */
  async sync(): Promise<void> {
    if (this.restoring === undefined) throw new Error('the shape manager is promoted: nothing to sync')
    await this.restoring.sync()
  }

  /**
   * Finishes the restore once the store takes writes (for a standby, after
   * `FileLogStore.promote`): syncs with the store's logs as they are now,
   * deletes the logs that were not restored, and starts the catalog watch and
   * expiry. `recheckTables`: look at the catalog again first (a standby's
   * tables were loaded while it waited).
   */
  promote(options: { recheckTables?: boolean; since?: number } = {}): Promise<void> {
    return this.finishRestore(options, true)
  }

  private async finishRestore(options: { recheckTables?: boolean; since?: number }, resync: boolean): Promise<void> {
    const began = options.since ?? performance.now()
    const restore = this.restoring
    if (restore === undefined) throw new Error('the shape manager is promoted already')
    if (resync) await restore.sync()
    // Handles its predecessor issued while this one waited are below the clock now.
    this.registry.raiseFloor(systemMicrosClock())
    for (const { log, dropped } of restore.finish()) {
      if (dropped === undefined) await this.options.store.deleteShape(log.id)
      else await this.dropRestored(dropped.handle, log.id, dropped.definition, dropped.why)
    }
    this.restoring = undefined
    if (options.recheckTables === true) {
      await this.watch.check().catch((error: unknown) => this.options.logger?.warn({ err: error }, 'checking the catalog for DDL failed'))
    }
    // `ms`: the whole restore for an open, the promotion alone for a standby (it restored while it waited).
    this.restoreStats = { shapes: this.shapes.size, decodedMetas: restore.decoded }
    this.options.logger?.info({ ...this.restoreStats, ms: Math.round(performance.now() - began) }, 'shapes restored')
    this.watch.start()
    this.lifecycle.start()
  }

  /**
   * Says which shapes live requests wait on (the HTTP layer's waiters): those
   * never expire, and are evicted only when every other ready shape is gone.
   */
  setInUse(inUse: (handle: string) => boolean): void {
    this.lifecycle.setInUse(inUse)
  }

  /** Whether live requests wait on the shape (as `setInUse` was told). */
  waitedOn(handle: string): boolean {
    return this.lifecycle.waitedOn(handle)
  }

  /** Expires the shapes unused for the TTL now, rather than at the next sweep; resolves when they are gone. */
  sweep(): Promise<void> {
    return this.lifecycle.sweep()
  }

  get size(): number {
    return this.shapes.size
  }

  stats(): ShapeManagerStats {
    let creating = 0
    for (const shape of this.shapes.values()) if (shape.log === undefined) creating++
    return { shapes: this.shapes.size, creating, ...this.queues.stats(), expired: this.lifecycle.expired, evicted: this.lifecycle.evicted, subqueryViewEntries: this.viewBudget.used }
  }

  /** Handles of every shape, ready or not. */
  handles(): string[] {
    return [...this.shapes.keys()]
  }

  /**
   * The shape for a request's definition: the existing one, or a new one whose
   * snapshot starts in the background (await `ready(handle)` for it). Throws
   * `ShapeError` or `WhereClauseError` for a request that cannot be a shape.
   */
  async resolve(params: ShapeDefinitionParams, gate?: CreationGate, client?: string): Promise<ResolvedShape> {
    if (this.closed) throw new ShapeError('shutting_down')
    let info = await this.loadTable(params.table.schema, params.table.name)
    let { definition, where } = await this.tables.compiled(info, params)
    const existing = this.registry.lookup(definition)
    if (existing !== undefined) {
      const shape = this.shapes.get(existing)
      if (shape !== undefined && (shape.table === info || this.stillFollows(shape.table, info))) {
        shape.lastUsed = this.lifecycle.stamp()
        return { handle: existing, definition, where: shape.where, table: shape.table, created: false }
      }
      // Made for a table of the same name that is gone, or for another key or other columns: stale.
      if (shape !== undefined) await this.invalidateStale(info)
    }
    if (this.shapes.size >= this.maxShapes && gate?.evict === false) throw new ShapeError('too_many_shapes', `at most ${this.maxShapes} shapes`)
    // May wait for a creation slot: whatever changed meanwhile is looked at again below (registerEntry).
    const release = gate === undefined ? undefined : await gate.admit(client)
    if (this.closed) {
      release?.()
      throw new ShapeError('shutting_down')
    }
    try {
      const published = await this.publish(info)
      if (published !== info) {
        // Publishing set REPLICA IDENTITY FULL: the shape is made for the table as it is now.
        info = published
        ;({ definition, where } = await this.tables.compiled(info, params))
      }
      // Room is made last, after every await but the evictions': a shape another request created meanwhile evicts nothing.
      while (this.registry.lookup(definition) === undefined && this.shapes.size >= this.maxShapes) {
        if (gate?.evict === false) throw new ShapeError('too_many_shapes', `at most ${this.maxShapes} shapes`)
        await this.lifecycle.evictOne()
      }
    } catch (error) {
      release?.()
      throw error
    }
    const inner = where?.subqueries === undefined ? undefined : await this.innerTables(where)
    if (inner !== undefined && !this.viewBudget.fits(1)) {
      release?.()
      throw viewsFull(this.viewBudget)
    }
    const { handle, created } = this.registry.registerEntry(definition)
    if (!created) {
      // Another request created it while this one awaited.
      const shape = this.shapes.get(handle)
      if (shape !== undefined) {
        release?.()
        shape.lastUsed = this.lifecycle.stamp()
        return { handle, definition, where: shape.where, table: shape.table, created: false }
      }
    }
    this.create(handle, definition, where, info, release, inner)
    return { handle, definition, where, table: info, created: true }
  }

  /** Resolves with the shape's log once its snapshot is published; rejects with `ShapeError` if it never will be. */
  ready(handle: string): Promise<ShapeLog> {
    const shape = this.shapes.get(handle)
    if (shape === undefined) return Promise.reject(new ShapeError('shape_invalidated', `shape ${handle} does not exist`))
    return shape.ready ?? Promise.resolve(shape.log!)
  }

  /** Shapes whose log is ready (what compaction looks at). */
  *readyShapes(): Iterable<LiveShape> {
    for (const shape of this.shapes.values()) if (shape.log !== undefined && shape.cancelled === undefined) yield shape
  }

  /** The shape of `handle`, if its log is ready (what compaction checks after a flush). */
  readyShape(handle: string): LiveShape | undefined {
    const shape = this.shapes.get(handle)
    return shape !== undefined && shape.log !== undefined && shape.cancelled === undefined ? shape : undefined
  }

  /** Whether `shape` is still the shape of its handle, serving `log`. */
  holds(shape: LiveShape, log: ShapeLog): boolean {
    return this.shapes.get(shape.handle) === shape && shape.cancelled === undefined && shape.log === log
  }

  /** The shape's published log, if it is ready. */
  log(handle: string): ShapeLog | undefined {
    return this.shapes.get(handle)?.log
  }

  definition(handle: string): ShapeDefinition | undefined {
    return this.shapes.get(handle)?.definition
  }

  /** The shape's compiled where clause (a subquery shape's subqueries and positions are on it). */
  where(handle: string): WhereClause | undefined {
    return this.shapes.get(handle)?.where
  }

  table(handle: string): TableInfo | undefined {
    return this.shapes.get(handle)?.table
  }

  /** 'active' (ready or creating), 'expired' (invalidated) or 'unknown'. */
  status(handle: string): 'active' | 'expired' | 'unknown' {
    return this.registry.status(handle)
  }

  /** The active handle for a definition, if any (without creating one). */
  lookup(definition: ShapeDefinition): string | undefined {
    return this.registry.lookup(definition)
  }

  /** Deletes a shape on request (the HTTP DELETE). */
  async delete(handle: string): Promise<boolean> {
    if (!this.shapes.has(handle)) return false
    this.options.router.remove(handle)
    await this.invalidateHandles([handle], { kind: 'deleted', detail: 'deleted on request' })
    return true
  }

  /** A failed flush rolled the store back (it is replayed from its durable watermark): subquery shapes cannot follow it back (`SubqueryShape.storeRolledBack`). */
  storeRolledBack(): void {
    for (const shape of this.shapes.values()) shape.subquery?.storeRolledBack()
  }

  /** The router's invalidation callback: those shapes no longer follow their table. */
  async invalidateHandles(
    handles: readonly string[],
    reason: Invalidation | ShapeRemoval,
  ): Promise<void> {
    for (const routed of handles) {
      // An inner-table member of a subquery shape (its table truncated or changed) takes its shape with it.
      const handle = this.memberOf.get(routed) ?? routed
      const shape = this.shapes.get(handle)
      this.options.router.remove(handle)
      if (shape !== undefined) this.removeMembers(shape)
      // Retired for being unused, its table is as it was: the catalog answer, compiled clauses and publication stand.
      if (shape !== undefined && reason.kind !== 'expired' && reason.kind !== 'evicted') this.tables.forget(shape.table)
      const definition = this.registry.invalidate(handle)
      // Retired for good: status() still answers 'expired' for it by the handle floor, with nothing kept per handle.
      this.registry.forget(handle)
      if (shape === undefined || definition === undefined) continue
      this.lifecycle.noteRetired()
      this.drop(shape)
      shape.cancelled = reason
      shape.abort?.abort(new ShapeError('shape_invalidated', reason.detail))
      if (shape.log !== undefined) {
        // Durable before the transaction that caused it is promised to the store: a crash replays it instead.
        await this.options.store.deleteShape(shape.log.id)
        // A log a compaction replaced and still keeps: restore must not find it.
        if (shape.retiring !== undefined) await this.options.store.deleteShape(shape.retiring.id)
      }
      this.options.logger?.info({ handle, reason: reason.kind, detail: reason.detail }, 'shape invalidated')
      this.emit('invalidated', { handle, definition, reason })
    }
  }

  async close(): Promise<void> {
    this.closed = true
    await this.lifecycle.stop()
    await this.watch.stop()
    for (const shape of this.shapes.values()) {
      if (shape.log === undefined) shape.abort?.abort(new ShapeError('shutting_down'))
    }
    await Promise.allSettled([...this.shapes.values()].flatMap((s) => (s.ready === undefined ? [] : [s.ready])))
    await this.queues.disposeAll()
  }

  /** Registers a new shape and starts building it; `ready` settles when the build does. */
  private create(
    handle: string,
    definition: ShapeDefinition,
    where: WhereClause | undefined,
    table: TableInfo,
    release: (() => void) | undefined,
    inner?: ReadonlyMap<string, TableInfo>,
  ): void {
    let resolveReady!: (log: ShapeLog) => void
    let rejectReady!: (error: Error) => void
    const ready = new Promise<ShapeLog>((resolve, reject) => {
      resolveReady = resolve
      rejectReady = reject
    })
    // A creation nobody awaits must not become an unhandled rejection.
    ready.catch(() => {})
    const shape: LiveShape = {
      handle,
      definition,
      where,
      table,
      ready,
      log: undefined,
      cancelled: undefined,
      abort: new AbortController(),
      queue: undefined,
      lastUsed: this.lifecycle.stamp(),
    }
    if (inner !== undefined && where !== undefined) {
      shape.subquery = new SubqueryShape({
        handle,
        table,
        where,
        columns: definition.columns,
        replica: definition.replica,
        tables: (schema, name) => inner.get(`${schema}\u0000${name}`)!,
        router: this.options.router,
        pool: this.options.moveInPool ?? this.options.snapshotPool,
        definition,
        budget: this.viewBudget,
        maxHeld: {
          transactions: this.options.subqueryHeld?.transactions ?? DEFAULT_SUBQUERY_MAX_HELD_TRANSACTIONS,
          changes: this.options.subqueryHeld?.changes ?? DEFAULT_SUBQUERY_MAX_HELD_CHANGES,
        },
        invalidate: (detail) =>
          void this.invalidateHandles([handle], { kind: 'unroutable_change', schema: table.schema, table: table.name, detail }).catch((error: unknown) =>
            this.options.logger?.error({ err: error, handle }, 'invalidating a subquery shape failed'),
          ),
      })
      for (const member of shape.subquery.memberHandles()) this.memberOf.set(member, handle)
    }
    this.add(shape)
    const building = this.builder.build(shape)
    if (release !== undefined) building.then(release, release)
    building.then(
      (log) => {
        shape.log = log
        shape.abort = undefined
        resolveReady(log)
        this.options.logger?.info({ handle, table: `${table.schema}.${table.name}` }, 'shape ready')
        this.emit('ready', handle)
      },
      async (error: unknown) => {
        this.options.router.remove(handle)
        this.removeMembers(shape)
        if (this.shapes.get(handle) === shape) {
          this.drop(shape)
          this.registry.invalidate(handle)
        }
        this.registry.forget(handle)
        const cause = creationError(shape, error)
        // Only a snapshot that failed may have failed for want of its table (not an invalidation or a shutdown).
        const failure = cause instanceof ShapeError && cause.code === 'snapshot_failed' ? await this.unlessTableGone(table, cause) : cause
        this.options.logger?.warn({ handle, err: failure }, 'shape creation failed')
        rejectReady(failure)
      },
    )
  }

  /**
   * The table, or `table_not_found`; a table that is gone takes its shapes with
   * it. `fresh`: not from the cache.
   */
  private async loadTable(schema: string, name: string, fresh = false): Promise<TableInfo> {
    const info = fresh ? await this.tables.reload(schema, name) : await this.tables.load(schema, name)
    if (info !== undefined) return info
    const stale = [...this.shapes.values()].filter((s) => s.table.schema === schema && s.table.name === name)
    if (stale.length > 0) {
      await this.invalidateHandles(
        stale.map((s) => s.handle),
        { kind: 'table_dropped', schema, table: name, detail: `${schema}.${name} was dropped` },
      )
    }
    throw tableNotFound(schema, name)
  }

  /** Whether a shape made for `made` can go on serving requests for the table the catalog now describes as `now`. */
  private stillFollows(made: TableInfo, now: TableInfo): boolean {
    return made.oid === now.oid && catalogChanged(made, tableStateOf(now)) === undefined
  }

  /** Invalidates the shapes made for an older version of this table than `now`, or for a table of its name that is gone. */
  private async invalidateStale(now: TableInfo): Promise<void> {
    const state = tableStateOf(now)
    for (const info of [...this.byTable.keys()]) {
      if (info === now) continue
      let reason: Invalidation | undefined
      if (info.oid === now.oid) reason = catalogChanged(info, state)
      else if (info.schema === now.schema && info.name === now.name) {
        reason = { kind: 'table_replaced', schema: now.schema, table: now.name, detail: `${now.schema}.${now.name} was dropped and created again` }
      }
      if (reason !== undefined) await this.invalidateHandles(this.handlesFor(info), reason)
    }
  }

  /**
   * A failure while creating a shape, unless the table is gone (dropped or
   * renamed meanwhile: Postgres then fails the ALTER or the snapshot in one of
   * several ways), which is `table_not_found`, the request's fault, not the
   * server's.
   */
  private async unlessTableGone<E>(info: TableInfo, error: E): Promise<E | ShapeError> {
    if (this.closed) return error
    const now = await loadTableStates(this.options.db, [info.oid]).then(
      (states) => states.get(info.oid),
      () => null,
    )
    if (now === null) return error
    if (now !== undefined && now.schema === info.schema && now.name === info.name) return error
    return tableNotFound(info.schema, info.name, error)
  }

  private add(shape: LiveShape): void {
    this.shapes.set(shape.handle, shape)
    // Its table, then (the catalog watch checks them too) a subquery shape's inner tables. No array per
    // shape: a restart adds 100k.
    this.fileUnder(shape.table, shape.handle)
    if (shape.subquery !== undefined) for (const table of shape.subquery.innerTables.values()) this.fileUnder(table, shape.handle)
  }

  private fileUnder(table: TableInfo, handle: string): void {
    const handles = this.byTable.get(table)
    if (handles === undefined) this.byTable.set(table, new Set([handle]))
    else handles.add(handle)
  }

  private drop(shape: LiveShape): void {
    this.shapes.delete(shape.handle)
    this.unfile(shape.table, shape.handle)
    if (shape.subquery !== undefined) for (const table of shape.subquery.innerTables.values()) this.unfile(table, shape.handle)
  }

  private unfile(table: TableInfo, handle: string): void {
    const handles = this.byTable.get(table)
    if (handles !== undefined && handles.delete(handle) && handles.size === 0) this.byTable.delete(table)
  }

  private removeMembers(shape: LiveShape): void {
    shape.subquery?.dispose()
    for (const member of shape.subquery?.memberHandles() ?? []) {
      this.options.router.remove(member)
      this.memberOf.delete(member)
    }
  }

  /**
   * Adds the table to the publication; the table as it is afterwards (reloaded
   * when publishing set REPLICA IDENTITY FULL, else the same object).
   */
  private async publish(info: TableInfo): Promise<TableInfo> {
    try {
      await this.tables.addToPublication(info)
    } catch (error) {
      throw await this.unlessTableGone(info, error)
    }
    return info.replicaIdentity === 'full' ? info : this.loadTable(info.schema, info.name, true)
  }

  /**
   * The tables a clause's subqueries read, at any depth, published (REPLICA
   * IDENTITY FULL, so both rows of an update are known) and loaded as they are
   * after that, by `schema\0name`.
   */
  private async innerTables(where: WhereClause): Promise<Map<string, TableInfo>> {
    const tables = new Map<string, TableInfo>()
    const visit = async (plan: NonNullable<WhereClause['subqueries']>): Promise<void> => {
      for (const dep of plan.dependencies) {
        const key = `${dep.schema}\u0000${dep.table}`
        if (!tables.has(key)) {
          tables.set(key, await this.publish(await this.loadTable(dep.schema, dep.table)))
        }
        if (dep.where?.subqueries !== undefined) await visit(dep.where.subqueries)
      }
    }
    await visit(where.subqueries!)
    return tables
  }

  private handlesFor(info: TableInfo): string[] {
    return [...(this.byTable.get(info) ?? [])]
  }

  /** A stored shape that no longer matches its table (retired from the registry by the restore). */
  private async dropRestored(handle: string, logId: string, definition: ShapeDefinition, why: string): Promise<void> {
    this.options.logger?.warn({ handle, why }, 'restored shape no longer matches its table; deleting it')
    await this.options.store.deleteShape(logId)
    this.emit('invalidated', { handle, definition, reason: { kind: 'deleted', detail: why } })
  }
}

function tableNotFound(schema: string, name: string, cause?: unknown): ShapeError {
  return new ShapeError('table_not_found', `table ${JSON.stringify(schema)}.${JSON.stringify(name)} does not exist`, cause === undefined ? undefined : { cause })
}
