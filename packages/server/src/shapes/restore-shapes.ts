import type { ReplicaMode } from '@sluice/protocol'
import type { ShapeLog } from '@sluice/storage'
import { type ClauseText, type IndexableConjunct, RestoredClause, type RouteSummary, type WhereClause, type WhereLimits, compileWhereSync, sameRoute } from '../where/index.js'
import { type ShapeDefinition, type ShapeMeta, type TableSignature, decodeShapeMeta, paramList } from './definition/index.js'
import { type MetaIndex, type RouteReader } from './definition/shape-meta.js'
import type { LiveShape } from './live-shape.js'
import type { RouteSpec, ShapeTarget } from './route-contracts.js'
import { signatureOf } from './shape-builder.js'
import type { ShapeLogger } from './shape-manager.js'
import { restoredTarget } from './shape-targets.js'
import { generationOfLogId } from './compaction/log-ids.js'
import { type TableInfo, whereColumns } from './table-catalog.js'

/*
 * Restore on start: the shapes a previous process left in the store come back
 * if their table is still the one they were made for.
 */

/** A shape's log in the store and what its meta says. */
export interface StoredShape {
  readonly meta: ShapeMeta
  readonly log: ShapeLog
}

/**
 * The shapes of these logs; `broken` lists the logs to delete: those whose
 * meta cannot be read, and logs a compaction replaced (a crash came between
 * the compacted log's rename and the old one's deletion: the newer generation
 * of a handle is the shape's log, compaction/log-ids.ts).
 *
 * A log stored under its shape's handle (never compacted: nearly every log
 * after a restart) is the only one of that id, so only the others are kept in
 * a map by handle: a restart of 100k shapes builds no map of them all.
 */
export function readStoredShapes(logs: Iterable<ShapeLog>, logger: ShapeLogger | undefined): { stored: StoredShape[]; broken: ShapeLog[] } {
  const underHandle: StoredShape[] = []
  /** Shapes whose log id is not their handle (compacted ones), by handle: the newest generation of each. */
  const others = new Map<string, StoredShape>()
  const broken: ShapeLog[] = []
  /** Of two logs of one handle, the later generation stays (on a tie, `later`) and the other is deleted. */
  const settle = (earlier: StoredShape, later: StoredShape): StoredShape => {
    const [keep, drop] = generationOfLogId(earlier.log.id) > generationOfLogId(later.log.id) ? [earlier, later] : [later, earlier]
    logger?.info({ handle: keep.meta.handle, kept: keep.log.id, deleted: drop.log.id }, 'a compacted shape log replaced this one; deleting it')
    broken.push(drop.log)
    return keep
  }
  for (const log of logs) {
    const id = log.id
    let meta: ShapeMeta
    try {
      // The text form where the log keeps one: a restart decodes every meta.
      meta = decodeShapeMeta(log.metaText ?? log.meta, id)
    } catch (error) {
      logger?.error({ handle: id, err: error }, 'shape meta unreadable; deleting the shape')
      broken.push(log)
      continue
    }
    const shape = { meta, log }
    if (meta.handle === id) {
      underHandle.push(shape)
      continue
    }
    const other = others.get(meta.handle)
    others.set(meta.handle, other === undefined ? shape : settle(other, shape))
  }
  if (others.size === 0) return { stored: underHandle, broken }
  const stored: StoredShape[] = []
  for (const shape of underHandle) {
    const other = others.get(shape.meta.handle)
    if (other === undefined) stored.push(shape)
    else others.set(shape.meta.handle, settle(other, shape))
  }
  for (const shape of others.values()) stored.push(shape)
  return { stored, broken }
}

/** A stored shape back to life with the router target it needs, or why it cannot come back. */
export type Revival = { readonly shape: LiveShape; readonly target: ShapeTarget; readonly problem?: undefined } | { readonly problem: string }

/**
 * A stored clause is its canonical text, which can be longer than the clause a
 * client sent (quoted names, a parenthesis per comparison): the length limit
 * was checked on that, so it is not checked again here, where failing would
 * drop the shape at every restart.
 */
const STORED_CLAUSE_LIMITS: Partial<WhereLimits> = { maxLength: Number.MAX_SAFE_INTEGER }

/**
 * For one restore: per table and key domain, the compiled conjunct of the
 * first shape restored there when it agreed with that shape's recorded route
 * (the other shapes of the domain take their row keys from it and are not
 * compiled), or null when it did not (every shape of the domain is compiled).
 */
