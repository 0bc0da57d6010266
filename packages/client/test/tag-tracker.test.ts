import { describe, expect, it } from 'vitest'
import { TagTracker } from '../src/index.js'

/**
 * The tracker alone, on the cases TanStack DB's own tag tests use as
 * oracles, and its index kept to the rows it holds (the Shape tests cover
 * the wire; these pin the bookkeeping).
 */
describe('TagTracker', () => {
  it('a partial deactivation keeps a row, a full one removes it once, a later move-in does not bring it back', () => {
    const t = new TagTracker()
    // `a IN S1 OR b IN S2`: positions 0 and 1, one per disjunct.
    t.change('k', { tags: ['A/', '/B'], active_conditions: [true, true] }, true)
    expect(t.moveOut([{ pos: 0, value: 'A' }])).toEqual([])
    expect(t.moveOut([{ pos: 1, value: 'B' }, { pos: 1, value: 'B' }])).toEqual(['k'])
    t.moveIn([{ pos: 0, value: 'A' }])
    expect(t.size).toBe(0)
    expect(t.moveOut([{ pos: 0, value: 'A' }])).toEqual([])
  })

  it('an update replaces removed tags, so only the new slot moves the row', () => {
    const t = new TagTracker()
    t.change('k', { tags: ['A'], active_conditions: [true] }, true)
    t.change('k', { tags: ['B'], removed_tags: ['A'], active_conditions: [true] }, false)
    expect(t.moveOut([{ pos: 0, value: 'A' }])).toEqual([])
    expect(t.moveOut([{ pos: 0, value: 'B' }])).toEqual(['k'])
  })

  it('the index holds only slots of rows still tracked', () => {
    const t = new TagTracker()
    for (let i = 0; i < 100; i++) t.change(`k${i}`, { tags: [`H${i}/1`], active_conditions: [true, true] }, true)
    expect(t.indexedSlots).toBe(100)
    for (let i = 0; i < 50; i++) t.change(`k${i}`, { tags: [`G${i}/1`], removed_tags: [`H${i}/1`] }, false)
    expect(t.indexedSlots).toBe(100)
    for (let i = 0; i < 100; i += 2) t.remove(`k${i}`)
    expect(t.moveOut(Array.from({ length: 50 }, (_, i) => ({ pos: 0, value: `H${50 + i}` })))).toHaveLength(25)
    expect(t.indexedSlots).toBe(25)
    t.clear()
    expect(t.indexedSlots).toBe(0)
  })

  it('an insert without tags (a plain row) drops the tag state of a row with that key', () => {
    const t = new TagTracker()
    t.change('k', { tags: ['A'], active_conditions: [true] }, true)
    t.change('k', {}, true)
    expect(t.size).toBe(0)
    expect(t.indexedSlots).toBe(0)
  })
})
