/**
 * Header names and fixed header values of the Shape API (docs/protocol.md §5.1, §5.2, §8).
 *
 * Names are lower case: Node and fetch both normalise to it, and the official
 * client reads them with `Headers.get`, which is case-insensitive anyway.
 */

export const ResponseHeader = {
  handle: 'electric-handle',
  offset: 'electric-offset',
  schema: 'electric-schema',
  /** Present with an empty value; the client only tests `has()`. */
  upToDate: 'electric-up-to-date',
  cursor: 'electric-cursor',
  hasData: 'electric-has-data',
  snapshot: 'electric-snapshot',
  knownError: 'electric-internal-known-error',
  server: 'electric-server',
  retryAfter: 'retry-after',
  etag: 'etag',
  cacheControl: 'cache-control',
  surrogateControl: 'surrogate-control',
  contentType: 'content-type',
  connection: 'connection',
  location: 'location',
  vary: 'vary',
  allowOrigin: 'access-control-allow-origin',
  allowMethods: 'access-control-allow-methods',
  allowHeaders: 'access-control-allow-headers',
  exposeHeaders: 'access-control-expose-headers',
  maxAge: 'access-control-max-age',
} as const

export type ResponseHeaderName = (typeof ResponseHeader)[keyof typeof ResponseHeader]

export const RequestHeader = {
  ifNoneMatch: 'if-none-match',
  origin: 'origin',
  accept: 'accept',
  accessControlRequestHeaders: 'access-control-request-headers',
} as const

/**
 * `access-control-expose-headers` on every `/v1/shape` response. Without it a
 * browser hides the electric-* headers from the client, which then fails with
 * MissingHeadersError; `retry-after` is listed so backoff works cross-origin.
 */
export const EXPOSE_HEADERS_VALUE =
  'electric-cursor,electric-handle,electric-has-data,electric-offset,electric-schema,' +
  'electric-up-to-date,electric-internal-known-error,retry-after'

/** `access-control-allow-methods` on `/v1/shape`, and on every other route. */
export const SHAPE_ALLOW_METHODS_VALUE = 'GET, POST, HEAD, DELETE, OPTIONS'
export const DEFAULT_ALLOW_METHODS_VALUE = 'GET, HEAD'

/** Request headers a preflight may ask for and that OPTIONS echoes back. */
export const PREFLIGHT_ALLOWED_REQUEST_HEADERS: readonly string[] = ['if-none-match', 'traceparent']

/** `access-control-max-age` of the OPTIONS answer: one day. */
export const PREFLIGHT_MAX_AGE_SECONDS = 86_400

export const JSON_CONTENT_TYPE = 'application/json; charset=utf-8'
export const SSE_CONTENT_TYPE = 'text/event-stream'

/** Value of `electric-up-to-date`: the header must exist, its value is empty. */
export const UP_TO_DATE_VALUE = ''

export const CacheControl = {
  /**
   * `offset=-1`: a week in browsers, an hour in shared caches, and a month of
   * stale-while-revalidate. The first request of every client is for this URL,
   * so it must be the most cacheable response there is.
   */
  initial: 'public, max-age=604800, s-maxage=3600, stale-while-revalidate=2629746',
  /** `live=true` long-poll: short enough that clients never wait on a stale answer for long. */
  live: 'public, max-age=5, stale-while-revalidate=5',
  /** 409 with a new handle: a brief cache turns a stampede of refetches into one. */
  conflict: 'public, max-age=60, must-revalidate',
  /** 409 without a new handle: cached only long enough to coalesce requests. */
  conflictWithoutHandle: 'public, max-age=1, must-revalidate',
  /** Every other status ≥ 400; also sent as `surrogate-control`. */
  noStore: 'no-store',
  /** Methods other than GET/OPTIONS, and subset snapshots. */
  noCache: 'no-cache',
  /** `/v1/health`. */
  health: 'no-cache, no-store, must-revalidate',
} as const

/** Electric's defaults for `nonLiveCacheControl`. */
export const DEFAULT_MAX_AGE_SECONDS = 60
export const DEFAULT_STALE_AGE_SECONDS = 300

/** Non-live responses other than `offset=-1` (defaults 60 / 300 s; both configurable). */
export function nonLiveCacheControl(maxAgeSeconds: number, staleAgeSeconds: number): string {
  return `public, max-age=${maxAgeSeconds}, stale-while-revalidate=${staleAgeSeconds}`
}

/**
 * `live=true&live_sse=true`: cached for just under the SSE stream lifetime so
 * collapsed requests join a stream that is still open (59 s for the default 60 s).
 */
export function liveSseCacheControl(sseTimeoutMs: number): string {
  return `public, max-age=${Math.max(1, Math.floor(sseTimeoutMs / 1000) - 1)}`
}

export function conflictCacheControl(hasNewHandle: boolean): string {
  return hasNewHandle ? CacheControl.conflict : CacheControl.conflictWithoutHandle
}
