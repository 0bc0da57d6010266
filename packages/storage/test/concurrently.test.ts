import { describe, expect, it } from 'vitest'
import { forEachConcurrently } from '../src/index.js'

const tick = () => new Promise((r) => setTimeout(r, 1))

describe('forEachConcurrently', () => {
  it('takes items in order with at most `limit` in flight', async () => {
    const started: number[] = []
    let inFlight = 0
    let most = 0
    await forEachConcurrently([0, 1, 2, 3, 4, 5, 6], 3, async (i) => {
      started.push(i)
      most = Math.max(most, ++inFlight)
      await tick()
      inFlight--
    })
    expect(started).toEqual([0, 1, 2, 3, 4, 5, 6])
    expect(most).toBe(3)
  })

  it('rejects with the first failure and takes no further items', async () => {
    const started: number[] = []
    const run = forEachConcurrently([0, 1, 2, 3, 4, 5, 6, 7], 2, async (i) => {
      started.push(i)
      await tick()
      if (i === 2) throw new Error('item 2 failed')
    })
    await expect(run).rejects.toThrow('item 2 failed')
    await tick()
    await tick()
    // 0 and 1, then 2 and 3; the worker that took 3 may take one more before it sees the failure.
    expect(started.length).toBeLessThanOrEqual(5)
    expect(started.slice(0, 4)).toEqual([0, 1, 2, 3])
  })

  it('does nothing for no items and runs one at a time with a limit of one', async () => {
    await forEachConcurrently([], 4, async () => {
      throw new Error('never called')
    })
    const order: string[] = []
    await forEachConcurrently(['a', 'b'], 1, async (x) => {
      order.push(`start ${x}`)
      await tick()
      order.push(`end ${x}`)
    })
    expect(order).toEqual(['start a', 'end a', 'start b', 'end b'])
  })
})