export class RestoreRoutes {
  readonly #byTable = new Map<TableInfo, Map<string, IndexableConjunct | null>>()

  /** The stored shape's clause: restored from its route when its domain is trusted, else compiled (throws if it does not compile). */
  clause(meta: ShapeMeta, info: TableInfo): WhereClause {
    const def = meta.definition
    const text = { source: def.where!, params: paramList(def) }
    const route = meta.route
    // Without the table's signature restore did not check the table against the one the route was made for.
    if (route === undefined || meta.table === undefined) return compileWhereSync(text.source, { columns: whereColumns(info), params: text.params, limits: STORED_CLAUSE_LIMITS })
    return this.routed(route, text, info)
  }

  /** A clause with a recorded route, on a table checked against the one the route was made for: `text` is read only if it compiles. */
  routed(route: RouteSummary, text: ClauseText, info: TableInfo): WhereClause {
    const columns = whereColumns(info)
    let domains = this.#byTable.get(info)
    if (domains === undefined) this.#byTable.set(info, (domains = new Map()))
    const known = domains.get(route.domain)
    if (known === undefined) {
      const clause = compileWhereSync(text.source, { columns, params: text.params, limits: STORED_CLAUSE_LIMITS })
      domains.set(route.domain, sameRoute(route, clause.exact) ? clause.exact! : null)
      return clause
    }
    if (known === null) return compileWhereSync(text.source, { columns, params: text.params, limits: STORED_CLAUSE_LIMITS })
    return new RestoredClause(text, route, known, columns)
  }
}

/**
 * A stored shape whose meta is in the indexed layout (`indexShapeMeta`): the
 * restore reads its table, key and route from slices of the text, and the
 * meta is decoded whole only when something asks for the definition (a
 * request, a clause that compiles). A restart of 100k such shapes decodes one
 * meta per table. Only `stored` outlives the restore.
 */
export class IndexedShape {
  readonly stored: StoredDefinition

  constructor(
    log: ShapeLog,
    text: string,
    readonly index: MetaIndex,
    counter: { decoded: number },
  ) {
    this.stored = new StoredDefinition(log, text, counter)
  }

  get log(): ShapeLog {
    return this.stored.log
  }

  get handle(): string {
    return this.stored.log.id
  }

  /** The whole meta, decoded on first use (throws ShapeMetaError if it does not decode). */
  get meta(): ShapeMeta {
    return this.stored.meta
  }
}

/** A restored shape's definition and clause text, from its stored meta decoded on first use. */
export class StoredDefinition implements ClauseText {
  #meta: ShapeMeta | undefined

  constructor(
    readonly log: ShapeLog,
    private readonly text: string,
    /** Counts the metas decoded (the restore's figure). */
    private readonly counter: { decoded: number },
  ) {}

  get meta(): ShapeMeta {
    if (this.#meta === undefined) {
      this.counter.decoded++
      this.#meta = decodeShapeMeta(this.text, this.log.id)
    }
    return this.#meta
  }

  get definition(): ShapeDefinition {
    return this.meta.definition
  }

  get source(): string {
    return this.meta.definition.where!
  }

  get params(): readonly string[] {
    return paramList(this.meta.definition)
  }
}

/** A restored shape with its definition from its stored meta, decoded when first read. */
class IndexedLiveShape implements LiveShape {
  ready: Promise<ShapeLog> | undefined = undefined
  retiring: ShapeLog | undefined = undefined
  cancelled: LiveShape['cancelled'] = undefined
  abort: AbortController | undefined = undefined
  queue: LiveShape['queue'] = undefined
  // Restored counts as used now: a restart gives every shape a full time-to-live.
  lastUsed = 0
  subquery: LiveShape['subquery'] = undefined

  constructor(
    readonly handle: string,
    readonly table: TableInfo,
    readonly where: WhereClause,
    public log: ShapeLog | undefined,
    private readonly stored: StoredDefinition,
  ) {}

  get definition(): ShapeDefinition {
    return this.stored.definition
  }
}

/** How a definition key ends when it selects every column, per replica mode. */
const ALL_COLUMNS_ENDINGS: ReadonlyArray<readonly [string, ReplicaMode]> = (['default', 'full'] as const).flatMap((replica) =>
  (['full', 'changes_only'] as const).map((log) => [`,null,"${replica}","${log}"]`, replica] as const),
)

