import type { ShapeLog, ShapeLogStore } from '@sluice/storage'
import { generationOfLogId } from './compaction/log-ids.js'
import type { ShapeDefinition, ShapeMeta, ShapeRegistry, TableSignature } from './definition/index.js'
import type { LiveShape } from './live-shape.js'
import { routeSpec } from './live-shape.js'
import { IndexedShape, RestoreRoutes, type Revival, type StoredShape, readStoredShapes, restoreProblem, revive, reviveIndexed } from './restore-shapes.js'
import { RouteReader, indexShapeMeta } from './definition/shape-meta.js'
import type { ShapeRouter } from './router.js'
import type { ShapeLogger } from './shape-manager-contracts.js'
import type { TableInfo } from './table-catalog.js'

function tableKey(schema: string, table: string): string {
  return `${schema}\u0000${table}`
}

/** The shapes of one table text (`MetaIndex.table`): its names and signature, decoded once, and the restore's verdict on the table. */
interface TableGroup {
  readonly schema: string
  readonly table: string
  readonly signature: TableSignature | undefined
  info: TableInfo | undefined
  /** Why the table's shapes cannot come back; undefined (with `info` set) when they can. */
  problem: string | undefined
}

/** What a restore needs of the shape manager. */
export interface RestoreHost {
  readonly store: ShapeLogStore
  readonly registry: ShapeRegistry
  readonly router: ShapeRouter
  readonly shapes: ReadonlyMap<string, LiveShape>
  readonly logger: ShapeLogger | undefined
  add(shape: LiveShape): void
  drop(shape: LiveShape): void
  /** The table as the catalog describes it now, interned as requests' answers are; undefined when it is gone. */
  loadTable(schema: string, name: string): Promise<TableInfo | undefined>
}

/** A stored shape that is not restored: its log is deleted once the store takes writes. */
export interface Leftover {
  readonly log: ShapeLog
  /** A shape that no longer matches its table: its handle, definition and why (told as an invalidation). */
  readonly dropped?: { readonly handle: string; readonly definition: ShapeDefinition; readonly why: string }
}

/**
 * Restore on start: the shapes a previous process left in the store come
 * back, routed, if their table is still the one they were made for.
 *
 * In two steps, so a standby can do the first while another process writes
 * (its store prepared, `FileLogStore.prepare`): `sync` restores the shapes of
 * every log in the store that has none yet and forgets those whose log went
 * or was replaced (the store kept the objects of logs that stayed), writing
 * nothing; it runs again whenever the store's logs change. `leftovers` are
 * then the logs to delete once the store takes writes: unreadable metas, a
 * generation a compaction replaced, the older of two shapes of one
 * definition, shapes whose table changed.
 */
export class ShapeRestore {
  /** Per schema and table name, the table as loaded once by this restore. */
  private readonly tables = new Map<string, TableInfo | undefined>()
  private readonly routes = new RestoreRoutes()
  private readonly left = new Map<ShapeLog, Leftover>()
  /** Per table text of indexed metas (`MetaIndex.table`), its table and verdict. */
  private readonly groups = new Map<string, TableGroup>()
  /** Handles of restored shapes routed through a stitching target (the store's watermark was below their snapshot's insert). */
  private readonly stitching = new Map<string, StoredShape>()
  /** The store's watermark the targets were chosen by. */
  private durableLsn = 0n
  /** Shapes restored so far (net of those forgotten). */
  restored = 0
  /**
   * Counts the stored metas decoded whole (the others were read from their
   * indexed layout alone). An object of its own: every restored shape's
   * definition source holds it, and must not hold this restore.
   */
  private readonly decodes = { decoded: 0 }

  constructor(private readonly host: RestoreHost) {}

  /** Stored metas this restore decoded whole so far. */
  get decoded(): number {
    return this.decodes.decoded
  }

