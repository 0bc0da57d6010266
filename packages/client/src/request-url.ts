import { QueryParam, quoteIdentifier } from '@sluice/protocol'
import type { Dynamic, ShapeParams, WhereParams } from './stream-options.js'
import type { StreamState } from './stream-state.js'

/**
 * The URL and headers of a stream's next request (docs/protocol.md §2): the shape's
 * params resolved afresh, then the protocol's own (offset, handle, live,
 * cursor, cache buster, expired handle) from the state, in a stable order.
 */

export interface RequestUrlOptions {
  readonly url: string
  readonly params: ShapeParams
  readonly log: string
}

export async function requestUrl(options: RequestUrlOptions, state: StreamState, sse: boolean): Promise<string> {
  const url = new URL(options.url)
  const query = url.searchParams
  for (const [name, value] of Object.entries(options.params)) {
    const resolved = typeof value === 'function' ? await value() : value
    if (resolved === undefined) continue
    appendParam(query, name, resolved)
  }
  query.set(QueryParam.log, options.log)
  query.set(QueryParam.offset, state.offset)
  if (state.handle !== undefined) query.set(QueryParam.handle, state.handle)
  if (state.kind === 'live') {
    query.set(QueryParam.live, 'true')
    query.set(QueryParam.cursor, state.cursor ?? '')
    if (sse) {
      query.set(QueryParam.liveSse, 'true')
      query.set(QueryParam.experimentalLiveSse, 'true')
    }
  }
  if (state.cacheBuster !== undefined) query.set(QueryParam.cacheBuster, state.cacheBuster)
  if (state.expiredHandle !== undefined) query.set(QueryParam.expiredHandle, state.expiredHandle)
  // A stable order keeps URLs identical across clients, so HTTP caches can share them.
  query.sort()
  return url.toString()
}

export async function requestHeaders(headers: Readonly<Record<string, Dynamic<string>>>, sse: boolean): Promise<Record<string, string>> {
  const out: Record<string, string> = {}
  for (const [name, value] of Object.entries(headers)) out[name] = typeof value === 'function' ? await value() : value
  if (sse) out.accept = 'text/event-stream'
  return out
}

function appendParam(query: URLSearchParams, name: string, value: string | readonly string[] | WhereParams): void {
  if (name === QueryParam.columns && Array.isArray(value)) {
    query.set(name, (value as readonly string[]).map(quoteIdentifier).join(','))
  } else if (name === QueryParam.params && typeof value === 'object') {
    // Plug-style nesting: params[1]=a&params[2]=b (docs/protocol.md §2).
    const entries = Array.isArray(value) ? value.map((v, i) => [String(i + 1), v] as const) : Object.entries(value)
    for (const [key, v] of entries) query.set(`${QueryParam.params}[${key}]`, String(v))
  } else if (Array.isArray(value)) {
    query.set(name, value.join(','))
  } else {
    query.set(name, String(value))
  }
}
