import type { LogicalMessage } from '../replication/index.js'

/**
 * What subquery shapes hook into the router (router.ts keeps the routing):
 * functions run once the transaction being routed has reached every target,
 * the stream's logical messages, and what is promised to the store. Every
 * routed transaction's LSN is promised at once unless a hold is taken: a
 * move-in writes lines at the LSNs of transactions routed while its query
 * ran, so those are promised when the last hold is released, up to the
 * highest LSN routed or written meanwhile.
 */
/** The LSN commit hooks are run with for a transaction that failed part way (`RouterHooks.abandoned`). */
export const ABANDONED_LSN = -1n

export class RouterHooks {
  private holds = 0
  private heldLsn = 0n
  private commitHooks: Array<(lsn: bigint, xid: number) => void> = []
  private readonly messageListeners = new Set<(message: LogicalMessage) => void>()

  constructor(private readonly advance: (lsn: bigint) => void) {}

  /** Whether a hold keeps routed transactions from the store. */
  get held(): boolean {
    return this.holds > 0
  }

  /** Takes a hold; the returned release (with the highest LSN the holder wrote at, if above the routed ones) gives it back, once. */
  hold(): (wroteAt?: bigint) => void {
    this.holds++
    let released = false
    return (wroteAt = 0n) => {
      if (released) return
      released = true
      if (wroteAt > this.heldLsn) this.heldLsn = wroteAt
      if (--this.holds === 0 && this.heldLsn > 0n) {
        const lsn = this.heldLsn
        this.heldLsn = 0n
        this.advance(lsn)
      }
    }
  }

  /** Runs `fn` at the next `committed`, once. */
  atCommit(fn: (lsn: bigint, xid: number) => void): void {
    this.commitHooks.push(fn)
  }

  /** A transaction reached every target: the commit hooks run. */
  committed(lsn: bigint, xid: number): void {
    if (this.commitHooks.length === 0) return
    const hooks = this.commitHooks
    this.commitHooks = []
    for (const hook of hooks) hook(lsn, xid)
  }

  /**
   * The transaction being routed failed before reaching every target (it is
   * delivered again, whole, after a reconnect): its commit hooks run with
   * `ABANDONED_LSN`, which names no transaction, so their owners drop what they
   * gathered of it instead of adding the second delivery to the first.
   */
  abandoned(): void {
    if (this.commitHooks.length === 0) return
    const hooks = this.commitHooks
    this.commitHooks = []
    for (const hook of hooks) hook(ABANDONED_LSN, -1)
  }

  /** A routed transaction: promised to the store now, or once no hold is left. */
  routed(lsn: bigint): void {
    if (this.holds === 0) this.advance(lsn)
    else if (lsn > this.heldLsn) this.heldLsn = lsn
  }

  onMessage(listener: (message: LogicalMessage) => void): () => void {
    this.messageListeners.add(listener)
    return () => this.messageListeners.delete(listener)
  }

  message(message: LogicalMessage): void {
    for (const listener of this.messageListeners) listener(message)
  }
}
