import { type ParamsResult, type ShapeRequest, parseShapeRequest } from '@sluice/protocol'

/**
 * `parseShapeRequest` with its valid non-live answers remembered by the raw
 * query text. Clients that sync the same shape send byte-identical URLs
 * (`offset=-1`, then the same catch-up offsets and handle), and validating one
 * in Electric's stages costs more than looking it up. Live requests carry a
 * cursor and a moving offset, so they are parsed and not kept; invalid ones
 * are parsed each time, so their error path stays as it is.
 *
 * A remembered request is shared by every request with that text: it and its
 * shape parameters are frozen, and the shape service may key its own caches
 * on their identity.
 */

/** Queries remembered; past it the oldest goes. */
const CAPACITY = 1024
/** Longer queries (big where clauses) are parsed each time rather than held. */
const MAX_QUERY_CHARS = 2048

export class ParsedRequests {
  private readonly known = new Map<string, ParamsResult<ShapeRequest>>()

  parse(query: string): ParamsResult<ShapeRequest> {
    const hit = this.known.get(query)
    if (hit !== undefined) return hit
    const result = parseShapeRequest(query)
    if (!result.ok || result.value.live || query.length > MAX_QUERY_CHARS) return result
    if (this.known.size >= CAPACITY) this.known.delete(this.known.keys().next().value!)
    if (result.value.shape !== undefined) Object.freeze(result.value.shape)
    Object.freeze(result.value)
    this.known.set(query, Object.freeze(result))
    return result
  }
}
