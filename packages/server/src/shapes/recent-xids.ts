/**
 * The xids of the last `limit` transactions routed, oldest first on request
 * (see `RegistrationTicket`). A ring: `next` is where the next goes. Not an
 * array trimmed with shift(), which would move every entry on every
 * transaction.
 */
export class RecentXids {
  private readonly ring: number[] = []
  private next = 0

  constructor(readonly limit: number) {}

  push(xid: number): void {
    if (this.limit <= 0) return
    this.ring[this.next] = xid
    this.next = this.next + 1 === this.limit ? 0 : this.next + 1
  }

  /** The remembered xids, oldest first. */
  inOrder(): number[] {
    const { ring, next } = this
    return ring.length < this.limit ? [...ring] : [...ring.slice(next), ...ring.slice(0, next)]
  }
}
