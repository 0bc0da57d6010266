import { snapshotEndMessage } from '@sluice/protocol'
import { SnapshotError } from './snapshot-error.js'

/**
 * A Postgres MVCC snapshot as `pg_current_snapshot()` prints it
 * (`xmin:xmax:xip,xip,…`, all xid8: 64-bit, epoch in the high half).
 *
 * Visibility: a transaction is visible iff xid < xmin, or xid < xmax and xid
 * is not in xip (it had committed when the snapshot was taken). An aborted
 * transaction is "visible" by these rules too; that is harmless for stitching
 * because the replication stream never delivers aborted transactions.
 */
export interface PgSnapshot {
  readonly xmin: bigint
  readonly xmax: bigint
  readonly xip: readonly bigint[]
}

const SNAPSHOT_TEXT = /^(\d{1,20}):(\d{1,20}):(\d{1,20}(?:,\d{1,20})*)?$/
const U64_MAX = (1n << 64n) - 1n
const EPOCH = 1n << 32n
const HALF = 1n << 31n
const LOW_MASK = EPOCH - 1n

/** Parses `pg_current_snapshot()::text` (also `txid_current_snapshot()::text`, which prints the same). */
export function parsePgSnapshot(text: string): PgSnapshot {
  const match = SNAPSHOT_TEXT.exec(text)
  if (match === null) throw new SnapshotError('protocol_error', `not a snapshot: ${JSON.stringify(text)}`)
  const parse = (digits: string): bigint => {
    const value = BigInt(digits)
    if (value > U64_MAX) throw new SnapshotError('protocol_error', `xid out of range in snapshot ${JSON.stringify(text)}`)
    return value
  }
  const xmin = parse(match[1] ?? '')
  const xmax = parse(match[2] ?? '')
  const xip = match[3] === undefined ? [] : match[3].split(',').map(parse)
  if (xmin > xmax || xip.some((xid) => xid < xmin || xid >= xmax)) {
    throw new SnapshotError('protocol_error', `inconsistent snapshot ${JSON.stringify(text)}`)
  }
  return Object.freeze({ xmin, xmax, xip: Object.freeze(xip) })
}

/** The snapshot's text form, as Postgres prints it. */
export function formatPgSnapshot(snapshot: PgSnapshot): string {
  return `${snapshot.xmin}:${snapshot.xmax}:${snapshot.xip.join(',')}`
}

/**
 * A 32-bit xid (what pgoutput's Begin carries) as the full xid8 it stands for,
 * taken relative to the snapshot's xmax: the xid8 whose low half is `xid32`
 * and which lies within 2^31 of xmax (Postgres's own rule for widening an xid
 * near a known full xid). So an xid just below xmax's low half is in xmax's
 * epoch; one more than 2^31 above it is from the previous epoch; and one that
 * *wrapped* (xmax's low half near 2^32, xid32 small) is in the next epoch,
 * i.e. after the snapshot. The result is negative only for an xid32 that no
 * transaction of this cluster could have had (before xid 0 of epoch 0).
 */
export function widenXid(snapshot: PgSnapshot, xid32: number): bigint {
  if (!Number.isInteger(xid32) || xid32 < 0 || xid32 > 0xffff_ffff) {
    throw new SnapshotError('invalid_request', `not a 32-bit xid: ${xid32}`)
  }
  let diff = (BigInt(xid32) - (snapshot.xmax & LOW_MASK)) & LOW_MASK
  if (diff >= HALF) diff -= EPOCH
  return snapshot.xmax + diff
}

/**
 * Whether the transaction with this 32-bit xid (from pgoutput) is visible in
 * the snapshot, i.e. its effects are already in the snapshot's rows and its
 * replicated changes must be dropped when stitching.
 */
export function isVisibleInSnapshot(snapshot: PgSnapshot, xid32: number): boolean {
  return isFullXidVisible(snapshot, widenXid(snapshot, xid32))
}

/** As {@link isVisibleInSnapshot}, for a full xid8. */
export function isFullXidVisible(snapshot: PgSnapshot, xid: bigint): boolean {
  if (xid < snapshot.xmin) return true
  if (xid >= snapshot.xmax) return false
  return !snapshot.xip.includes(xid)
}

const utf8 = new TextEncoder()

/** `{"headers":{"control":"snapshot-end","xmin":"…","xmax":"…","xip_list":["…",…]}}`, the line after the snapshot's rows. */
export function encodeSnapshotEnd(snapshot: PgSnapshot): Uint8Array {
  return utf8.encode(snapshotEndMessage(snapshot.xmin, snapshot.xmax, snapshot.xip))
}
