import { describe, expect, it } from 'vitest'
import { TeeTarget } from '../../src/shapes/compaction/tee-target.js'

/** A target that records the LSNs it was given, in order. */
function recorder(): { lsns: bigint[]; appendLines(lsn: bigint): number } {
  const lsns: bigint[] = []
  return { lsns, appendLines: (lsn: bigint) => lsns.push(lsn) }
}

const line = (n: number): Uint8Array => Buffer.from(`{"key":"k${n}","value":{"id":"${n}"},"headers":{"operation":"update"}}`)

describe('the compaction tee', () => {
  it('holds no copy of a replayed part (at or below the LSN the log already held when it started)', () => {
    const first = recorder()
    const tee = new TeeTarget(first, 100n)
    for (const lsn of [90n, 100n, 101n, 120n]) tee.appendLines(lsn, [0], [line(Number(lsn))], 1, undefined, 1)
    // The shape's log gets every part (it skips replays itself); the held copies start after 100.
    expect(first.lsns).toEqual([90n, 100n, 101n, 120n])
    expect(tee.pending!.map((p) => p.lsn)).toEqual([101n, 120n])
    const second = recorder()
    tee.drainInto(second)
    tee.appendLines(130n, [0], [line(130)], 1, undefined, 1)
    expect(second.lsns).toEqual([101n, 120n, 130n])
    expect(tee.failed).toBeUndefined()
  })

  it('gives up past its bound of held bytes, dropping what it held, while the shape log keeps every part', () => {
    const first = recorder()
    const bound = 10 * line(0).length
    const tee = new TeeTarget(first, 0n, bound)
    for (let lsn = 1; lsn <= 30; lsn++) tee.appendLines(BigInt(lsn), [0], [line(lsn)], 1, undefined, 1)
    expect(first.lsns).toHaveLength(30)
    expect(tee.failed).toBeInstanceOf(Error)
    expect(tee.pending).toEqual([])
    const second = recorder()
    tee.drainInto(second)
    expect(second.lsns).toEqual([])
  })
})
