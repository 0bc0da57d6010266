import { LOG_MODES, REPLICA_MODES } from '@sluice/protocol'
import type { LogMode, ReplicaMode } from '@sluice/protocol'
import { type PgSnapshot, formatPgSnapshot, parsePgSnapshot } from '../snapshot/pg-snapshot.js'
import { ServerError } from '../../errors.js'
import { ROUTE_SUMMARY_VERSION, type RouteSummary, interned } from '../../where/index.js'
import { isValidHandle } from './handle.js'
import { NO_PARAMS, type ShapeDefinition, hasKeys, uncachedDefinitionKey } from './shape-definition.js'

/**
 * A shape's definition as stored in the storage engine's per-shape meta bytes,
 * read back on restart to rebuild the registry.
 *
 * Format: UTF-8 JSON of one object. A decoder takes the fields in any order;
 * the encoder writes them in the order below, which a restart relies on to
 * read a meta's table, key and route without decoding it (`indexShapeMeta`):
 *
 *   field       type                      meaning
 *   v           number                    format version, SHAPE_META_VERSION (never reuse a number)
 *   handle      string                    the shape's handle (also its storage id)
 *   expired     boolean, optional         true once the shape was invalidated
 *   schema      string                    table schema, as parsed (case kept)
 *   table       string                    table name, as parsed
 *   table_oid   number, optional          the table's oid when the shape was created
 *   table_columns [name, typeOid, typeMod][], optional
 *                                         its published columns then, in order: a table
 *                                         that differs on restart invalidates the shape
 *   table_pk    string[], optional        its primary-key columns then, in key order
 *   table_replident "default" | "nothing" | "full" | "index", optional
 *                                         its replica identity then (both: a change on restart
 *                                         invalidates the shape too; absent in older metas)
 *   key         array, optional           the definition's key (definitionKey) as JSON: what the
 *                                         registry finds the shape by, without the fields below
 *                                         decoded (absent in older metas; ignored by the decoder)
 *   snapshot    string, optional          the initial snapshot, as pg_current_snapshot() prints it
 *   insert_lsn  string, optional          decimal pg_current_wal_insert_lsn() just after it
 *                                         (with `snapshot`: a restored shape keeps dropping the
 *                                         transactions its snapshot holds, see ShapeManager.open)
 *   route       [version, kind, column, domain, keys[]], optional
 *                                         how the router files the where clause, when it is one
 *                                         indexable conjunct (where/route-summary.ts): a restart
 *                                         files the shape without compiling the clause. One of
 *                                         another version, or malformed, is ignored (the clause
 *                                         is compiled instead)
 *   where       string | null             canonical where text, null for none
 *   params      {"<n>": string}           values of the referenced $n
 *   columns     string[] | null           sorted selected columns, null for all
 *   replica     "default" | "full"
 *   log         "full" | "changes_only"
 *
 * JSON rather than a binary layout: it is written once per shape, and the
 * definition is a handful of strings.
 */
export const SHAPE_META_VERSION = 1

export interface ShapeMeta {
  readonly handle: string
  readonly definition: ShapeDefinition
  readonly expired: boolean
  /** The table as the shape's snapshot saw it (absent in metas written before it was recorded). */
  readonly table?: TableSignature
  /** The initial snapshot and the WAL insert position just after it (absent in metas written before they were recorded). */
  readonly stitch?: SnapshotStitch
  /** How the router files the clause, as recorded when the shape was made (absent: compile the clause to know). */
  readonly route?: RouteSummary
}

/** What decides which replicated transactions a shape's snapshot already holds. */
export interface SnapshotStitch {
  readonly snapshot: PgSnapshot
  readonly insertLsn: bigint
}

/** What must stay the same for a shape to keep following its table: the oid, the published columns, the key, the replica identity. */
export interface TableSignature {
  readonly oid: number
  readonly columns: ReadonlyArray<readonly [name: string, typeOid: number, typeMod: number]>
  /** Absent in metas written before it was recorded. */
  readonly primaryKey?: readonly string[]
  readonly replicaIdentity?: string
}

