/**
 * Transaction ids, for matching an app's own write (its `pg_current_xact_id()`)
 * with the changes that sync back.
 *
 * Change messages carry the 32-bit xid of their transaction (`txids`, from
 * pgoutput); `pg_current_xact_id()` is an xid8: epoch << 32 | xid. Matching on
 * the low 32 bits is exact for any write a client is waiting on (an epoch
 * wraps after 4 billion transactions).
 *
 * A write that committed before the shape's snapshot never appears as a
 * change: it is in the snapshot rows. `snapshot-end` carries the snapshot's
 * visibility (xmin, xmax, xip_list as xid8 strings, docs/protocol.md §3.4); a
 * transaction is visible in it when it is below xmin, or below xmax and not
 * in xip_list.
 */
export type Txid = number | bigint | string

const LOW_32 = 0xffff_ffffn

/** The txid as an unsigned 64-bit value; throws RangeError on anything else. */
export function toXid8(txid: Txid): bigint {
  const value = typeof txid === 'bigint' ? txid : BigInt(txid)
  if (value < 0n || value > 0xffff_ffff_ffff_ffffn) throw new RangeError(`not a transaction id: ${String(txid)}`)
  return value
}

export function lowXid(txid: Txid): number {
  return Number(toXid8(txid) & LOW_32)
}

export interface SnapshotVisibility {
  readonly xmin: bigint
  readonly xmax: bigint
  readonly xip: ReadonlySet<bigint>
}

export function snapshotVisibility(headers: { xmin: string; xmax: string; xip_list: readonly string[] }): SnapshotVisibility {
  return { xmin: BigInt(headers.xmin), xmax: BigInt(headers.xmax), xip: new Set(headers.xip_list.map((x) => BigInt(x))) }
}

/**
 * Whether the transaction's effects are in the snapshot. A 32-bit txid (below
 * 2^32) is placed in xmax's epoch first, or the one before if it would land
 * above xmax.
 */
export function visibleInSnapshot(txid: Txid, snapshot: SnapshotVisibility): boolean {
  let xid = toXid8(txid)
  if (xid <= LOW_32 && snapshot.xmax > LOW_32) {
    xid |= snapshot.xmax & ~LOW_32
    if (xid > snapshot.xmax) xid -= LOW_32 + 1n
  }
  if (xid < snapshot.xmin) return true
  return xid < snapshot.xmax && !snapshot.xip.has(xid)
}
