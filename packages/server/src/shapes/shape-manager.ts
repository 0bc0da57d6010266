import { EventEmitter } from 'node:events'
import type { ShapeDefinitionParams } from '@sluice/protocol'
import type { AppendOptions, ShapeLog, ShapeLogStore, SnapshotWriter } from '@sluice/storage'
import type pg from 'pg'
import { DEFAULT_MAX_SHAPES, DEFAULT_MEMORY_BUDGET_BYTES, DEFAULT_SNAPSHOT_CONNECTIONS, DEFAULT_TABLE_CACHE_MS } from '../defaults.js'
import { type PublicationManager, type Queryable, type SpillDir, SpillQueue } from '../replication/index.js'
import { type WhereClause, compileWhereSync, loadWhereParser } from '../where/index.js'
import {
  type CompiledDefinition,
  type ShapeDefinition,
  ShapeRegistry,
  type SnapshotStitch,
  type TableSignature,
  compileDefinition,
  decodeShapeMeta,
  encodeShapeMeta,
  paramList,
} from './definition/index.js'
import { type Invalidation, MORE_PARTS, type ShapeTarget, type TransactionPart } from './route-contracts.js'
import type { ShapeRouter } from './router.js'
import { ShapeError } from './shape-error.js'
import { SnapshotSemaphore } from './snapshot-semaphore.js'
import { type PgSnapshot, encodeSnapshotEnd, isVisibleInSnapshot, runSnapshot } from './snapshot/index.js'
import { renumberParams } from './snapshot/renumber-params.js'
import { type TableInfo, loadTable, loadTableByOid, whereColumns } from './table-catalog.js'
import { transactionPartCodec } from './transaction-part-codec.js'

/**
 * Shapes from request to live log (DESIGN.md §2, issue 3 items 5, 8, 9, 10).
 *
 * Creating a shape:
 *   1. the table is loaded from the catalog, the definition compiled and
 *      normalised; an equal definition already registered answers at once;
 *   2. the table joins the publication (REPLICA IDENTITY FULL);
 *   3. the shape joins the router with a queue as its target: from here on it
 *      misses no transaction;
 *   4. the snapshot runs (REPEATABLE READ, rows' JSON built in SQL) into a new
 *      log, bounded by a semaphore of snapshot connections;
 *   5. `finish(snapshot-end)` is called and the queue drained into the
 *      finishing log, then the router appends to it directly; transactions the
 *      snapshot already saw are dropped (stitching, see `StitchingTarget`);
 *   6. the log is durable and published once `finish` resolves.
 * A crash at any point before 6 leaves no shape: nothing was acknowledged for
 * it, and a later request simply creates it again.
 *
 * Invalidation (TRUNCATE, DDL, a replaced table, DELETE, a replication slot
 * found ahead of the store at start) retires the handle for good and deletes
 * the log; clients holding the handle get 409 from the HTTP
 * layer and start over with a new one.
 *
 * Memory: queues of shapes waiting for their snapshot are the only routed data
 * kept in memory. Past `memoryBudgetBytes` in total the largest spill to disk;
 * while spilling cannot keep up, the replication stream is paused
 * (`onPressure`) and resumed below half the budget.
 */

export interface ShapeManagerOptions {
  readonly store: ShapeLogStore
  readonly router: ShapeRouter
  /** Catalog and publication queries. */
  readonly db: Queryable
  /** Connections for snapshots; `snapshotConnections` of them are used at once. */
  readonly snapshotPool: pg.Pool
  readonly snapshotConnections?: number
  readonly publication: PublicationManager
  /** Scratch space for queues that spill, opened (and so wiped) once by the caller. */
  readonly spillDir: SpillDir
  readonly memoryBudgetBytes?: number
  /** Called with true when replication must pause for memory, false when it may resume. */
  readonly onPressure?: (paused: boolean) => void
  readonly maxShapes?: number
  /** How long a finished catalog lookup is reused (0: only lookups in flight are shared). Default DEFAULT_TABLE_CACHE_MS. */
  readonly tableCacheMs?: number
  readonly logger?: ShapeLogger
}

