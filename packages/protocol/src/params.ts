import type { ParamErrors } from './errors.js'
import { type RelationName, parseColumnList, parseRelation } from './identifiers.js'
import {
  INVALID_OFFSET_MESSAGE,
  InvalidOffsetError,
  type RequestOffset,
  isBeforeAll,
  parseRequestOffset,
} from './offset.js'
import { type QueryObject, decodeQueryString } from './query-string.js'

/**
 * Query parameters of `/v1/shape` (PROTOCOL.md §2) and their validation.
 *
 * The parser reproduces what a client sees from Electric, down to the error
 * texts, without touching a database: whether the table, its columns and the
 * where clause make sense is the server's second step. Validation runs in
 * Electric's stages, and a stage only runs when every earlier one passed, so a
 * request with several problems reports the same one Electric reports:
 *
 *   1. casting    every field's type at once (`replica`, `log`, `columns`, a
 *                 bracketed `table[x]`, ...), plus "offset can't be blank"
 *   2. offset     `-1`, `now` or `<tx>_<op|inf>`
 *   3. handle     required unless offset is `-1` or `now` (where it is dropped)
 *   4. live       not with `-1` or `now`
 *   5. live_sse   only with live
 *   6. table      required (unless the server serves one predefined shape), syntax
 *   7. params     numbered 1..n, checked only when there is a where clause
 *   8. subset     `subset__*` keys (or a POST body), nested under `subset`
 *
 * Electric checks the table's existence, the columns and the where clause
 * between 6 and 7; a request wrong in both ways gets the params error here but
 * the table error from Electric. Only requests wrong twice differ.
 *
 * Value rules (Ecto's, which Electric uses):
 * - A blank value (empty or whitespace only) counts as absent, so `columns=`
 *   selects every column and `offset=` is "can't be blank".
 * - `live` and `live_sse` are true for any value except the literal `false`,
 *   including an empty one (`&live`). `experimental_live_sse`, read only when
 *   `live_sse` is absent, is cast strictly (`true`/`1`/`false`/`0`) as Electric
 *   does; every client that sends it also sends `live_sse`.
 * - Parameters not listed here are ignored.
 */

export const QueryParam = {
  table: 'table',
  offset: 'offset',
  handle: 'handle',
  live: 'live',
  liveSse: 'live_sse',
  experimentalLiveSse: 'experimental_live_sse',
  cursor: 'cursor',
  where: 'where',
  params: 'params',
  columns: 'columns',
  queryableColumns: 'queryable_columns',
  replica: 'replica',
  log: 'log',
  secret: 'secret',
  apiSecret: 'api_secret',
  cacheBuster: 'cache-buster',
  expiredHandle: 'expired_handle',
  subsetWhere: 'subset__where',
  subsetParams: 'subset__params',
  subsetLimit: 'subset__limit',
  subsetOffset: 'subset__offset',
  subsetOrderBy: 'subset__order_by',
  subsetWhereExpr: 'subset__where_expr',
  subsetOrderByExpr: 'subset__order_by_expr',
} as const

/** Any query key with this prefix turns a request into a subset snapshot (§6). */
export const SUBSET_PREFIX = 'subset__'

export const REPLICA_MODES = ['default', 'full'] as const
export type ReplicaMode = (typeof REPLICA_MODES)[number]

export const LOG_MODES = ['full', 'changes_only'] as const
export type LogMode = (typeof LOG_MODES)[number]

