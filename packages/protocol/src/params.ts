import type { ParamErrors } from './errors.js'
import { type RelationName, parseRelation } from './identifiers.js'
import { InvalidOffsetError, type RequestOffset, isBeforeAll, parseRequestOffset } from './offset.js'
import {
  type Cast,
  ErrorMap,
  INTEGER,
  castBoolean,
  castColumns,
  castEnum,
  castString,
  castStringMap,
  copyInto,
  emptyRecord,
  has,
  isBlank,
} from './param-casts.js'
import { LOG_MODES, type LogMode, ParamMessage, QueryParam, REPLICA_MODES, type ReplicaMode } from './param-names.js'
import { type QueryObject, decodeQueryString } from './query-string.js'
import { type SubsetRequest, castSubset, extractSubset, mergeBody } from './subset-params.js'

/**
 * Query parameters of `/v1/shape` (docs/protocol.md §2) and their validation.
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

export { LOG_MODES, type LogMode, ParamMessage, QueryParam, REPLICA_MODES, type ReplicaMode, SUBSET_PREFIX } from './param-names.js'
export type { SubsetRequest } from './subset-params.js'

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

export interface ShapeRequest {
  /** Absent when the server is locked to a predefined shape. */
  readonly shape?: ShapeDefinitionParams
  readonly offset: RequestOffset
  /** Dropped when offset is `-1` or `now`: there it only busts caches. */
  readonly handle?: string
  /**
   * A handle the client followed before: `expired_handle`, else the `handle`
   * dropped above. Not part of the shape; the server uses it only to tell a
   * client whose shape's table went away from one naming a table that never
   * existed (docs/protocol.md §5.4).
   */
  readonly expiredHandle?: string
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
  const expired = all[QueryParam.expiredHandle]
  const expiredHandle = typeof expired === 'string' && expired !== '' ? expired : initial ? cast.handle : undefined
  return {
    ok: true,
    value: {
      ...(shape === undefined ? {} : { shape }),
      offset,
      ...(initial || cast.handle === undefined ? {} : { handle: cast.handle }),
      ...(expiredHandle === undefined ? {} : { expiredHandle }),
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

function toFields(query: Input): Fields {
  const source = typeof query === 'string' ? decodeQueryString(query) : query
  return copyInto(emptyRecord<unknown>(), source)
}