export interface ShapeLogger {
  info(data: object, message: string): void
  warn(data: object, message: string): void
  error(data: object, message: string): void
}

export interface ResolvedShape {
  readonly handle: string
  readonly definition: ShapeDefinition
  readonly where: WhereClause | undefined
  readonly table: TableInfo
  /** This call created it. */
  readonly created: boolean
}

/** A shape retired by something other than a replicated transaction. */
export interface ShapeRemoval {
  /**
   * 'deleted': on request, or restored but no longer matching its table;
   * 'replication_gap': restored, but the slot had moved past the store's
   * watermark, so its log misses changes (see Pipeline.start).
   */
  readonly kind: 'deleted' | 'replication_gap'
  readonly detail: string
}

export interface ShapeInvalidated {
  readonly handle: string
  readonly definition: ShapeDefinition
  readonly reason: Invalidation | ShapeRemoval
}

export interface ShapeManagerEvents {
  /** A shape's log exists and is live. */
  ready: [handle: string]
  invalidated: [ShapeInvalidated]
}

/** Point-in-time figures for logs, metrics and tests. */
export interface ShapeManagerStats {
  readonly shapes: number
  /** Shapes whose initial snapshot has not finished. */
  readonly creating: number
  /** Bytes of routed transactions held in memory for shapes still creating. */
  readonly queuedBytes: number
  /** Queues of creating shapes that moved to disk. */
  readonly spilledQueues: number
  /** Times the replication stream was paused for memory, and whether it is now. */
  readonly pauses: number
  readonly paused: boolean
}

/** Attempts at a snapshot that raced a commit (see RegistrationTicket) before giving up. */
const MAX_SNAPSHOT_ATTEMPTS = 5
const DRAIN_BATCH = 512

interface LiveShape {
  readonly handle: string
  readonly definition: ShapeDefinition
  readonly where: WhereClause | undefined
  readonly table: TableInfo
  /** Resolves with the log once the snapshot is finished and published. */
  readonly ready: Promise<ShapeLog>
  log: ShapeLog | undefined
  /** Set when invalidated while the snapshot runs: the creation stops and cleans up. */
  cancelled: Invalidation | ShapeRemoval | undefined
  /** Only while the shape is being created (an idle controller costs ~300 bytes per shape). */
  abort: AbortController | undefined
  queue: SpillQueue<TransactionPart> | undefined
}

/** Compiled request definitions remembered per table version. */
const MAX_COMPILED_PER_TABLE = 10_000

export class ShapeManager extends EventEmitter<ShapeManagerEvents> {
  private readonly registry: ShapeRegistry
  private readonly shapes = new Map<string, LiveShape>()
  private readonly semaphore: SnapshotSemaphore
  private readonly budget: number
  private readonly maxShapes: number
  private readonly tableAdds = new Map<string, Promise<unknown>>()
  /**
   * Catalog lookups in flight, shared by the requests that arrive meanwhile, so
   * a burst of requests for one table costs one catalog query. With
   * `tableCacheMs` answers are also reused for that long after they arrive
   * (kept short: a table dropped and created again within that window is
   * still answered with its old shapes).
   */
  private readonly tableCache = new Map<string, { at: number; done: boolean; info: Promise<TableInfo | undefined> }>()
  private readonly tableCacheMs: number
  private readonly tableVersions = new Map<number, { readonly text: string; readonly info: TableInfo }>()
  private readonly compiledDefinitions = new WeakMap<TableInfo, Map<string, CompiledDefinition>>()
  /** Tables known to be in the publication with REPLICA IDENTITY FULL. */
  private readonly published = new Set<number>()
  private readonly queues = new Set<SpillQueue<TransactionPart>>()
  private paused = false
  private pauses = 0
  private spilledQueues = 0
  private closed = false