/** Error texts that reach clients; Electric's wording. */
export const ParamMessage = {
  blank: "can't be blank",
  invalid: 'is invalid',
  invalidOffset: INVALID_OFFSET_MESSAGE,
  handleRequired: "can't be blank when offset != -1",
  handleOrShapeRequired: "can't be blank when shape definition is missing",
  liveWithBeforeAll: "can't be true when offset == -1",
  liveWithNow: "can't be true when offset is 'now'",
  liveSseWithoutLive: "can't be true unless live is also true",
  paramKeysNotNumbers: 'Parameters can only use numbers as keys',
  paramKeysNotSequential: 'Parameters must be numbered sequentially, starting from 1',
  zeroLengthColumn: 'Invalid zero-length identifier',
  limitNotPositive: 'must be greater than 0',
  offsetNegative: 'must be greater than or equal to 0',
  orderByRequired: 'order_by is required when limit or offset is present',
  subsetParamsNotJson: 'params must be valid JSON',
  subsetParamsNotObject: 'params must be a JSON object',
  notInBody: "can't be set in a request body: the shape and the request's position come from the URL; a body carries subset parameters only",
  inUrlAndBody: 'is given both in the URL and in the request body',
  twiceInBody: 'is given twice in the request body',
} as const

/** What identifies a shape, as far as it can be known without a database. */
export interface ShapeDefinitionParams {
  readonly table: RelationName
  readonly where?: string
  /** Values of `$1..$n` in order; empty without a where clause, which ignores them. */
  readonly params: readonly string[]
  /** As given: parsed, not yet checked against the table, not sorted. */
  readonly columns?: readonly string[]
  readonly queryableColumns?: readonly string[]
  readonly replica: ReplicaMode
  readonly log: LogMode
}

export interface SubsetRequest {
  readonly where?: string
  /** Keyed as sent (`"1"`, `"2"`, ...); numbers and booleans arrive as their text. */
  readonly params: Readonly<Record<string, string>>
  readonly limit?: number
  readonly offset?: number
  readonly orderBy?: string
}

export interface ShapeRequest {
  /** Absent when the server is locked to a predefined shape. */
  readonly shape?: ShapeDefinitionParams
  readonly offset: RequestOffset
  /** Dropped when offset is `-1` or `now`: there it only busts caches. */
  readonly handle?: string
  readonly live: boolean
  readonly liveSse: boolean
  /** Raw `cursor` value, for `nextCursor`. */
  readonly cursor?: string
  readonly subset?: SubsetRequest
}

export interface DeleteRequest {
  readonly handle?: string
  readonly shape?: ShapeDefinitionParams
}

export type ParamsResult<T> =
  | { readonly ok: true; readonly value: T }
  | { readonly ok: false; readonly errors: ParamErrors }

export interface ShapeRequestOptions {
  /** The server serves one configured shape: `table` and the other definition keys are ignored. */
  readonly predefinedShape?: boolean
  /**
   * A POST body, already parsed to an object. Its subset keys (`where`,
   * `params`, `limit`, `offset`, `order_by`, or a `subset` object) join the
   * query's `subset__*` values; any other key is refused (see `mergeBody`).
   */
  readonly body?: Readonly<Record<string, unknown>>
}

type Input = string | QueryObject
type Fields = Record<string, unknown>