  /** Brings the restored shapes to the store's logs now; writes nothing. */
  async sync(): Promise<void> {
    const { store, shapes } = this.host
    this.durableLsn = store.durableLsn
    const known = new Set<ShapeLog>()
    for (const shape of [...shapes.values()]) {
      const log = shape.log
      if (log === undefined) continue
      if (store.get(log.id) === log) known.add(log)
      else this.forget(shape)
    }
    for (const log of [...this.left.keys()]) {
      if (store.get(log.id) === log) known.add(log)
      else this.left.delete(log)
    }
    const fresh: ShapeLog[] = []
    for (const log of store.finishedLogs()) if (!known.has(log)) fresh.push(log)
    if (fresh.length > 0) await this.restore(fresh)
  }

  private async restore(logs: readonly ShapeLog[]): Promise<void> {
    const { registry, shapes } = this.host
    // Metas in the indexed layout are read from slices (restore-shapes.ts IndexedShape); the rest are decoded.
    let indexed: IndexedShape[] = []
    const decode: ShapeLog[] = []
    for (const log of logs) {
      const text = log.metaText
      const index = text === undefined || shapes.has(log.id) ? undefined : indexShapeMeta(text, log.id)
      if (index === undefined) decode.push(log)
      else indexed.push(new IndexedShape(log, text!, index, this.decodes))
    }
    // One decoded meta per table text stands for every shape of that text (a meta that fails to decode goes the other way).
    indexed = indexed.filter((shape) => {
      if (this.groups.has(shape.index.table)) return true
      try {
        const { definition, table } = shape.meta
        this.groups.set(shape.index.table, { schema: definition.schema, table: definition.table, signature: table, info: undefined, problem: undefined })
        return true
      } catch {
        decode.push(shape.log)
        return false
      }
    })
    let { stored, broken } = readStoredShapes(decode, this.host.logger)
    // A compacted log of an indexed shape's handle (a crash between the two): both are decoded, and the newer generation kept.
    const compacted = new Set<string>()
    for (const shape of stored) if (shape.meta.handle !== shape.log.id) compacted.add(shape.meta.handle)
    if (compacted.size > 0 && indexed.some((shape) => compacted.has(shape.handle))) {
      for (const shape of indexed) if (compacted.has(shape.handle)) decode.push(shape.log)
      indexed = indexed.filter((shape) => !compacted.has(shape.handle))
      ;({ stored, broken } = readStoredShapes(decode, this.host.logger))
    }
    this.decodes.decoded += decode.length
    for (const log of broken) this.left.set(log, { log })
    const more: StoredShape[] = []
    for (const shape of stored) {
      const before = shapes.get(shape.meta.handle)
      if (before?.log !== undefined) {
        // Two generations of one handle: a compaction's new log came while the old one was restored.
        if (generationOfLogId(before.log.id) > generationOfLogId(shape.log.id)) {
          this.left.set(shape.log, { log: shape.log })
          continue
        }
        this.forget(before)
        this.left.set(before.log, { log: before.log })
      }
      more.push(shape)
    }
    // Every table first, each loaded once and awaited once (not a suspension per shape). A failed
    // query fails the sync before anything is registered: taken for a table that is gone, it would
    // delete every shape of the table.
    let previous: ShapeDefinition | undefined
    for (const { meta } of more) {
      const def = meta.definition
      if (previous !== undefined && def.schema === previous.schema && def.table === previous.table) continue
      previous = def
      await this.loadTable(def.schema, def.table)
    }
    for (const group of this.groups.values()) {
      if (group.info !== undefined || group.problem !== undefined) continue
      group.info = await this.loadTable(group.schema, group.table)
      group.problem = restoreProblem(group.info, group.signature)
    }
    const expiredBefore = registry.expiredDuringRestore.length
    registry.restoreMore(more.map((s) => s.meta))
    registry.restoreIndexed(indexed.map((shape) => ({ handle: shape.handle, key: shape.index.key, source: shape.stored })))
    // A crash between a new shape and its predecessor's expiry left both: the older goes.
    for (const handle of registry.expiredDuringRestore.slice(expiredBefore)) {
      const shape = shapes.get(handle)
      if (shape?.log === undefined) continue
      this.forget(shape)
      this.left.set(shape.log, { log: shape.log })
    }
    // Not active: expired in its meta, or by this restore (a newer shape of its definition). No lookup per shape.
    const expiredNow = new Set(registry.expiredDuringRestore.slice(expiredBefore))
    let lastDef: ShapeDefinition | undefined
    let table: TableInfo | undefined
    for (const shape of more) {
      const { meta, log } = shape
      if (meta.expired || expiredNow.has(meta.handle)) {
        this.left.set(log, { log })
        continue
      }
      const def = meta.definition
      // The same table as the shape before (the usual case): no key string per shape.
      if (lastDef === undefined || def.schema !== lastDef.schema || def.table !== lastDef.table) table = this.tables.get(tableKey(def.schema, def.table))
      lastDef = def
      this.settle(shape, revive(shape, table, this.durableLsn, this.routes))
    }
    const durable = this.durableLsn.toString()
    const reader = new RouteReader()
    for (const shape of indexed) {
      const { log } = shape
      if (expiredNow.has(shape.handle)) {
        this.left.set(log, { log })
        continue
      }
      const group = this.groups.get(shape.index.table)!
      const revived = group.problem === undefined ? reviveIndexed(shape, group.info!, group.signature !== undefined, durable, this.routes, reader) : undefined
      if (revived !== undefined) {
        this.host.add(revived.shape)
        this.host.router.add(revived.spec, log)
        this.restored++
        continue
      }
      let meta: ShapeMeta
      try {
        meta = shape.meta
      } catch (error) {
        this.host.logger?.error({ handle: log.id, err: error }, 'shape meta unreadable; deleting the shape')
        this.host.registry.invalidate(shape.handle)
        this.host.registry.forget(shape.handle)
        this.left.set(log, { log })
        continue
      }
      this.settle({ meta, log }, group.problem === undefined ? revive({ meta, log }, group.info, this.durableLsn, this.routes) : { problem: group.problem })
    }
  }

