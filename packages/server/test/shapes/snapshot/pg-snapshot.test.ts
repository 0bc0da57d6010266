import { describe, expect, it } from 'vitest'
import {
  SnapshotError,
  encodeSnapshotEnd,
  formatPgSnapshot,
  isFullXidVisible,
  isVisibleInSnapshot,
  parsePgSnapshot,
  widenXid,
} from '../../../src/shapes/index.js'
import type { PgSnapshot } from '../../../src/shapes/index.js'

const E = 1n << 32n
const snap = (xmin: bigint, xmax: bigint, xip: bigint[] = []): PgSnapshot => ({ xmin, xmax, xip })
const text = (bytes: Uint8Array): string => new TextDecoder().decode(bytes)

describe('parsePgSnapshot', () => {
  it('parses what pg_current_snapshot() prints', () => {
    expect(parsePgSnapshot('726:726:')).toEqual({ xmin: 726n, xmax: 726n, xip: [] })
    expect(parsePgSnapshot('100:105:100,102,104')).toEqual({ xmin: 100n, xmax: 105n, xip: [100n, 102n, 104n] })
    const big = 5n * E + 7n
    expect(parsePgSnapshot(`${big}:${big + 10n}:${big + 1n}`)).toEqual({ xmin: big, xmax: big + 10n, xip: [big + 1n] })
    expect(parsePgSnapshot('18446744073709551614:18446744073709551615:')).toMatchObject({ xmax: (1n << 64n) - 1n })
  })

  it('round-trips through formatPgSnapshot', () => {
    for (const s of ['3:3:', '100:105:100,102,104', `${9n * E}:${9n * E + 2n}:${9n * E + 1n}`]) expect(formatPgSnapshot(parsePgSnapshot(s))).toBe(s)
  })

  it.each([
    [''],
    ['1:2'],
    ['1:2:3:'],
    ['a:b:'],
    ['-1:2:'],
    ['1:2:,'],
    ['1:2: 1'],
    ['5:4:'], // xmin > xmax
    ['5:9:4'], // xip below xmin
    ['5:9:9'], // xip at xmax
    ['18446744073709551616:18446744073709551616:'], // above 2^64 - 1
  ])('refuses %j', (input) => {
    expect(() => parsePgSnapshot(input)).toThrow(SnapshotError)
    try {
      parsePgSnapshot(input)
    } catch (error) {
      expect((error as SnapshotError).code).toBe('protocol_error')
    }
  })
})

describe('widenXid', () => {
  // [xmax, xid32, full xid]
  const cases: Array<[string, bigint, number, bigint]> = [
    ['same epoch, below xmax', 1000n, 999, 999n],
    ['same epoch, at xmax', 1000n, 1000, 1000n],
    ['same epoch, just above xmax', 1000n, 1001, 1001n],
    ['epoch 3, below', 3n * E + 500n, 10, 3n * E + 10n],
    ['epoch 3, above by less than 2^31', 3n * E + 500n, 500 + 2 ** 31 - 1, 3n * E + 500n + (1n << 31n) - 1n],
    ['epoch 3, above by exactly 2^31: previous epoch', 3n * E + 500n, 500 + 2 ** 31, 2n * E + 500n + (1n << 31n)],
    ['epoch 3, xid near 2^32 with xmax low just past the wrap: previous epoch', 3n * E + 5n, 0xffff_fff0, 2n * E + 0xffff_fff0n],
    ['epoch 3, xmax at the top of its epoch, xid wrapped into the next epoch', 3n * E + 0xffff_fff0n, 3, 4n * E + 3n],
    ['epoch 3, xmax at the top, xid just below', 3n * E + 0xffff_fff0n, 0xffff_ffe0, 3n * E + 0xffff_ffe0n],
    ['epoch 3, below by exactly 2^31: same epoch', 3n * E + 0x9000_0000n, 0x1000_0000, 3n * E + 0x1000_0000n],
    ['epoch 3, below by more than 2^31: next epoch', 3n * E + 0x9000_0001n, 0x1000_0000, 4n * E + 0x1000_0000n],
    ['epoch 0, xid above by more than 2^31 has no previous epoch', 100n, 0xffff_ff00, -256n],
  ]
  it.each(cases)('%s', (_name, xmax, xid32, full) => {
    expect(widenXid(snap(xmax - 50n > 0n ? xmax - 50n : 0n, xmax), xid32)).toBe(full)
  })

  it('refuses values that are not 32-bit xids', () => {
    for (const bad of [-1, 2 ** 32, 1.5, Number.NaN]) expect(() => widenXid(snap(1n, 2n), bad)).toThrow(SnapshotError)
  })
})