  private constructor(
    private readonly options: ShapeManagerOptions,
    registry: ShapeRegistry,
  ) {
    super()
    this.registry = registry
    this.semaphore = new SnapshotSemaphore(options.snapshotConnections ?? DEFAULT_SNAPSHOT_CONNECTIONS)
    this.budget = options.memoryBudgetBytes ?? DEFAULT_MEMORY_BUDGET_BYTES
    this.maxShapes = options.maxShapes ?? DEFAULT_MAX_SHAPES
    this.tableCacheMs = options.tableCacheMs ?? DEFAULT_TABLE_CACHE_MS
  }

  /**
   * Rebuilds the registry from the store's logs and routes every shape that
   * still matches its table. Call before replication starts, so no transaction
   * passes a restored shape by.
   */
  static async open(options: ShapeManagerOptions): Promise<ShapeManager> {
    await loadWhereParser()
    const metas = []
    const broken: string[] = []
    for (const id of options.store.ids()) {
      const log = options.store.get(id)
      if (log === undefined) continue
      try {
        metas.push({ meta: decodeShapeMeta(log.meta), log })
      } catch (error) {
        options.logger?.error({ handle: id, err: error }, 'shape meta unreadable; deleting the shape')
        broken.push(id)
      }
    }
    const registry = ShapeRegistry.restore(metas.map((m) => m.meta))
    const manager = new ShapeManager(options, registry)
    for (const id of [...broken, ...registry.expiredDuringRestore]) await options.store.deleteShape(id)

    const tables = new Map<string, Promise<TableInfo | undefined>>()
    for (const { meta, log } of metas) {
      if (registry.status(meta.handle) !== 'active') continue
      const def = meta.definition
      const key = `${def.schema}\u0000${def.table}`
      let table = tables.get(key)
      if (table === undefined) {
        table = loadTable(options.db, { schema: def.schema, name: def.table }).catch(() => undefined)
        tables.set(key, table)
      }
      const info = await table
      const problem = restoreProblem(info, meta.table)
      let where: WhereClause | undefined
      if (problem === undefined && info !== undefined) {
        try {
          where = def.where === undefined ? undefined : compileWhereSync(def.where, { columns: whereColumns(info), params: paramList(def) })
        } catch (error) {
          await manager.dropRestored(meta.handle, def, `its where clause no longer compiles: ${String(error)}`)
          continue
        }
        const shape: LiveShape = {
          handle: meta.handle,
          definition: def,
          where,
          table: info,
          ready: Promise.resolve(log),
          log,
          cancelled: undefined,
          abort: undefined,
          queue: undefined,
        }
        manager.shapes.set(meta.handle, shape)
        options.router.add(routeSpec(shape), restoredTarget(log, meta.stitch, options.store.durableLsn))
      } else {
        await manager.dropRestored(meta.handle, def, problem ?? 'its table is gone')
      }
    }
    options.logger?.info({ shapes: manager.shapes.size }, 'shapes restored')
    return manager
  }

  get size(): number {
    return this.shapes.size
  }