export class ShapeMetaError extends ServerError<'invalid_shape_meta'> {
  override readonly name = 'ShapeMetaError'
  constructor(message: string, options?: { cause?: unknown }) {
    super('invalid_shape_meta', message, options)
  }
}

export function encodeShapeMeta(
  def: ShapeDefinition,
  handle: string,
  options: { expired?: boolean; table?: TableSignature; stitch?: SnapshotStitch; route?: RouteSummary | undefined } = {},
): Uint8Array {
  if (!isValidHandle(handle)) throw new ShapeMetaError(`not a valid handle: ${handle}`)
  // The order is the indexed layout's (`indexShapeMeta`): the table, the key, the stitch and the route first.
  const record: Record<string, unknown> = { v: SHAPE_META_VERSION, handle }
  if (options.expired === true) record['expired'] = true
  record['schema'] = def.schema
  record['table'] = def.table
  if (options.table !== undefined) {
    record['table_oid'] = options.table.oid
    record['table_columns'] = options.table.columns
    if (options.table.primaryKey !== undefined) record['table_pk'] = options.table.primaryKey
    if (options.table.replicaIdentity !== undefined) record['table_replident'] = options.table.replicaIdentity
  }
  record['key'] = JSON.parse(uncachedDefinitionKey(def)) as unknown
  if (options.stitch !== undefined) {
    record['snapshot'] = formatPgSnapshot(options.stitch.snapshot)
    record['insert_lsn'] = options.stitch.insertLsn.toString()
  }
  if (options.route !== undefined) {
    const { kind, column, domain, keys } = options.route
    record['route'] = [ROUTE_SUMMARY_VERSION, kind, column, domain, keys]
  }
  record['where'] = def.where ?? null
  record['params'] = def.params
  record['columns'] = def.columns ?? null
  record['replica'] = def.replica
  record['log'] = def.log
  return new TextEncoder().encode(JSON.stringify(record))
}

/**
 * What a restart reads of a stored meta without decoding it: slices of the
 * text, in the layout `encodeShapeMeta` writes when the shape has a table
 * signature, a snapshot stitch and a route (every shape of one indexable
 * conjunct since they were recorded). `decodeShapeMeta` reads the same text
 * whole, and ignores `key`.
 */
export interface MetaIndex {
  /**
   * From `"schema":` to the end of the table signature: every meta of one
   * table as one snapshot of its catalog saw it has the same text, so a
   * restore checks the table once per text, not once per shape.
   */
  readonly table: string
  /** The definition's key (`definitionKey`), as JSON text. */
  readonly key: string
  /** `insert_lsn`, decimal. */
  readonly insertLsn: string
  /** The route's JSON text (`parseRouteSummary`). */
  readonly route: string
}

const INDEXED_HEAD = `{"v":${SHAPE_META_VERSION},"handle":"`

/**
 * The indexed layout's slices of `text` (one character per byte, as the
 * storage log's `metaText`), or undefined for a meta of another layout (an
 * earlier build's, an expired shape's, a shape with no route), of another
 * handle than `handle` (a compacted log's), or not ASCII: those are decoded
 * whole. Finding a field by its name is sound because a quote inside a JSON
 * string is always escaped, so `,"key":` and the like occur only as members.
 */
