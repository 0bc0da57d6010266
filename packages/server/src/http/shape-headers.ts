import { CacheControl, JSON_CONTENT_TYPE, ResponseHeader, type SluiceError, conflictCacheControl, nextCursor } from '@sluice/protocol'

/**
 * The headers of a `/v1/shape` answer, in the order they go on the wire, for
 * both writers of them: a fastify reply (`ShapeResponder`) and the response
 * head of a parked long-poll (`ParkedLongPoll`), so the two cannot drift.
 */
export interface HeaderTarget {
  header(name: string, value: string): unknown
}

/** What every 200 of a range or of no changes says first. */
export function rangeHeaders(target: HeaderTarget, handle: string, responseOffset: string, etag: string, hasData: boolean): void {
  target.header(ResponseHeader.handle, handle)
  target.header(ResponseHeader.offset, responseOffset)
  target.header(ResponseHeader.etag, `"${etag}"`)
  target.header(ResponseHeader.hasData, hasData ? 'true' : 'false')
  target.header(ResponseHeader.contentType, JSON_CONTENT_TYPE)
}

/** What a live answer adds: its cursor (§5.3) and its short cache lifetime. */
export function liveHeaders(target: HeaderTarget, cursor: string): void {
  target.header(ResponseHeader.cursor, cursor)
  target.header(ResponseHeader.cacheControl, CacheControl.live)
}

/** 409 must-refetch (§5.4): the definition's current handle when there is one; a live request's cursor. */
export function mustRefetchHeaders(target: HeaderTarget, handle: string | undefined, cursor: string | undefined): void {
  if (handle !== undefined) target.header(ResponseHeader.handle, handle)
  target.header(ResponseHeader.cacheControl, conflictCacheControl(handle !== undefined))
  target.header(ResponseHeader.contentType, JSON_CONTENT_TYPE)
  if (cursor !== undefined) target.header(ResponseHeader.cursor, cursor)
}

/** An error's (every error body is JSON, §5.4): its cache-control follows §5.2, by the request's method. */
export function errorHeaders(target: HeaderTarget, error: SluiceError, method: string): void {
  if (error.status === 409 && (method === 'GET' || method === 'HEAD')) {
    // A must-refetch raised as an error has no new handle to offer.
    target.header(ResponseHeader.cacheControl, CacheControl.conflictWithoutHandle)
  } else if (method === 'GET' || method === 'HEAD' || method === 'OPTIONS') {
    target.header(ResponseHeader.cacheControl, CacheControl.noStore)
    target.header(ResponseHeader.surrogateControl, CacheControl.noStore)
  } else {
    target.header(ResponseHeader.cacheControl, CacheControl.noCache)
    target.header(ResponseHeader.surrogateControl, CacheControl.noStore)
  }
  if (error.retryAfter !== undefined) target.header(ResponseHeader.retryAfter, String(error.retryAfter))
  if (error.knownError) target.header(ResponseHeader.knownError, 'true')
  target.header(ResponseHeader.contentType, JSON_CONTENT_TYPE)
}

/** A live answer's `electric-cursor` (§5.3), from the request's own cursor if it sent one. */
export function liveCursor(longPollTimeoutMs: number, requestCursor: string | undefined): string {
  return nextCursor({ nowMs: Date.now(), longPollTimeoutMs, requestCursor, random: Math.random })
}

/** Whether a request's Connection header asks for the connection to close after the answer. */
export function asksToClose(connection: string | string[] | undefined): boolean {
  return connection !== undefined && /(^|,)\s*close\s*(,|$)/i.test(String(connection))
}
