import {
  type ParamsResult,
  type RequestOffset,
  type ShapeRequest,
  compareOffsets,
  decodeQueryString,
  isBeforeAll,
  parseRequestOffset,
  parseShapeRequest,
} from '@sluice/protocol'

/**
 * `parseShapeRequest` with its valid answers remembered. Clients that sync the
 * same shape send byte-identical URLs (`offset=-1`, then the same catch-up
 * offsets and handle), and validating one in Electric's stages costs more
 * than looking it up. Invalid requests are parsed each time, so their error
 * path stays as it is.
 *
 * Non-live requests are remembered by their raw query text. A live request
 * carries a cursor and an offset that move with every re-poll, so it is
 * remembered as a template: the query with the values of `offset` and
 * `cursor` blanked, in place. A re-poll with the same template gets the
 * template's request with its own offset and cursor, parsed alone, when that
 * offset, like the template's, is a log offset (not `-1` nor `now`): every
 * other check of the parse depends only on what the template holds. So a
 * write to thousands of shapes does not pay a full parse per re-poll, and the
 * re-polls of one shape share one shape-parameters object (which the shape
 * service's caches key on).
 *
 * A remembered request, and its shape parameters, are frozen.
 */

/** Non-live queries remembered; past it the oldest goes. */
const CAPACITY = 1024
/** Live templates remembered (about one per followed shape); past it the oldest goes. */
const LIVE_CAPACITY = 20_000
/** Longer queries (big where clauses) are parsed each time rather than held. */
const MAX_QUERY_CHARS = 2048

const OFFSET = 'offset'
const CURSOR = 'cursor'

export class ParsedRequests {
  private readonly known = new Map<string, ParamsResult<ShapeRequest>>()
  private readonly live = new Map<string, ShapeRequest>()

  parse(query: string): ParamsResult<ShapeRequest> {
    const hit = this.known.get(query)
    if (hit !== undefined) return hit
    const template = query.length > MAX_QUERY_CHARS ? undefined : liveTemplate(query)
    if (template !== undefined) {
      const base = this.live.get(template.key)
      const offset = base === undefined ? undefined : logOffset(template.offset)
      if (base !== undefined && offset !== undefined) {
        const value: ShapeRequest = template.cursor === undefined ? { ...base, offset } : { ...base, offset, cursor: template.cursor }
        return { ok: true, value }
      }
    }
    const result = parseShapeRequest(query)
    if (!result.ok || query.length > MAX_QUERY_CHARS) return result
    if (result.value.live) {
      if (template !== undefined && this.sameAsTemplate(result.value, template)) this.rememberLive(template.key, result.value)
      return result
    }
    if (this.known.size >= CAPACITY) this.known.delete(this.known.keys().next().value!)
    if (result.value.shape !== undefined) Object.freeze(result.value.shape)
    Object.freeze(result.value)
    this.known.set(query, Object.freeze(result))
    return result
  }

  /**
   * Forgets every remembered request. After a sweep retired thousands of
   * shapes, what the cache holds is mostly their requests (and, through the
   * frozen parameters, the compiled definitions other caches key on them), which
   * no client may ever send again.
   */
  forget(): void {
    this.known.clear()
    this.live.clear()
  }

  /** Remembered requests, non-live and live templates. */
  get size(): number {
    return this.known.size + this.live.size
  }

  /** Whether the full parse read the offset and cursor exactly as the template's values give them (no duplicate keys elsewhere, say). */
  private sameAsTemplate(value: ShapeRequest, template: LiveTemplate): boolean {
    const offset = logOffset(template.offset)
    if (offset === undefined || value.offset === 'now' || compareOffsets(value.offset, offset) !== 0) return false
    return value.cursor === template.cursor && value.subset === undefined
  }

  private rememberLive(key: string, value: ShapeRequest): void {
    if (this.live.size >= LIVE_CAPACITY) this.live.delete(this.live.keys().next().value!)
    if (value.shape !== undefined) Object.freeze(value.shape)
    this.live.set(key, Object.freeze({ ...value }))
  }
}

interface LiveTemplate {
  /** The query with the offset's and the cursor's values blanked. */
  readonly key: string
  /** Decoded values. */
  readonly offset: string
  readonly cursor: string | undefined
}

/** The query as a live template, or undefined unless it has exactly one `offset` and at most one `cursor`, and says `live`. */
function liveTemplate(query: string): LiveTemplate | undefined {
  const text = query.startsWith('?') ? query.slice(1) : query
  if (!text.includes('live=')) return undefined
  const parts = text.split('&')
  let offset: string | undefined
  let cursor: string | undefined
  for (let i = 0; i < parts.length; i++) {
    const part = parts[i]!
    const eq = part.indexOf('=')
    if (eq < 0) continue
    const key = part.slice(0, eq)
    if (key !== OFFSET && key !== CURSOR) continue
    const raw = part.slice(eq + 1)
    if (key === OFFSET) {
      if (offset !== undefined) return undefined
      offset = raw
    } else {
      if (cursor !== undefined) return undefined
      cursor = raw
    }
    parts[i] = `${key}=`
  }
  if (offset === undefined) return undefined
  return { key: parts.join('&'), offset: decoded(offset), cursor: cursor === undefined ? undefined : decoded(cursor) }
}

/** A query value decoded as the full parse decodes it. */
function decoded(raw: string): string {
  if (!raw.includes('%') && !raw.includes('+')) return raw
  const value = decodeQueryString(`v=${raw}`)['v']
  return typeof value === 'string' ? value : raw
}

/** The offset if it is a log offset (not `-1`, not `now`, not malformed). */
function logOffset(text: string): Exclude<RequestOffset, 'now'> | undefined {
  let offset: RequestOffset
  try {
    offset = parseRequestOffset(text)
  } catch {
    return undefined
  }
  if (offset === 'now' || isBeforeAll(offset)) return undefined
  return offset
}