export function indexShapeMeta(text: string, handle: string): MetaIndex | undefined {
  const start = INDEXED_HEAD.length + handle.length
  if (!text.startsWith(INDEXED_HEAD) || !text.startsWith(handle, INDEXED_HEAD.length) || !text.startsWith('","schema":', start)) return undefined
  const tableAt = start + 2
  const keyAt = text.indexOf(',"key":', tableAt)
  if (keyAt < 0) return undefined
  const snapshotAt = text.indexOf(',"snapshot":"', keyAt)
  if (snapshotAt < 0) return undefined
  const lsnAt = text.indexOf('","insert_lsn":"', snapshotAt)
  if (lsnAt < 0) return undefined
  const routeAt = text.indexOf('","route":', lsnAt)
  if (routeAt < 0) return undefined
  const whereAt = text.indexOf(',"where":', routeAt)
  if (whereAt < 0) return undefined
  const key = text.slice(keyAt + 7, snapshotAt)
  const route = text.slice(routeAt + 10, whereAt)
  // One character per byte: a key or route of UTF-8 beyond ASCII is not its text (the table's is decoded with the meta that stands for it).
  if (NOT_ASCII.test(key) || NOT_ASCII.test(route)) return undefined
  return { table: text.slice(tableAt, keyAt), key, insertLsn: text.slice(lsnAt + 16, routeAt), route }
}

/** One for every decode: a restart decodes every shape's meta, and making a decoder costs more than using one. */
const utf8 = new TextDecoder('utf-8', { fatal: true })

/**
 * The meta's JSON text, from its bytes or from a string holding one character
 * per byte (the storage log's `metaText`), which for a meta of ASCII alone
 * (the usual case) is the text already: no buffer and no UTF-8 pass per shape
 * when a restart decodes every meta.
 */
function metaJson(meta: Uint8Array | string): string {
  if (typeof meta !== 'string') return utf8.decode(meta)
  return NOT_ASCII.test(meta) ? utf8.decode(Buffer.from(meta, 'latin1')) : meta
}

const NOT_ASCII = /[^\x00-\x7f]/

/**
 * Decodes and validates (`meta` as bytes, or as one character per byte);
 * throws ShapeMetaError on anything malformed or of another version.
 * `handle`: the handle the caller expects (the log's id), kept in place of
 * the decoded copy when they are equal: a restart decodes 100k metas, and
 * each would otherwise hold its handle twice.
 */
export function decodeShapeMeta(bytes: Uint8Array | string, expected?: string): ShapeMeta {
  let raw: unknown
  try {
    raw = JSON.parse(metaJson(bytes))
  } catch (error) {
    throw new ShapeMetaError(`shape meta is not UTF-8 JSON: ${error instanceof Error ? error.message : String(error)}`, { cause: error })
  }
  if (!isRecord(raw)) throw new ShapeMetaError('shape meta is not a JSON object')
  if (raw['v'] !== SHAPE_META_VERSION) {
    throw new ShapeMetaError(`unsupported shape meta version ${JSON.stringify(raw['v'])} (expected ${SHAPE_META_VERSION})`)
  }
  const decoded = raw['handle']
  if (typeof decoded !== 'string' || !isValidHandle(decoded)) throw new ShapeMetaError('shape meta: bad handle')
  const handle = decoded === expected ? expected : decoded
  const expired = raw['expired'] ?? false
  if (typeof expired !== 'boolean') throw new ShapeMetaError('shape meta: bad expired')
  // One string per table name for every shape of it (JSON.parse makes one per meta of any name past ten characters).
  const schema = interned(stringField(raw, 'schema'))
  const table = interned(stringField(raw, 'table'))
  const where = raw['where']
  if (where !== null && typeof where !== 'string') throw new ShapeMetaError('shape meta: bad where')
  const params = raw['params']
  if (!isRecord(params) || !validParams(params)) throw new ShapeMetaError('shape meta: bad params')
  const columns = raw['columns']
  if (columns !== null && !(Array.isArray(columns) && columns.every((c) => typeof c === 'string'))) {
    throw new ShapeMetaError('shape meta: bad columns')
  }
  const replica = raw['replica']
  if (!(REPLICA_MODES as readonly unknown[]).includes(replica)) throw new ShapeMetaError('shape meta: bad replica')
  const log = raw['log']
  if (!(LOG_MODES as readonly unknown[]).includes(log)) throw new ShapeMetaError('shape meta: bad log')
  const signature = tableSignature(raw)
  const stitch = snapshotStitch(raw)
  const route = routeSummary(raw['route'])
  // The parsed params and columns are this meta's own: frozen where they are, not copied (freezeDefinition would copy them).
  const definition: ShapeDefinition = Object.freeze({
    schema,
    table,
    where: where ?? undefined,
    params: hasKeys(params) ? Object.freeze(params as Record<string, string>) : NO_PARAMS,
    columns: columns === null ? undefined : Object.freeze(columns as string[]),
    replica: replica as ReplicaMode,
    log: log as LogMode,
  })
  const meta: { -readonly [K in keyof ShapeMeta]: ShapeMeta[K] } = { handle, expired, definition }
  if (signature !== undefined) meta.table = signature
  if (stitch !== undefined) meta.stitch = stitch
  if (route !== undefined) meta.route = route
  return meta
}

