import { type Cast, ErrorMap, castInteger, castString, castSubsetParams, copyInto, emptyRecord, has, isPlainObject } from './param-casts.js'
import { ParamMessage, SUBSET_PREFIX } from './param-names.js'

/**
 * The subset part of a `/v1/shape` request (docs/protocol.md §6): its `subset__*`
 * query keys or a POST body, gathered under `subset` and cast (stage 8 of the
 * parser in params.ts).
 */

type Fields = Record<string, unknown>

export interface SubsetRequest {
  readonly where?: string
  /** Keyed as sent (`"1"`, `"2"`, ...); numbers and booleans arrive as their text. */
  readonly params: Readonly<Record<string, string>>
  readonly limit?: number
  readonly offset?: number
  readonly orderBy?: string
}

/** Stage 8. */
export function castSubset(raw: unknown, errors: ErrorMap): SubsetRequest | undefined {
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

/** `subset__where=x` → `subset: { where: 'x' }`; an explicit `subset[...]` key wins. */
export function extractSubset(all: Fields): Fields {
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
export function mergeBody(all: Fields, body: Readonly<Record<string, unknown>> | undefined, errors: ErrorMap): Fields {
  if (body === undefined || Object.keys(body).length === 0) return all
  const merged = isPlainObject(all['subset']) ? copyInto(emptyRecord<unknown>(), all['subset']) : emptyRecord<unknown>()
  const fromUrl = new Set(Object.keys(merged))
  // Errors of keys inside `subset`: one given twice, or one that is not a subset parameter.
  const twice = new ErrorMap()
  const take = (key: string, value: unknown): void => {
    if (has(merged, key)) twice.add(key, fromUrl.has(key) ? ParamMessage.inUrlAndBody : ParamMessage.twiceInBody)
    merged[key] = value
  }
  for (const [key, value] of Object.entries(body)) {
    if (key === 'subset' && isPlainObject(value)) {
      for (const [inner, innerValue] of Object.entries(value)) {
        // The same keys as at the top level: a misspelt `wher` must not quietly return every row.
        if (BODY_SUBSET_KEYS.has(inner)) take(inner, innerValue)
        else twice.add(inner, ParamMessage.notInBody)
      }
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