/** Parses and validates a GET or POST `/v1/shape` request. */
export function parseShapeRequest(query: Input, options: ShapeRequestOptions = {}): ParamsResult<ShapeRequest> {
  const errors = new ErrorMap()
  const all = mergeBody(extractSubset(toFields(query)), options.body, errors)
  if (!errors.empty) return errors.result()

  // Electric rewrites these two before casting; see the module comment.
  all[QueryParam.live] = has(all, QueryParam.live) ? all[QueryParam.live] !== 'false' : false
  all[QueryParam.liveSse] = has(all, QueryParam.liveSse)
    ? all[QueryParam.liveSse] !== 'false'
    : has(all, QueryParam.experimentalLiveSse)
      ? all[QueryParam.experimentalLiveSse]
      : false

  const cast = castFields(all, errors)
  const offsetText = cast.offset
  if (offsetText === undefined && !errors.has(QueryParam.offset)) errors.add(QueryParam.offset, ParamMessage.blank)
  if (!errors.empty || offsetText === undefined) return errors.result()

  let offset: RequestOffset
  try {
    offset = parseRequestOffset(offsetText)
  } catch (error) {
    if (!(error instanceof InvalidOffsetError)) throw error
    return errors.add(QueryParam.offset, ParamMessage.invalidOffset).result()
  }

  const beforeAll = offset !== 'now' && isBeforeAll(offset)
  const initial = offset === 'now' || beforeAll
  if (!initial && cast.handle === undefined) {
    return errors.add(QueryParam.handle, ParamMessage.handleRequired).result()
  }

  const live = cast.live === true
  if (live && beforeAll) return errors.add(QueryParam.live, ParamMessage.liveWithBeforeAll).result()
  if (live && offset === 'now') return errors.add(QueryParam.live, ParamMessage.liveWithNow).result()

  const liveSse = cast.liveSse === true
  if (liveSse && !live) return errors.add(QueryParam.liveSse, ParamMessage.liveSseWithoutLive).result()

  let shape: ShapeDefinitionParams | undefined
  if (options.predefinedShape !== true) {
    const defined = defineShape(cast, errors)
    if (defined === undefined) return errors.result()
    shape = defined
  }

  let subset: SubsetRequest | undefined
  if (!isBlank(all['subset'])) {
    subset = castSubset(all['subset'], errors)
    if (subset === undefined) return errors.result()
  }

  const cursor = all[QueryParam.cursor]
  return {
    ok: true,
    value: {
      ...(shape === undefined ? {} : { shape }),
      offset,
      ...(initial || cast.handle === undefined ? {} : { handle: cast.handle }),
      live,
      liveSse,
      ...(typeof cursor === 'string' ? { cursor } : {}),
      ...(subset === undefined ? {} : { subset }),
    },
  }
}

/**
 * Parses `DELETE /v1/shape`: either a shape definition (`table` and friends,
 * with an optional `handle` the server must match) or a bare `handle`.
 */
export function parseDeleteRequest(query: Input): ParamsResult<DeleteRequest> {
  const all = toFields(query)
  const errors = new ErrorMap()
  const cast = castFields(all, errors)

  if (cast.table === undefined) {
    if (cast.handle === undefined && !errors.has(QueryParam.handle)) {
      errors.add(QueryParam.handle, ParamMessage.handleOrShapeRequired)
    }
    if (!errors.empty || cast.handle === undefined) return errors.result()
    return { ok: true, value: { handle: cast.handle } }
  }
  if (!errors.empty) return errors.result()
  const shape = defineShape(cast, errors)
  if (shape === undefined) return errors.result()
  return { ok: true, value: { ...(cast.handle === undefined ? {} : { handle: cast.handle }), shape } }
}

/**
 * The configured-secret candidate of a request: `secret`, else the deprecated
 * `api_secret`. Checked before any other validation (a 401 beats a 400).
 */
export function readSecret(query: Input): string | undefined {
  const fields = typeof query === 'string' ? decodeQueryString(query) : query
  const secret = fields[QueryParam.secret] ?? fields[QueryParam.apiSecret]
  return typeof secret === 'string' ? secret : undefined
}

// ---------------------------------------------------------------------------

interface CastResult {
  readonly table?: string
  readonly offset?: string
  readonly handle?: string
  readonly live?: boolean
  readonly liveSse?: boolean
  readonly where?: string
  readonly params?: Readonly<Record<string, string>>
  readonly columns?: readonly string[]
  readonly queryableColumns?: readonly string[]
  readonly replica?: ReplicaMode
  readonly log?: LogMode
}

/** Stage 1: every field's type, all errors at once. */
function castFields(all: Fields, errors: ErrorMap): CastResult {
  const take = <T>(field: string, cast: (value: unknown) => Cast<T>): T | undefined => {
    const result = cast(all[field])
    if (result.kind === 'invalid') errors.add(field, result.message)
    return result.kind === 'ok' ? result.value : undefined
  }
  const fields: { -readonly [K in keyof CastResult]: CastResult[K] } = {}
  const set = <K extends keyof CastResult>(key: K, value: CastResult[K] | undefined): void => {
    if (value !== undefined) fields[key] = value
  }
  set('table', take(QueryParam.table, castString))
  set('offset', take(QueryParam.offset, castString))
  set('handle', take(QueryParam.handle, castString))
  set('live', take(QueryParam.live, castBoolean))
  set('liveSse', take(QueryParam.liveSse, castBoolean))
  set('where', take(QueryParam.where, castString))
  set('params', take(QueryParam.params, castStringMap))
  set('columns', take(QueryParam.columns, castColumns))
  set('queryableColumns', take(QueryParam.queryableColumns, castColumns))
  set('replica', take(QueryParam.replica, castEnum(REPLICA_MODES)))
  set('log', take(QueryParam.log, castEnum(LOG_MODES)))
  return fields
}

