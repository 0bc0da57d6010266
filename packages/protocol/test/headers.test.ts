import { describe, expect, it } from 'vitest'
import {
  CacheControl,
  EXPOSE_HEADERS_VALUE,
  ResponseHeader,
  SHAPE_ALLOW_METHODS_VALUE,
  conflictCacheControl,
  etagValue,
  formatEtag,
  ifNoneMatchIncludes,
  liveSseCacheControl,
  nonLiveCacheControl,
} from '../src/index.js'

describe('header values', () => {
  it('exposes exactly the electric headers and retry-after, comma-separated without spaces', () => {
    expect(EXPOSE_HEADERS_VALUE).toBe(
      'electric-cursor,electric-handle,electric-has-data,electric-offset,electric-schema,electric-up-to-date,electric-internal-known-error,retry-after',
    )
    for (const name of EXPOSE_HEADERS_VALUE.split(',')) {
      expect(Object.values(ResponseHeader)).toContain(name)
    }
  })

  it('uses lower-case names', () => {
    for (const name of Object.values(ResponseHeader)) expect(name).toBe(name.toLowerCase())
    expect(ResponseHeader.upToDate).toBe('electric-up-to-date')
    expect(ResponseHeader.knownError).toBe('electric-internal-known-error')
  })

  it('has the fixed cache-control strings', () => {
    expect(CacheControl.initial).toBe('public, max-age=604800, s-maxage=3600, stale-while-revalidate=2629746')
    expect(CacheControl.live).toBe('public, max-age=5, stale-while-revalidate=5')
    expect(CacheControl.conflict).toBe('public, max-age=60, must-revalidate')
    expect(CacheControl.conflictWithoutHandle).toBe('public, max-age=1, must-revalidate')
    expect(CacheControl.noStore).toBe('no-store')
    expect(CacheControl.noCache).toBe('no-cache')
    expect(CacheControl.health).toBe('no-cache, no-store, must-revalidate')
    expect(SHAPE_ALLOW_METHODS_VALUE).toBe('GET, POST, HEAD, DELETE, OPTIONS')
  })

  it.each<[number, number, string]>([
    [60, 300, 'public, max-age=60, stale-while-revalidate=300'],
    [1, 3, 'public, max-age=1, stale-while-revalidate=3'],
    [0, 0, 'public, max-age=0, stale-while-revalidate=0'],
  ])('non-live %s/%s', (maxAge, stale, expected) => {
    expect(nonLiveCacheControl(maxAge, stale)).toBe(expected)
  })

  it.each<[number, string]>([
    [60_000, 'public, max-age=59'],
    [60_999, 'public, max-age=59'],
    [2_000, 'public, max-age=1'],
    [1_000, 'public, max-age=1'],
    [0, 'public, max-age=1'],
  ])('live SSE with a %s ms stream', (timeout, expected) => {
    expect(liveSseCacheControl(timeout)).toBe(expected)
  })

  it('picks the 409 lifetime by whether there is a new handle', () => {
    expect(conflictCacheControl(true)).toBe(CacheControl.conflict)
    expect(conflictCacheControl(false)).toBe(CacheControl.conflictWithoutHandle)
  })
})

describe('etag', () => {
  const parts = { handle: '3833821-1721812114261', requestOffset: '-1', responseOffset: '0_0' }

  it('formats handle:request:response, quoted', () => {
    expect(etagValue(parts)).toBe('3833821-1721812114261:-1:0_0')
    expect(formatEtag(parts)).toBe('"3833821-1721812114261:-1:0_0"')
    expect(formatEtag({ ...parts, requestOffset: 'now', noChangesToken: -576460751234n })).toBe(
      '"3833821-1721812114261:now:0_0:-576460751234"',
    )
  })

  const tag = etagValue(parts)
  it.each<[string | string[] | undefined, boolean]>([
    [undefined, false],
    ['', false],
    [`"${tag}"`, true],
    [tag, true],
    [` "${tag}" `, true],
    [`"other", "${tag}"`, true],
    [['"other"', `"${tag}"`], true],
    [`""${tag}""`, true],
    [`W/"${tag}"`, false],
    ['*', false],
    [`"${tag}:1"`, false],
  ])('If-None-Match %j → %s', (header, expected) => {
    expect(ifNoneMatchIncludes(header, tag)).toBe(expected)
  })
})