  stats(): ShapeManagerStats {
    let queuedBytes = 0
    for (const queue of this.queues) queuedBytes += queue.memoryBytes
    let creating = 0
    for (const shape of this.shapes.values()) if (shape.log === undefined) creating++
    return { shapes: this.shapes.size, creating, queuedBytes, spilledQueues: this.spilledQueues, pauses: this.pauses, paused: this.paused }
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
  async resolve(params: ShapeDefinitionParams): Promise<ResolvedShape> {
    if (this.closed) throw new ShapeError('shutting_down')
    const info = await this.loadTable(params.table.schema, params.table.name)
    const { definition, where } = await this.compiled(info, params)
    const existing = this.registry.lookup(definition)
    if (existing !== undefined) {
      const shape = this.shapes.get(existing)
      if (shape !== undefined && shape.table.oid === info.oid) {
        return { handle: existing, definition, where: shape.where, table: shape.table, created: false }
      }
      // Registered for a table of the same name that is gone: that shape is stale.
      if (shape !== undefined) {
        await this.invalidateHandles([existing], {
          kind: 'table_replaced',
          schema: info.schema,
          table: info.name,
          detail: `${info.schema}.${info.name} was dropped and created again`,
        })
      }
    }
    if (this.shapes.size >= this.maxShapes) throw new ShapeError('too_many_shapes', `at most ${this.maxShapes} shapes`)
    await this.addToPublication(info)
    const { handle, created } = this.registry.registerEntry(definition)
    if (!created) {
      // Another request created it while this one awaited.
      const shape = this.shapes.get(handle)
      if (shape !== undefined) return { handle, definition, where: shape.where, table: shape.table, created: false }
    }
    this.create(handle, definition, where, info)
    return { handle, definition, where, table: info, created: true }
  }

  /**
   * The request's definition and where clause compiled against this version of
   * the table, remembered per version (TableInfo objects are interned, see
   * internTable): a client following a shape sends the same parameters on
   * every request, and parsing its where clause each time cost more than
   * serving the response.
   */
  private async compiled(info: TableInfo, params: ShapeDefinitionParams): Promise<CompiledDefinition> {
    const key = JSON.stringify([params.where ?? null, params.params, params.columns ?? null, params.queryableColumns ?? null, params.replica, params.log])
    let known = this.compiledDefinitions.get(info)
    const hit = known?.get(key)
    if (hit !== undefined) return hit
    const result = await compileDefinition(params, whereColumns(info))
    checkColumns(info, result.definition.columns)
    if (known === undefined) {
      known = new Map()
      this.compiledDefinitions.set(info, known)
    }
    // Bounded: hostile clients can send endless distinct clauses.
    if (known.size >= MAX_COMPILED_PER_TABLE) known.clear()
    known.set(key, result)
    return result
  }

  /** Resolves with the shape's log once its snapshot is published; rejects with `ShapeError` if it never will be. */
  ready(handle: string): Promise<ShapeLog> {
    const shape = this.shapes.get(handle)
    if (shape === undefined) return Promise.reject(new ShapeError('shape_invalidated', `shape ${handle} does not exist`))
    return shape.ready
  }

  /** The shape's published log, if it is ready. */
  log(handle: string): ShapeLog | undefined {
    return this.shapes.get(handle)?.log
  }

  definition(handle: string): ShapeDefinition | undefined {
    return this.shapes.get(handle)?.definition
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

  /** The router's invalidation callback: those shapes no longer follow their table. */
  async invalidateHandles(
    handles: readonly string[],
    reason: Invalidation | ShapeRemoval,
  ): Promise<void> {
    for (const handle of handles) {
      const shape = this.shapes.get(handle)
      this.options.router.remove(handle)
      if (shape !== undefined) this.forgetTable(shape.table)
      const definition = this.registry.invalidate(handle)
      if (shape === undefined || definition === undefined) continue
      this.shapes.delete(handle)
      shape.cancelled = reason
      shape.abort?.abort(new ShapeError('shape_invalidated', reason.detail))
      if (shape.log !== undefined) {
        // Durable before the transaction that caused it is promised to the store: a crash replays it instead.
        await this.options.store.deleteShape(handle)
      }
      this.options.logger?.info({ handle, reason: reason.kind, detail: reason.detail }, 'shape invalidated')
      this.emit('invalidated', { handle, definition, reason })
    }
  }

  async close(): Promise<void> {
    this.closed = true
    for (const shape of this.shapes.values()) {
      if (shape.log === undefined) shape.abort?.abort(new ShapeError('shutting_down'))
    }
    await Promise.allSettled([...this.shapes.values()].map((s) => s.ready))
    for (const queue of this.queues) await queue.dispose().catch(() => {})
  }

  // ---- creation ----

  private create(handle: string, definition: ShapeDefinition, where: WhereClause | undefined, table: TableInfo): void {
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
    }
    this.shapes.set(handle, shape)
    this.build(shape).then(
      (log) => {
        shape.log = log
        shape.abort = undefined
        resolveReady(log)
        this.options.logger?.info({ handle, table: `${table.schema}.${table.name}` }, 'shape ready')
        this.emit('ready', handle)
      },
      async (error: unknown) => {
        const failure = creationError(shape, error)
        this.options.router.remove(handle)
        if (this.shapes.get(handle) === shape) {
          this.shapes.delete(handle)
          this.registry.invalidate(handle)
        }
        this.registry.forget(handle)
        this.options.logger?.warn({ handle, err: failure }, 'shape creation failed')
        rejectReady(failure)
      },
    )
  }

  private async build(shape: LiveShape): Promise<ShapeLog> {
    const signal = shape.abort!.signal
    const release = await this.semaphore.acquire(signal)
    let writer: SnapshotWriter | undefined
    let finishing: Promise<ShapeLog> | undefined
    const queue = new SpillQueue<TransactionPart>(this.options.spillDir, shape.handle, transactionPartCodec)
    shape.queue = queue
    this.queues.add(queue)
    try {
      const stitch = new StitchingTarget(new QueueTarget(queue, () => this.checkMemory()))
      const ticket = await this.options.router.register(routeSpec(shape), stitch)
      let taken: Awaited<ReturnType<typeof runSnapshot>> | undefined
      for (let attempt = 1; taken === undefined; attempt++) {
        this.throwIfCancelled(shape)
        let w: SnapshotWriter | undefined
        const result = await runSnapshot(
          this.options.snapshotPool,
          {
            table: shape.table,
            // log=changes_only: no rows, but the same snapshot, so snapshot-end and the stitching still hold.
            ...(shape.definition.log === 'changes_only'
              ? { where: 'false', params: [] }
              : denseWhere(shape.definition)),
            columns: shape.definition.columns,
            signal,
          },
          {
            // The log is made once the snapshot is fixed, so its meta records it: a restored shape keeps stitching.
            start: (info) => {
              const stitch = { snapshot: info.snapshot, insertLsn: info.insertLsn }
              const meta = encodeShapeMeta(shape.definition, shape.handle, { table: signatureOf(shape.table), stitch })
              w = this.options.store.createShape(shape.handle, { meta })
              writer = w
            },
            rows: (lines: readonly Uint8Array[]) => w!.append(lines),
          },
        )
        const raced = ticket.recentXids.find((xid) => !isVisibleInSnapshot(result.snapshot, xid))
        if (raced === undefined) {
          taken = result
          break
        }
        await w!.abort()
        writer = undefined
        if (attempt >= MAX_SNAPSHOT_ATTEMPTS) {
          throw new ShapeError('snapshot_failed', `the snapshot kept missing transaction ${raced}, which had already been replicated`)
        }
      }
      this.throwIfCancelled(shape)
      const w = writer!
      w.endSnapshot(encodeSnapshotEnd(taken.snapshot))
      stitch.setSnapshot(taken.snapshot, taken.insertLsn)
      // Drain what queued while the snapshot ran, in order (a spilled queue comes back from disk in batches,
      // across flushes: the store cannot rename the log before finish() below). The last check, the switch
      // and finish() happen in one tick, so nothing slips between.
      for (;;) {
        const parts = await queue.shift(DRAIN_BATCH)
        for (const part of parts) stitch.deliver(w, part)
        if (queue.length === 0) {
          stitch.goLive(w)
          finishing = w.finish()
          break
        }
      }
      this.dropQueue(shape, queue)
      const log = await finishing
      finishing = undefined
      stitch.goLive(log)
      if (shape.cancelled !== undefined || this.closed) {
        // Invalidated while finishing: the log came into being after invalidateHandles looked for it.
        await this.options.store.deleteShape(shape.handle).catch(() => {})
        this.throwIfCancelled(shape)
      }
      return log
    } catch (error) {
      if (finishing !== undefined) {
        // Too late to abort: let the log appear, then remove it.
        await finishing.then(
          () => this.options.store.deleteShape(shape.handle),
          () => undefined,
        ).catch(() => {})
      } else if (writer !== undefined) {
        await writer.abort().catch(() => {})
      }
      this.dropQueue(shape, queue)
      throw error
    } finally {
      release()
      this.checkMemory()
    }
  }

  private dropQueue(shape: LiveShape, queue: SpillQueue<TransactionPart>): void {
    if (!this.queues.delete(queue)) return
    shape.queue = undefined
    void queue.dispose().catch(() => {})
  }

  private throwIfCancelled(shape: LiveShape): void {
    if (shape.cancelled !== undefined) throw new ShapeError('shape_invalidated', shape.cancelled.detail)
    if (this.closed) throw new ShapeError('shutting_down')
  }

  // ---- tables ----

  private async loadTable(schema: string, name: string): Promise<TableInfo> {
    const key = tableKey(schema, name)
    const now = Date.now()
    let cached = this.tableCache.get(key)
    if (cached === undefined || (cached.done && now - cached.at >= this.tableCacheMs)) {
      const entry = { at: now, done: false, info: loadTable(this.options.db, { schema, name }) }
      cached = entry
      this.tableCache.set(key, entry)
      entry.info.then(
        () => {
          entry.done = true
          if (this.tableCacheMs <= 0 && this.tableCache.get(key) === entry) this.tableCache.delete(key)
        },
        // A failed load is not worth remembering.
        () => this.tableCache.get(key) === entry && this.tableCache.delete(key),
      )
    }
    const loaded = await cached.info
    const info = loaded === undefined ? undefined : this.internTable(loaded)
    if (info === undefined) {
      this.tableCache.delete(key)
      // A table that is gone takes its shapes with it.
      const stale = [...this.shapes.values()].filter((s) => s.table.schema === schema && s.table.name === name)
      if (stale.length > 0) {
        await this.invalidateHandles(
          stale.map((s) => s.handle),
          { kind: 'table_replaced', schema, table: name, detail: `${schema}.${name} was dropped` },
        )
      }
      throw new ShapeError('table_not_found', `table ${JSON.stringify(schema)}.${JSON.stringify(name)} does not exist`)
    }
    return info
  }

  /**
   * One TableInfo object per table version, shared by all its shapes: each
   * catalog answer is a fresh object graph (and pg's row objects give each
   * answer hidden classes of its own), which would cost every shape about a
   * kilobyte. Any difference in what was loaded makes a new version.
   */
  private internTable(info: TableInfo): TableInfo {
    const text = JSON.stringify(info)
    const known = this.tableVersions.get(info.oid)
    if (known !== undefined && known.text === text) return known.info
    this.tableVersions.set(info.oid, { text, info })
    return info
  }

  /** Adds the table to the publication once per table at a time (concurrent creations share the call). */
  private async addToPublication(info: TableInfo): Promise<void> {
    if (this.published.has(info.oid)) return
    const key = String(info.oid)
    const pending = this.tableAdds.get(key) ?? this.options.publication.addTable(info.schema, info.name).finally(() => this.tableAdds.delete(key))
    this.tableAdds.set(key, pending)
    await pending
    this.published.add(info.oid)
  }

  /** After a table's shapes were invalidated (DDL, TRUNCATE, a replaced table): ask the catalog again next time. */
  private forgetTable(info: TableInfo): void {
    this.tableCache.delete(tableKey(info.schema, info.name))
    this.tableVersions.delete(info.oid)
    this.published.delete(info.oid)
  }

  private async dropRestored(handle: string, definition: ShapeDefinition, why: string): Promise<void> {
    this.options.logger?.warn({ handle, why }, 'restored shape no longer matches its table; deleting it')
    this.registry.invalidate(handle)
    await this.options.store.deleteShape(handle)
    this.registry.forget(handle)
    this.emit('invalidated', { handle, definition, reason: { kind: 'deleted', detail: why } })
  }

  // ---- memory ----

  /** Spills the largest queues while over budget; pauses replication while spilling lags. */
  private checkMemory(): void {
    let total = 0
    for (const queue of this.queues) total += queue.memoryBytes
    if (total > this.budget) {
      const largest = [...this.queues].filter((q) => !q.spilled).sort((a, b) => b.memoryBytes - a.memoryBytes)
      let freed = 0
      for (const queue of largest) {
        if (total - freed <= this.budget / 2) break
        freed += queue.memoryBytes
        this.spilledQueues++
        queue.spill().then(
          () => this.checkMemory(),
          (error: unknown) => this.options.logger?.error({ err: error }, 'spilling a snapshot queue failed'),
        )
      }
    }
    if (!this.paused && total > this.budget) {
      this.paused = true
      this.pauses++
      this.options.onPressure?.(true)
    } else if (this.paused && total <= this.budget / 2) {
      this.paused = false
      this.options.onPressure?.(false)
    }
  }
}

function tableKey(schema: string, name: string): string {
  return `${schema}\u0000${name}`
}

function routeSpec(shape: LiveShape) {
  return {
    handle: shape.handle,
    table: shape.table,
    where: shape.where,
    columns: shape.definition.columns,
    replica: shape.definition.replica,
  }
}

function signatureOf(info: TableInfo): TableSignature {
  return { oid: info.oid, columns: info.columns.map((c) => [c.name, c.typeOid, c.typeMod] as const) }
}

function restoreProblem(info: TableInfo | undefined, stored: TableSignature | undefined): string | undefined {
  if (info === undefined) return 'its table is gone'
  if (stored === undefined) return undefined
  if (stored.oid !== info.oid) return 'its table was dropped and created again'
  const now = signatureOf(info).columns
  const same = now.length === stored.columns.length && now.every((c, i) => {
    const s = stored.columns[i]
    return s !== undefined && s[0] === c[0] && s[1] === c[1] && s[2] === c[2]
  })
  return same ? undefined : "its table's columns changed"
}

function checkColumns(info: TableInfo, columns: readonly string[] | undefined): void {
  if (columns === undefined) return
  const known = new Set(info.columns.map((c) => c.name))
  const unknown = columns.filter((c) => !known.has(c))
  if (unknown.length > 0) {
    throw new ShapeError('invalid_columns', `unknown column${unknown.length > 1 ? 's' : ''}: ${unknown.map((c) => JSON.stringify(c)).join(', ')}`)
  }
  const missing = info.primaryKey.filter((c) => !columns.includes(c))
  if (missing.length > 0) {
    throw new ShapeError('invalid_columns', `the selected columns must include the primary key; missing: ${missing.map((c) => JSON.stringify(c)).join(', ')}`)
  }
}

function creationError(shape: LiveShape, error: unknown): Error {
  if (shape.cancelled !== undefined) return new ShapeError('shape_invalidated', shape.cancelled.detail, { cause: error })
  if (error instanceof ShapeError) return error
  const message = error instanceof Error ? error.message : String(error)
  return new ShapeError('snapshot_failed', `the initial snapshot failed: ${message}`, { cause: error })
}

/**
 * A restored shape's target. Its snapshot may hold transactions above the
 * durable watermark: the snapshot saw them committed before the router reached
 * them, the router dropped them for this shape (stitching), and the process
 * died before the watermark covered them. Postgres sends them again after the
 * restart, so until the stream passes the snapshot's insert LSN the shape keeps
 * dropping the ones its snapshot holds.
 */
function restoredTarget(log: ShapeLog, stitch: SnapshotStitch | undefined, durableLsn: bigint): ShapeTarget {
  if (stitch === undefined || durableLsn >= stitch.insertLsn) return log
  const target = new StitchingTarget(log)
  target.setSnapshot(stitch.snapshot, stitch.insertLsn)
  target.goLive(log)
  return target
}

/**
 * A queue target that, like the storage engine, skips entries at or below the
 * last one it took: after a failed flush the replication stream replays from
 * the durable watermark and the same parts arrive again.
 */
class QueueTarget implements ShapeTarget {
  /** The last entry taken: its transaction and op. */
  private lastTx = -1n
  private lastOp = -1
  constructor(
    private readonly queue: SpillQueue<TransactionPart>,
    private readonly onPush: () => void,
  ) {}