/** Stages 6 and 7. */
function defineShape(cast: CastResult, errors: ErrorMap): ShapeDefinitionParams | undefined {
  if (cast.table === undefined) {
    errors.add(QueryParam.table, ParamMessage.blank)
    return undefined
  }
  const relation = parseRelation(cast.table)
  if (!relation.ok) {
    errors.add(QueryParam.table, relation.error)
    return undefined
  }
  let params: readonly string[] = []
  if (cast.where !== undefined && cast.params !== undefined) {
    const ordered = orderParams(cast.params)
    if (typeof ordered === 'string') {
      errors.add(QueryParam.params, ordered)
      return undefined
    }
    params = ordered
  }
  return {
    table: relation.value,
    ...(cast.where === undefined ? {} : { where: cast.where }),
    params,
    ...(cast.columns === undefined ? {} : { columns: cast.columns }),
    ...(cast.queryableColumns === undefined ? {} : { queryableColumns: cast.queryableColumns }),
    replica: cast.replica ?? 'default',
    log: cast.log ?? 'full',
  }
}

const INTEGER = /^[+-]?[0-9]+$/

/**
 * `{ "1": a, "2": b }` → `[a, b]`. Keys are integers as Elixir reads them
 * (`01` and `+1` are 1) and must be exactly 1..n. Electric means the same rule
 * but walks its map in key *text* order, so there `1..10` fails ("10" sorts
 * before "2"); here it passes.
 */
function orderParams(params: Readonly<Record<string, string>>): string[] | string {
  const numbered: Array<[bigint, string]> = []
  for (const [key, value] of Object.entries(params)) {
    if (!INTEGER.test(key)) return ParamMessage.paramKeysNotNumbers
    numbered.push([BigInt(key), value])
  }
  numbered.sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
  for (let i = 0; i < numbered.length; i++) {
    if (numbered[i]?.[0] !== BigInt(i + 1)) return ParamMessage.paramKeysNotSequential
  }
  return numbered.map(([, value]) => value)
}

/** Stage 8. */
function castSubset(raw: unknown, errors: ErrorMap): SubsetRequest | undefined {
  if (!isPlainObject(raw)) {
    errors.add('subset', ParamMessage.invalid)
    return undefined
  }
  const sub = new ErrorMap()
  const take = <T>(field: string, cast: (value: unknown) => Cast<T>): T | undefined => {
    const result = cast(raw[field])
    if (result.kind === 'invalid') sub.add(field, result.message)
    return result.kind === 'ok' ? result.value : undefined
  }
  const where = take('where', castString)
  const orderBy = take('order_by', castString)
  const limit = take('limit', castInteger)
  const offset = take('offset', castInteger)
  const params = take('params', castSubsetParams)

  if (limit !== undefined && limit <= 0) sub.add('limit', ParamMessage.limitNotPositive)
  if (offset !== undefined && offset < 0) sub.add('offset', ParamMessage.offsetNegative)
  if ((limit !== undefined || offset !== undefined) && orderBy === undefined && !sub.has('order_by')) {
    sub.add('order_by', ParamMessage.orderByRequired)
  }
  if (!sub.empty) {
    errors.nest('subset', sub.toObject())
    return undefined
  }
  return {
    ...(where === undefined ? {} : { where }),
    params: params ?? emptyRecord(),
    ...(limit === undefined ? {} : { limit }),
    ...(offset === undefined ? {} : { offset }),
    ...(orderBy === undefined ? {} : { orderBy }),
  }
}

