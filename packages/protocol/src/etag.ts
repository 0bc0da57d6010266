/**
 * ETags of shape responses (docs/protocol.md §5.1, §5.3).
 *
 * The tag is `"<handle>:<request offset>:<response offset>"`, known before the
 * body is read, so a 304 costs no log access. A response with no changes (a
 * long-poll timeout, `offset=now`) appends a value that never repeats, so a CDN
 * can never revalidate an empty live answer and must collapse real requests.
 */

export interface EtagParts {
  readonly handle: string
  /** The request's `offset` as text (`-1`, `now`, `<tx>_<op>`). */
  readonly requestOffset: string
  /** The response's `electric-offset`. */
  readonly responseOffset: string
  /** Set for no-change responses; any value that does not repeat (Electric uses monotonic time). */
  readonly noChangesToken?: string | number | bigint
}

/** The tag without quotes, as compared against `If-None-Match`. */
export function etagValue(parts: EtagParts): string {
  const base = `${parts.handle}:${parts.requestOffset}:${parts.responseOffset}`
  return parts.noChangesToken === undefined ? base : `${base}:${parts.noChangesToken}`
}

/** The `etag` header value (quoted, RFC 9110 §8.8.3). */
export function formatEtag(parts: EtagParts): string {
  return `"${etagValue(parts)}"`
}

/**
 * Whether any `If-None-Match` entry names `etag` (unquoted). Entries are split on
 * commas, trimmed, and stripped of surrounding quotes, as Electric does; weak
 * validators (`W/"…"`) therefore never match, and `*` is not special.
 */
export function ifNoneMatchIncludes(
  header: string | readonly string[] | undefined,
  etag: string,
): boolean {
  if (header === undefined) return false
  const values = typeof header === 'string' ? [header] : header
  for (const value of values) {
    for (const entry of value.split(',')) {
      if (stripQuotes(entry.trim()) === etag) return true
    }
  }
  return false
}

function stripQuotes(text: string): string {
  let start = 0
  let end = text.length
  while (start < end && text.charCodeAt(start) === 0x22) start++
  while (end > start && text.charCodeAt(end - 1) === 0x22) end--
  return text.slice(start, end)
}