describe('isVisibleInSnapshot', () => {
  // [snapshot, xid32, visible]
  const base = 7n * E
  const cases: Array<[string, PgSnapshot, number, boolean]> = [
    ['below xmin', snap(100n, 110n, [100n, 105n]), 99, true],
    ['at xmin, in progress', snap(100n, 110n, [100n, 105n]), 100, false],
    ['between, committed', snap(100n, 110n, [100n, 105n]), 101, true],
    ['between, in progress', snap(100n, 110n, [100n, 105n]), 105, false],
    ['just below xmax, committed', snap(100n, 110n, [100n, 105n]), 109, true],
    ['at xmax', snap(100n, 110n, [100n, 105n]), 110, false],
    ['above xmax', snap(100n, 110n, [100n, 105n]), 111, false],
    ['empty snapshot: below', snap(110n, 110n), 109, true],
    ['empty snapshot: at', snap(110n, 110n), 110, false],
    ['high epoch, committed', snap(base + 10n, base + 20n, [base + 12n]), 11, true],
    ['high epoch, in progress', snap(base + 10n, base + 20n, [base + 12n]), 12, false],
    ['high epoch, future', snap(base + 10n, base + 20n, [base + 12n]), 25, false],
    ['high epoch, old (previous epoch)', snap(base + 10n, base + 20n), 0xf000_0000, true],
    // The snapshot straddles a wraparound of the 32-bit counter: xmin in epoch 7, xmax in epoch 8.
    ['straddling: committed before the wrap', snap(base + 0xffff_fff0n, base + E + 5n, [base + 0xffff_fff5n, base + E + 3n]), 0xffff_fff4, true],
    ['straddling: in progress before the wrap', snap(base + 0xffff_fff0n, base + E + 5n, [base + 0xffff_fff5n, base + E + 3n]), 0xffff_fff5, false],
    ['straddling: committed after the wrap', snap(base + 0xffff_fff0n, base + E + 5n, [base + 0xffff_fff5n, base + E + 3n]), 4, true],
    ['straddling: in progress after the wrap', snap(base + 0xffff_fff0n, base + E + 5n, [base + 0xffff_fff5n, base + E + 3n]), 3, false],
    ['straddling: future after the wrap', snap(base + 0xffff_fff0n, base + E + 5n, [base + 0xffff_fff5n, base + E + 3n]), 5, false],
    ['straddling: below xmin before the wrap', snap(base + 0xffff_fff0n, base + E + 5n), 0xffff_ffe0, true],
    // xmax at the very top of its epoch: a transaction that starts later gets a small xid of the next epoch.
    ['xmax near the top: later transaction after the wrap', snap(base + 0xffff_fff0n, base + 0xffff_fffan), 3, false],
    ['xmax near the top: older transaction', snap(base + 0xffff_fff0n, base + 0xffff_fffan), 0xffff_ffef, true],
  ]
  it.each(cases)('%s', (_name, snapshot, xid32, visible) => {
    expect(isVisibleInSnapshot(snapshot, xid32)).toBe(visible)
  })

  it('agrees with the full-xid rule on a sweep around every edge', () => {
    const snapshots = [snap(1000n, 1010n, [1002n, 1009n]), snap(3n * E - 5n, 3n * E + 5n, [3n * E - 5n, 3n * E]), snap(9n * E + 5n, 9n * E + 5n)]
    for (const snapshot of snapshots) {
      for (let full = snapshot.xmin - 20n; full < snapshot.xmax + 20n; full++) {
        const xid32 = Number(full & (E - 1n))
        const expected = full < snapshot.xmin || (full < snapshot.xmax && !snapshot.xip.includes(full))
        expect(isVisibleInSnapshot(snapshot, xid32), `${full}`).toBe(expected)
        expect(isFullXidVisible(snapshot, full)).toBe(expected)
      }
    }
  })
})

describe('encodeSnapshotEnd', () => {
  it('writes xid8 values as strings', () => {
    expect(text(encodeSnapshotEnd(snap(100n, 105n, [100n, 102n])))).toBe(
      '{"headers":{"control":"snapshot-end","xmin":"100","xmax":"105","xip_list":["100","102"]}}',
    )
    expect(text(encodeSnapshotEnd(snap(5n * E, 5n * E)))).toBe(
      `{"headers":{"control":"snapshot-end","xmin":"${5n * E}","xmax":"${5n * E}","xip_list":[]}}`,
    )
    expect(JSON.parse(text(encodeSnapshotEnd(parsePgSnapshot('18446744073709551614:18446744073709551615:18446744073709551614'))))).toEqual({
      headers: { control: 'snapshot-end', xmin: '18446744073709551614', xmax: '18446744073709551615', xip_list: ['18446744073709551614'] },
    })
  })
})