// --- Ecto-style casts ---------------------------------------------------------

type Cast<T> =
  | { readonly kind: 'absent' }
  | { readonly kind: 'ok'; readonly value: T }
  | { readonly kind: 'invalid'; readonly message: string }

const ABSENT: Cast<never> = { kind: 'absent' }
const INVALID: Cast<never> = { kind: 'invalid', message: ParamMessage.invalid }
const okCast = <T>(value: T): Cast<T> => ({ kind: 'ok', value })
const invalidCast = (message: string): Cast<never> => ({ kind: 'invalid', message })

function isBlank(value: unknown): boolean {
  return value === undefined || value === null || (typeof value === 'string' && value.trim() === '')
}

function castString(value: unknown): Cast<string> {
  if (isBlank(value)) return ABSENT
  return typeof value === 'string' ? okCast(value) : INVALID
}

function castBoolean(value: unknown): Cast<boolean> {
  if (isBlank(value)) return ABSENT
  if (value === true || value === 'true' || value === '1') return okCast(true)
  if (value === false || value === 'false' || value === '0') return okCast(false)
  return INVALID
}

function castEnum<const T extends string>(values: readonly T[]): (value: unknown) => Cast<T> {
  return (value) => {
    if (isBlank(value)) return ABSENT
    return typeof value === 'string' && (values as readonly string[]).includes(value) ? okCast(value as T) : INVALID
  }
}

function castInteger(value: unknown): Cast<number> {
  if (isBlank(value)) return ABSENT
  if (typeof value === 'number') return Number.isSafeInteger(value) ? okCast(value) : INVALID
  if (typeof value === 'string' && INTEGER.test(value)) {
    const parsed = Number(value)
    return Number.isSafeInteger(parsed) ? okCast(parsed) : INVALID
  }
  return INVALID
}

function castColumns(value: unknown): Cast<readonly string[]> {
  if (isBlank(value)) return ABSENT
  if (typeof value === 'string') {
    const parsed = parseColumnList(value)
    return parsed.ok ? okCast(parsed.value) : invalidCast(parsed.error)
  }
  // `columns[]=a&columns[]=b`: names taken verbatim, as Electric does.
  if (Array.isArray(value) && value.length > 0) {
    if (!value.every((column): column is string => typeof column === 'string')) return INVALID
    return value.includes('') ? invalidCast(ParamMessage.zeroLengthColumn) : okCast(value)
  }
  return INVALID
}

function castStringMap(value: unknown): Cast<Readonly<Record<string, string>>> {
  if (isBlank(value)) return ABSENT
  if (!isPlainObject(value)) return INVALID
  const out = emptyRecord()
  for (const [key, entry] of Object.entries(value)) {
    if (typeof entry !== 'string') return INVALID
    out[key] = entry
  }
  return okCast(out)
}

/** `subset__params`: a JSON object string, or a bracketed map; scalar values become text. */
function castSubsetParams(value: unknown): Cast<Readonly<Record<string, string>>> {
  if (isBlank(value)) return ABSENT
  let decoded: unknown = value
  if (typeof value === 'string') {
    try {
      decoded = JSON.parse(value)
    } catch {
      return invalidCast(ParamMessage.subsetParamsNotJson)
    }
    if (!isPlainObject(decoded)) return invalidCast(ParamMessage.subsetParamsNotObject)
  }
  if (!isPlainObject(decoded)) return INVALID
  const out = emptyRecord()
  for (const [key, entry] of Object.entries(decoded)) {
    if (typeof entry === 'string') out[key] = entry
    else if (typeof entry === 'number' || typeof entry === 'boolean') out[key] = String(entry)
    else if (entry === null) out[key] = ''
    else return INVALID
  }
  return okCast(out)
}

// --- plumbing -----------------------------------------------------------------

class ErrorMap {
  private readonly fields = new Map<string, string[] | ParamErrors>()