/** The replica mode a definition key ends with, when it selects every column; undefined otherwise. */
function keySelection(key: string): ReplicaMode | undefined {
  for (const [ending, replica] of ALL_COLUMNS_ENDINGS) if (key.endsWith(ending)) return replica
  return undefined
}

/** Whether the decimal `lsn` is at most `durable` (decimal too, both without leading zeros). */
function atOrBelow(lsn: string, durable: string): boolean {
  return lsn.length < durable.length || (lsn.length === durable.length && lsn <= durable)
}

/**
 * An indexed shape back to life without decoding its meta, on a table whose
 * check its table text already passed (`signed`: that text carried the
 * table's signature); undefined when it needs what `revive` does (a
 * stitching target, a route that does not parse, a selection of columns, a
 * clause that compiles and fails), which decodes it.
 */
export function reviveIndexed(
  stored: IndexedShape,
  info: TableInfo,
  signed: boolean,
  durableLsn: string,
  routes: RestoreRoutes,
  reader: RouteReader,
): { readonly shape: LiveShape; readonly spec: RouteSpec } | undefined {
  const { index, log } = stored
  if (!signed || !atOrBelow(index.insertLsn, durableLsn)) return undefined
  const replica = keySelection(index.key)
  const route = replica === undefined ? undefined : reader.read(index.route)
  if (route === undefined || replica === undefined) return undefined
  let where: WhereClause
  try {
    where = routes.routed(route, stored.stored, info)
  } catch {
    return undefined
  }
  const handle = log.id
  const shape = new IndexedLiveShape(handle, info, where, log, stored.stored)
  return { shape, spec: { handle, table: info, where, columns: undefined, replica } }
}

/** Checks a stored shape against its table as the catalog describes it now (`info`, undefined when it is gone). */
export function revive(stored: StoredShape, info: TableInfo | undefined, durableLsn: bigint, routes: RestoreRoutes): Revival {
  const { meta, log } = stored
  const def = meta.definition
  const problem = restoreProblem(info, meta.table)
  if (problem !== undefined || info === undefined) return { problem: problem ?? 'its table is gone' }
  if (def.where !== undefined && def.where.includes(' IN (SELECT ')) {
    // Canonical texts print every subquery as `IN (SELECT `; a string literal holding it only costs a re-creation.
    return { problem: 'a shape with subqueries is not restored: the result sets of its subqueries are kept in memory only, so its log cannot be continued exactly' }
  }
  let where
  try {
    where = def.where === undefined ? undefined : routes.clause(meta, info)
  } catch (error) {
    return { problem: `its where clause no longer compiles: ${String(error)}` }
  }
  const shape: LiveShape = {
    handle: meta.handle,
    definition: def,
    where,
    table: info,
    ready: undefined,
    log,
    cancelled: undefined,
    abort: undefined,
    queue: undefined,
    // Restored counts as used now: a restart gives every shape a full time-to-live.
    lastUsed: 0,
  }
  return { shape, target: restoredTarget(log, meta.stitch, durableLsn) }
}

/** Why a stored shape made for the table `stored` describes cannot follow the table as the catalog describes it now (`info`); undefined when it can. */
export function restoreProblem(info: TableInfo | undefined, stored: TableSignature | undefined): string | undefined {
  if (info === undefined) return 'its table is gone'
  if (stored === undefined) return undefined
  if (stored.oid !== info.oid) return 'its table was dropped and created again'
  const now = publishedColumns(info)
  const same = now.length === stored.columns.length && now.every((c, i) => {
    const s = stored.columns[i]
    return s !== undefined && s[0] === c[0] && s[1] === c[1] && s[2] === c[2]
  })
  if (!same) return "its table's columns changed"
  if (stored.primaryKey !== undefined && stored.primaryKey.join('\u0000') !== info.primaryKey.join('\u0000')) return "its table's primary key changed"
  if (stored.replicaIdentity !== undefined && stored.replicaIdentity !== info.replicaIdentity) return "its table's replica identity changed"
  return undefined
}

/**
 * The table's columns as a signature lists them, once per table description
 * (a restart checks every stored shape of a table against the same one).
 */
const columnsOfInfo = new WeakMap<TableInfo, TableSignature['columns']>()

function publishedColumns(info: TableInfo): TableSignature['columns'] {
  let columns = columnsOfInfo.get(info)
  if (columns === undefined) {
    columns = signatureOf(info).columns
    columnsOfInfo.set(info, columns)
  }
  return columns
}
