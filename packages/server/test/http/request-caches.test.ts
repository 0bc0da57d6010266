import { describe, expect, it } from 'vitest'
import { RequestCaches } from '../../src/http/request-caches.js'

describe('RequestCaches', () => {
  it('empties every registered cache on forget, and no longer one that was removed', () => {
    const caches = new RequestCaches()
    const forgotten: string[] = []
    caches.add(() => forgotten.push('a'))
    const removeB = caches.add(() => forgotten.push('b'))
    caches.forget()
    expect(forgotten).toEqual(['a', 'b'])
    removeB()
    caches.forget()
    expect(forgotten).toEqual(['a', 'b', 'a'])
  })
})