const ROUTE_KINDS: ReadonlySet<unknown> = new Set<RouteSummary['kind']>(['equals', 'any', 'contains'])

/** A route as `MetaIndex.route` holds it, or undefined for another version or a malformed one (the clause is compiled then). */
export function parseRouteSummary(text: string): RouteSummary | undefined {
  try {
    return routeSummary(JSON.parse(text))
  } catch {
    return undefined
  }
}

/**
 * `parseRouteSummary` for the routes of one restore, most of which share
 * their kind, column and domain with the route before (every `id = <n>` of a
 * table) and have one plain key: those are read without a JSON parse, the
 * rest parsed whole.
 */
export class RouteReader {
  /** The last route parsed whole, up to its keys (`[1,"equals","id","<domain>",`), and its parts. */
  private head = ''
  private parts: { kind: RouteSummary['kind']; column: string; domain: string } | undefined

  read(text: string): RouteSummary | undefined {
    const parts = this.parts
    const at = this.head.length
    // (`lastIndexOf` from 0 compares at the start alone, and takes a fraction of `startsWith`'s time for a prefix this long.)
    if (parts !== undefined && text.lastIndexOf(this.head, 0) === 0 && text.startsWith('["', at) && text.endsWith('"]]')) {
      const end = text.length - 3
      const inner = text.indexOf('"', at + 2)
      // One key, with nothing escaped in it: the JSON text is the key.
      if (inner === end && text.indexOf('\\', at + 2) < 0) return { kind: parts.kind, column: parts.column, domain: parts.domain, keys: [text.slice(at + 2, end)] }
    }
    const summary = parseRouteSummary(text)
    if (summary === undefined) return undefined
    // Kept only for a text written as the encoder writes it (JSON.stringify's), so that `head` is exactly what precedes the keys.
    const head = `${JSON.stringify([ROUTE_SUMMARY_VERSION, summary.kind, summary.column, summary.domain]).slice(0, -1)},`
    if (text === `${head}${JSON.stringify(summary.keys)}]`) {
      this.head = head
      this.parts = { kind: summary.kind, column: summary.column, domain: summary.domain }
    }
    return summary
  }
}

/** The recorded route, or undefined for none, another version, or a malformed one (the clause is compiled then). */
function routeSummary(raw: unknown): RouteSummary | undefined {
  if (!Array.isArray(raw) || raw.length !== 5 || raw[0] !== ROUTE_SUMMARY_VERSION) return undefined
  const [, kind, column, domain, keys] = raw as unknown[]
  if (!ROUTE_KINDS.has(kind) || typeof column !== 'string' || typeof domain !== 'string') return undefined
  if (!Array.isArray(keys) || keys.length === 0 || !keys.every((k) => typeof k === 'string')) return undefined
  return Object.freeze({ kind: kind as RouteSummary['kind'], column: interned(column), domain: interned(domain), keys: Object.freeze(keys as string[]) })
}

/** Keys are `$n` numbers without leading zeros, values strings. */
function validParams(params: Record<string, unknown>): boolean {
  for (const key in params) {
    if (!Object.hasOwn(params, key)) continue
    if (typeof params[key] !== 'string' || key.length === 0 || key.charCodeAt(0) < 49 || key.charCodeAt(0) > 57) return false
    for (let i = 1; i < key.length; i++) {
      const c = key.charCodeAt(i)
      if (c < 48 || c > 57) return false
    }
  }
  return true
}

