import type { DeleteChange, InsertChange, UpdateChange } from '../replication/index.js'
import type { ChangeEncoder, EncodedLine } from './change-encoder.js'
import { LineScratch } from './line-scratch.js'
import type { Invalidation } from './route-contracts.js'
import type { RoutedShape, TableRoute } from './table-route.js'

/*
 * The router's scratch for the transaction being routed: which shapes took
 * which changes, and each change's encoded lines. Built to be reused from one
 * transaction to the next, so that routing a one-row transaction allocates
 * next to nothing.
 */

export type Variant = 'insert' | 'update' | 'delete'

/** Encoded lines of one change in one variant, for one encoder: [not last, last]. */
export type LineSlot = [EncodedLine[] | undefined, EncodedLine[] | undefined]

/**
 * A change as its shapes take it, with its lines per encoder (column
 * projection). Most changes reach shapes of a single encoder, so the first
 * encoder's lines sit in a field and a Map is made only for a second one: a
 * Map per change would be a measurable share of what routing allocates.
 */
export class Item {
  private encoder: ChangeEncoder | undefined
  private slot: LineSlot | undefined
  private others: Map<ChangeEncoder, LineSlot> | undefined

  constructor(
    readonly change: InsertChange | UpdateChange | DeleteChange,
    readonly variant: Variant,
    readonly op: number,
  ) {}

  slotFor(encoder: ChangeEncoder): LineSlot {
    if (this.encoder === undefined) {
      this.encoder = encoder
      return (this.slot = [undefined, undefined])
    }
    if (this.encoder === encoder) return this.slot!
    this.others ??= new Map()
    let slot = this.others.get(encoder)
    if (slot === undefined) {
      slot = [undefined, undefined]
      this.others.set(encoder, slot)
    }
    return slot
  }

  /** Drops the lines encoded so far (views of scratch memory about to be reused): the next `slotFor` starts afresh. */
  forgetLines(): void {
    this.encoder = undefined
    this.slot = undefined
    this.others = undefined
  }
}

export const NO_ITEMS: readonly Item[] = []

/** A table whose shapes the transaction being routed invalidates, and why. */
export interface RouteInvalidation {
  readonly route: TableRoute
  readonly reason: Invalidation
}

/**
 * Routing state of one transaction. Reused once the transaction is done
 * (`start` makes it another's): with one row per transaction, a new one with
 * its lists for each would be a noticeable share of routing's garbage.
 */
export class TxnRouting {
  /** Its number: what its shapes' `txnMark` says while they hold its items. */
  mark = 0
  lsn = 0n
  xid = 0
  nextIndex = 0
  /**
   * The shapes that took something, in the order they first did: the first
   * `count` entries. The three lists keep their length from transaction to
   * transaction (`clear` empties the slots): cutting a list's length to 0
   * drops its store, so with one row per transaction each list would grow a
   * new one for every transaction.
   */
  readonly touched: Array<RoutedShape | undefined> = []
  count = 0
  /**
   * Per touched shape (same index): the newest item, not yet emitted (whether it is the shape's
   * last is not known yet), and items known not to be its last, waiting for the next part.
   * Here, not on the shapes: a shape is an old object, and storing a new item in it on every
   * change would give each young-generation collection one more old page to scan (with 100k
   * shapes, a page per change); these lists are a few objects the collector finds together. And
   * not in Maps per transaction: a Map per transaction is a measurable share of routing's garbage.
   */
  readonly held: Array<Item | undefined> = []
  readonly pending: Array<Item[] | undefined> = []
  /** Tables truncated or otherwise invalidated by this transaction. */
  readonly invalidations: RouteInvalidation[] = []
  /**
   * Where its lines are encoded; reset once the transaction is done (no line outlives it: targets copy),
   * and a buffered transaction's after each batch (`reuseLines`).
   */
  readonly lines = new LineScratch()

  start(mark: number, lsn: bigint, xid: number): this {
    this.mark = mark
    this.lsn = lsn
    this.xid = xid
    return this
  }

  /**
   * Between two batches of a buffered transaction, once every part but each
   * shape's held item has gone out: what was encoded is in the targets (they
   * copy), so the scratch starts over. The held items forget the lines they
   * may have cached for other shapes, and are encoded again when they go out.
   * Without this a huge transaction's lines would fill the scratch to its
   * bound and then take a buffer each, hundreds of MiB of garbage for a few
   * million rows.
   */
  reuseLines(): void {
    const { held } = this
    for (let i = 0; i < this.count; i++) held[i]?.forgetLines()
    this.lines.reset()
  }

  /** Forgets the transaction (and the shapes it touched, so a removed shape is not kept alive). */
  clear(): void {
    this.nextIndex = 0
    const n = this.count
    const { touched, held, pending } = this
    // A loop, not fill(): with one row per transaction n is 1, and three builtin calls per transaction cost more than it.
    for (let i = 0; i < n; i++) {
      touched[i] = undefined
      held[i] = undefined
      pending[i] = undefined
    }
    this.count = 0
    this.invalidations.length = 0
    this.lines.reset()
  }
}
