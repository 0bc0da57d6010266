import { InvalidOptionsError, type ShapeStreamOptions, type WhereParams } from '@sluice/client'

/**
 * The identity of the rows a set of options asks for, as a string: two option
 * objects with equal keys would receive the same log from the server, so they
 * can share one stream. Forms that mean the same shape map to one key (where
 * params as an array or as `{1: …}`, columns in any order, replica/log left
 * at their defaults or given explicitly).
 *
 * Left out on purpose: headers (usually a token refreshed while the rows stay
 * the same; keying on it would restart the stream at every refresh), and the
 * behaviour options (fetch, parser, onError, backoff, liveSse, timers).
 */
export function shapeKey(options: ShapeStreamOptions & { readonly shapeKey?: string }): string {
  if (options.shapeKey !== undefined) return `explicit:${options.shapeKey}`
  const { table, where, params, columns, replica, ...custom } = options.params
  const custom_: Record<string, unknown> = {}
  for (const name of Object.keys(custom).sort()) {
    const value = staticValue(name, custom[name])
    if (value !== undefined) custom_[name] = value
  }
  const columnList = staticValue('columns', columns) as readonly string[] | undefined
  return JSON.stringify({
    url: options.url,
    table: staticValue('table', table),
    where: staticValue('where', where) ?? null,
    params: normaliseParams(staticValue('params', params) as WhereParams | undefined),
    columns: columnList === undefined ? null : [...columnList].sort(),
    replica: staticValue('replica', replica) ?? 'default',
    log: options.log ?? 'full',
    offset: options.offset ?? '-1',
    handle: options.handle ?? null,
    custom: custom_,
  })
}

function staticValue(name: string, value: unknown): unknown {
  if (typeof value === 'function') {
    throw new InvalidOptionsError(`params.${name} is a function, so the shape has no fixed identity: give useShape a shapeKey`)
  }
  return value
}

/** `['a', 'b']` and `{1: 'a', 2: 'b'}` are the same `$1, $2`. */
function normaliseParams(params: WhereParams | undefined): Record<string, string> | null {
  if (params === undefined) return null
  const out: Record<string, string> = {}
  if (Array.isArray(params)) (params as readonly string[]).forEach((value, i) => (out[String(i + 1)] = value))
  else for (const name of Object.keys(params).sort((a, b) => Number(a) - Number(b))) out[name] = (params as Record<string, string>)[name]!
  return out
}