function tableSignature(raw: Record<string, unknown>): TableSignature | undefined {
  const oid = raw['table_oid']
  const columns = raw['table_columns']
  if (oid === undefined && columns === undefined) return undefined
  if (typeof oid !== 'number' || !Number.isInteger(oid) || oid <= 0) throw new ShapeMetaError('shape meta: bad table_oid')
  const valid =
    Array.isArray(columns) &&
    columns.every(
      (c) => Array.isArray(c) && c.length === 3 && typeof c[0] === 'string' && Number.isInteger(c[1]) && Number.isInteger(c[2]),
    )
  if (!valid) throw new ShapeMetaError('shape meta: bad table_columns')
  const pk = raw['table_pk']
  if (pk !== undefined && !(Array.isArray(pk) && pk.every((c) => typeof c === 'string'))) throw new ShapeMetaError('shape meta: bad table_pk')
  const replident = raw['table_replident']
  if (replident !== undefined && typeof replident !== 'string') throw new ShapeMetaError('shape meta: bad table_replident')
  const list = columns as Array<[string, number, number]>
  const primaryKey = pk as string[] | undefined
  const last = lastSignature
  if (last !== undefined && last.oid === oid && last.replicaIdentity === replident && sameList(last.primaryKey, primaryKey) && sameColumns(last.columns, list)) {
    return last
  }
  for (const column of list) Object.freeze(column)
  const signature: TableSignature = Object.freeze({
    oid,
    columns: Object.freeze(list),
    ...(primaryKey === undefined ? {} : { primaryKey: Object.freeze(primaryKey) }),
    ...(replident === undefined ? {} : { replicaIdentity: replident }),
  })
  lastSignature = signature
  return signature
}

/**
 * The last table signature decoded (frozen, so shared): a restart decodes
 * every shape's meta, and the shapes of one table carry the same signature,
 * which would otherwise be kept once per shape until the restore is done.
 */
let lastSignature: TableSignature | undefined

function sameList(a: readonly string[] | undefined, b: readonly string[] | undefined): boolean {
  if (a === undefined || b === undefined) return a === b
  return a.length === b.length && a.every((x, i) => x === b[i])
}

function sameColumns(a: TableSignature['columns'], b: TableSignature['columns']): boolean {
  if (a.length !== b.length) return false
  for (let i = 0; i < a.length; i++) {
    const x = a[i]!
    const y = b[i]!
    if (x[0] !== y[0] || x[1] !== y[1] || x[2] !== y[2]) return false
  }
  return true
}

function snapshotStitch(raw: Record<string, unknown>): SnapshotStitch | undefined {
  const snapshot = raw['snapshot']
  const insertLsn = raw['insert_lsn']
  if (snapshot === undefined && insertLsn === undefined) return undefined
  if (typeof snapshot !== 'string' || typeof insertLsn !== 'string' || !/^[0-9]{1,20}$/.test(insertLsn)) {
    throw new ShapeMetaError('shape meta: bad snapshot or insert_lsn')
  }
  try {
    return { snapshot: snapshotOf(snapshot), insertLsn: BigInt(insertLsn) }
  } catch {
    throw new ShapeMetaError('shape meta: bad snapshot')
  }
}

/**
 * The last snapshot text decoded and its parse (frozen, so shared): shapes
 * made together often share their snapshot, and a restart decodes every meta.
 */
let lastSnapshot: { readonly text: string; readonly snapshot: PgSnapshot } | undefined

function snapshotOf(text: string): PgSnapshot {
  if (lastSnapshot?.text === text) return lastSnapshot.snapshot
  const snapshot = parsePgSnapshot(text)
  lastSnapshot = { text, snapshot }
  return snapshot
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value)
}

function stringField(raw: Record<string, unknown>, name: string): string {
  const value = raw[name]
  if (typeof value !== 'string') throw new ShapeMetaError(`shape meta: bad ${name}`)
  return value
}