  get empty(): boolean {
    return this.fields.size === 0
  }

  has(field: string): boolean {
    return this.fields.has(field)
  }

  add(field: string, message: string): this {
    const existing = this.fields.get(field)
    if (Array.isArray(existing)) existing.push(message)
    else this.fields.set(field, [message])
    return this
  }

  nest(field: string, errors: ParamErrors): this {
    this.fields.set(field, errors)
    return this
  }

  toObject(): ParamErrors {
    return Object.fromEntries(this.fields)
  }

  result(): { readonly ok: false; readonly errors: ParamErrors } {
    return { ok: false, errors: this.toObject() }
  }
}

function toFields(query: Input): Fields {
  const source = typeof query === 'string' ? decodeQueryString(query) : query
  return copyInto(emptyRecord<unknown>(), source)
}

/** `subset__where=x` → `subset: { where: 'x' }`; an explicit `subset[...]` key wins. */
function extractSubset(all: Fields): Fields {
  let subset: Fields | undefined
  for (const key of Object.keys(all)) {
    if (!key.startsWith(SUBSET_PREFIX)) continue
    subset ??= emptyRecord<unknown>()
    subset[key.slice(SUBSET_PREFIX.length)] = all[key]
    delete all[key]
  }
  if (subset !== undefined && !has(all, 'subset')) all['subset'] = subset
  return all
}

/** The keys a POST body may carry (§6): subset parameters, bare or in a `subset` object. */
const BODY_SUBSET_KEYS = new Set(['where', 'order_by', 'limit', 'offset', 'params', 'where_expr', 'order_by_expr'])

/**
 * Joins a POST body's subset parameters to the query's `subset__*` ones.
 *
 * The shape itself (table, where, columns, params, replica, log) and the
 * request's position come from the URL alone: an auth proxy that pins them
 * there must not be bypassed by a body. Electric merges every body key into the
 * query params; we refuse any key that is not a subset parameter, and a subset
 * parameter given twice (in the URL and the body, or bare and in `subset`), with
 * a 400 that names it.
 */
function mergeBody(all: Fields, body: Readonly<Record<string, unknown>> | undefined, errors: ErrorMap): Fields {
  if (body === undefined || Object.keys(body).length === 0) return all
  const merged = isPlainObject(all['subset']) ? copyInto(emptyRecord<unknown>(), all['subset']) : emptyRecord<unknown>()
  const fromUrl = new Set(Object.keys(merged))
  const twice = new ErrorMap()
  const take = (key: string, value: unknown): void => {
    if (has(merged, key)) twice.add(key, fromUrl.has(key) ? ParamMessage.inUrlAndBody : ParamMessage.twiceInBody)
    merged[key] = value
  }
  for (const [key, value] of Object.entries(body)) {
    if (key === 'subset' && isPlainObject(value)) {
      for (const [inner, innerValue] of Object.entries(value)) take(inner, innerValue)
    } else if (key === 'subset') {
      // Not an object: stage 8 reports it as the subset's type error.
      merged['subset'] = value
    } else if (BODY_SUBSET_KEYS.has(key)) {
      take(key, value)
    } else {
      errors.add(key, ParamMessage.notInBody)
    }
  }
  if (!twice.empty) errors.nest('subset', twice.toObject())
  if (has(merged, 'subset')) all['subset'] = merged['subset']
  else if (Object.keys(merged).length > 0) all['subset'] = merged
  return all
}

function copyInto<T>(target: Record<string, T>, source: Readonly<Record<string, T>>): Record<string, T> {
  for (const [key, value] of Object.entries(source)) target[key] = value
  return target
}

function emptyRecord<T = string>(): Record<string, T> {
  return Object.create(null) as Record<string, T>
}

function has(fields: Readonly<Record<string, unknown>>, key: string): boolean {
  return Object.hasOwn(fields, key)
}

function isPlainObject(value: unknown): value is Readonly<Record<string, unknown>> {
  return typeof value === 'object' && value !== null && !Array.isArray(value)
}
