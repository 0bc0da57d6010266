import { parseShapeRequest } from '@sluice/protocol'
import { describe, expect, it } from 'vitest'
import { ParsedRequests } from '../../src/http/parsed-requests.js'

describe('ParsedRequests', () => {
  const initial = 'table=items&offset=-1&where=id%20%3E%203&columns=id,name'

  it('answers a repeated non-live query with the same frozen request, equal to a fresh parse', () => {
    const requests = new ParsedRequests()
    const first = requests.parse(initial)
    const again = requests.parse(initial)
    expect(again).toBe(first)
    expect(first).toEqual(parseShapeRequest(initial))
    if (!first.ok) throw new Error('expected a valid request')
    expect(Object.isFrozen(first.value)).toBe(true)
    expect(Object.isFrozen(first.value.shape)).toBe(true)
    const catchUp = 'table=items&offset=3_1&handle=123-456'
    expect(requests.parse(catchUp)).toBe(requests.parse(catchUp))
  })

  it('forgets every remembered request, non-live and live, and parses them afresh after', () => {
    const requests = new ParsedRequests()
    const live = 'table=items&offset=3_1&handle=123-456&live=true&cursor=10'
    const first = requests.parse(initial)
    requests.parse(live)
    const liveTemplate = requests.parse(live.replace('3_1', '3_2'))
    expect(requests.size).toBe(2)
    requests.forget()
    expect(requests.size).toBe(0)
    const again = requests.parse(initial)
    expect(again).not.toBe(first)
    expect(again).toEqual(first)
    expect(requests.parse(live.replace('3_1', '3_2'))).toEqual(liveTemplate)
  })

  it('parses live and invalid queries every time, with the answers a fresh parse gives', () => {
    const requests = new ParsedRequests()
    for (const query of ['table=items&offset=3_1&handle=123-456&live=true&cursor=10', 'table=items', 'offset=-1', 'table=items&offset=-1&live=true']) {
      const first = requests.parse(query)
      const again = requests.parse(query)
      expect(again).not.toBe(first)
      expect(again).toEqual(first)
      expect(first).toEqual(parseShapeRequest(query))
    }
  })

  it('answers the re-polls of a live shape from one template: their own offset and cursor, one shared frozen shape-parameters object', () => {
    const requests = new ParsedRequests()
    const poll = (offset: string, cursor: string) => `table=items&where=id%20%3E%203&offset=${offset}&handle=123-456&live=true&cursor=${cursor}`
    const first = requests.parse(poll('3_1', '10'))
    const next = requests.parse(poll('7_0', '20'))
    const third = requests.parse(poll('9_inf', '3%2B0'))
    if (!first.ok || !next.ok || !third.ok) throw new Error('expected valid requests')
    expect(next.value.shape).toBe(first.value.shape)
    expect(third.value.shape).toBe(first.value.shape)
    expect(Object.isFrozen(first.value.shape)).toBe(true)
    expect(next).toEqual(parseShapeRequest(poll('7_0', '20')))
    expect(third).toEqual(parseShapeRequest(poll('9_inf', '3%2B0')))
    expect(third.value.cursor).toBe('3+0')
    // An offset the template cannot answer for: a full parse, with its errors.
    for (const offset of ['-1', 'now', 'x_1', '']) expect(requests.parse(poll(offset, '1'))).toEqual(parseShapeRequest(poll(offset, '1')))
  })

  it('gives what a full parse gives for any live query, templated or not', () => {
    const requests = new ParsedRequests()
    const pick = <T>(xs: readonly T[], i: number): T => xs[i % xs.length]!
    const offsets = ['3_1', '0_0', '-1', 'now', '12_inf', 'bad', '5_2', '']
    const cursors = [undefined, '1', '2', 'a%20b', 'x+y', '']
    const extras = ['', '&live_sse=true', '&offset=4_4', '&cursor=9', '&expired_handle=9-9', '&columns=id', '&live=false', '&cursor[a]=1', '&offset']
    const handles = ['h-1', 'h-2', undefined]
    let seed = 7
    const next = (): number => (seed = (seed * 1103515245 + 12345) % 2147483648)
    for (let i = 0; i < 3000; i++) {
      const handle = pick(handles, next())
      const cursor = pick(cursors, next())
      const parts = [`table=${pick(['items', 'other'], next())}`, `offset=${pick(offsets, next())}`, 'live=true']
      if (handle !== undefined) parts.push(`handle=${handle}`)
      if (cursor !== undefined) parts.push(`cursor=${cursor}`)
      const query = parts.join('&') + pick(extras, next())
      expect(requests.parse(query), query).toEqual(parseShapeRequest(query))
    }
    // Templates were made, so some of those answers came from them.
    expect((requests as unknown as { live: Map<string, unknown> }).live.size).toBeGreaterThan(10)
  })

  it('keeps a bounded number of queries, the oldest going first, and never long ones', () => {
    const requests = new ParsedRequests()
    const first = requests.parse('table=t0&offset=-1')
    for (let i = 1; i < 1024; i++) requests.parse(`table=t${i}&offset=-1`)
    expect(requests.parse('table=t0&offset=-1')).toBe(first)
    requests.parse('table=t1024&offset=-1')
    expect(requests.parse('table=t0&offset=-1')).not.toBe(first)
    const long = `table=items&offset=-1&where=${encodeURIComponent(`name = '${'x'.repeat(3000)}'`)}`
    expect(requests.parse(long)).not.toBe(requests.parse(long))
  })
})