  appendLines(lsn: bigint, ops: readonly number[], jsons: readonly Uint8Array[], count: number, options: AppendOptions | undefined, xid: number): void {
    // Ops increase within a part, so what was taken already is a prefix.
    let from = 0
    if (lsn < this.lastTx) from = count
    else if (lsn === this.lastTx) while (from < count && ops[from]! <= this.lastOp) from++
    if (from === count && count > 0) return
    if (from < count) {
      this.lastTx = lsn
      this.lastOp = ops[count - 1]!
    }
    // The arrays are the router's to reuse once this returns (see ShapeTarget): keep copies.
    const kept = new Array<Uint8Array>(count - from)
    for (let i = from; i < count; i++) kept[i - from] = Buffer.from(jsons[i]!)
    this.queue.push({ lsn, xid, ops: ops.slice(from, count), jsons: kept, count: count - from, more: options?.more === true })
    this.onPush()
  }
}

/**
 * Drops the transactions a snapshot already contains (PROTOCOL.md §9
 * stitching). Until the snapshot is known everything passes to the inner
 * target (the queue). Afterwards a part is dropped when its transaction is
 * visible in the snapshot; a commit at or above the snapshot's WAL insert
 * position cannot be, so only commits below it are looked up. The check is
 * not switched off once the stream has passed that position: after a failed
 * flush the stream is replayed from the durable watermark, and a transaction
 * below it arrives again.
 */
class StitchingTarget implements ShapeTarget {
  private snapshot: PgSnapshot | undefined
  private insertLsn = 0n
  /** Parts go through the filter only once the queue is drained; before that they queue unfiltered, in order. */
  private live = false

