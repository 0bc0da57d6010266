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