  /** The table of this name as the catalog describes it now, loaded once by this restore. */
  private async loadTable(schema: string, name: string): Promise<TableInfo | undefined> {
    const key = tableKey(schema, name)
    if (!this.tables.has(key)) this.tables.set(key, await this.host.loadTable(schema, name))
    return this.tables.get(key)
  }

  /** A stored shape revived (routed and counted) or not (its log left to delete, the shape told as dropped). */
  private settle(shape: StoredShape, revived: Revival): void {
    const { meta, log } = shape
    const { registry, router } = this.host
    if (revived.problem !== undefined) {
      registry.invalidate(meta.handle)
      registry.forget(meta.handle)
      this.left.set(log, { log, dropped: { handle: meta.handle, definition: meta.definition, why: revived.problem } })
      return
    }
    this.host.add(revived.shape)
    router.add(routeSpec(revived.shape), revived.target)
    if (revived.target !== log) this.stitching.set(meta.handle, shape)
    this.restored++
  }

  /**
   * Once the store takes writes (its watermark now the replayed one): shapes
   * routed through a stitching target whose snapshot the watermark has since
   * passed are routed to their log, as a restore now would. Returns the logs
   * to delete.
   */
  finish(): Leftover[] {
    const { store, router, shapes } = this.host
    for (const [handle, stored] of this.stitching) {
      const shape = shapes.get(handle)
      if (shape?.log !== stored.log || stored.meta.stitch === undefined || store.durableLsn < stored.meta.stitch.insertLsn) continue
      router.remove(handle)
      router.add(routeSpec(shape), stored.log)
    }
    this.stitching.clear()
    const left = [...this.left.values()].filter((l) => store.get(l.log.id) === l.log)
    this.left.clear()
    return left
  }

  /** A restored shape whose log went: out of the router, the manager and the registry. */
  private forget(shape: LiveShape): void {
    this.host.router.remove(shape.handle)
    this.host.drop(shape)
    this.host.registry.invalidate(shape.handle)
    this.host.registry.forget(shape.handle)
    this.stitching.delete(shape.handle)
    this.restored--
  }
}