  constructor(private inner: ShapeTarget) {}

  setSnapshot(snapshot: PgSnapshot, insertLsn: bigint): void {
    this.snapshot = snapshot
    this.insertLsn = insertLsn
  }

  /** From now on parts go, filtered, straight to `target`. */
  goLive(target: ShapeTarget): void {
    this.inner = target
    this.live = true
  }

  appendLines(lsn: bigint, ops: readonly number[], jsons: readonly Uint8Array[], count: number, options: AppendOptions | undefined, xid: number): void {
    if (this.live && this.inSnapshot(lsn, xid)) return
    this.inner.appendLines(lsn, ops, jsons, count, options, xid)
  }

  /** Sends a queued part to `target` unless the snapshot holds its transaction. */
  deliver(target: ShapeTarget, part: TransactionPart): void {
    if (this.inSnapshot(part.lsn, part.xid)) return
    target.appendLines(part.lsn, part.ops, part.jsons, part.count, part.more ? MORE_PARTS : undefined, part.xid)
  }

  private inSnapshot(lsn: bigint, xid: number): boolean {
    return this.snapshot !== undefined && lsn < this.insertLsn && isVisibleInSnapshot(this.snapshot, xid)
  }
}

/** The shape's where clause with only the parameters it uses, numbered densely (see renumberParams). */
function denseWhere(def: ShapeDefinition): { where: string | undefined; params: string[] } {
  const params: string[] = []
  if (def.where === undefined) return { where: undefined, params }
  return { where: renumberParams(def.where, (n) => def.params[String(n)], params), params }
}
