import type { ShapeLogStore } from '@sluice/storage'
import type { Awaitable, ChangeSink, StreamAbort, StreamCommit, StreamedChange, Transaction } from './replication/change-sink.js'
import type { LogicalMessage, Relation } from './replication/pgoutput-messages.js'

/**
 * A ChangeSink in front of another that tells when a large transaction (one
 * that arrived piecewise: streamed by Postgres, or past the assembler's
 * `maxTransactionBytes`) is durable in the store: the moment its spill,
 * routing and write-back buffers have become garbage. Transactions delivered
 * whole are not reported. Committed ones only; several committed before one
 * flush are reported once, with the highest LSN.
 */
export class LargeTransactionWatch implements ChangeSink {
  private pending: bigint | undefined
  private readonly off: () => void

  constructor(
    private readonly inner: ChangeSink,
    store: Pick<ShapeLogStore, 'onFlush'>,
    onDurable: (lsn: bigint) => void,
  ) {
    this.off = store.onFlush(
      (result) => {
        const lsn = this.pending
        if (lsn === undefined || result.durableLsn < lsn) return
        this.pending = undefined
        onDurable(lsn)
      },
      { advanced: false },
    )
  }

  onTransaction(transaction: Transaction): Awaitable {
    return this.inner.onTransaction(transaction)
  }

  onStreamedChanges(xid: number, changes: readonly StreamedChange[]): Awaitable {
    return this.inner.onStreamedChanges(xid, changes)
  }

  onStreamCommit(commit: StreamCommit): Awaitable {
    // The store's watermark covers the commit only once the transaction is appended and synced.
    if (this.pending === undefined || commit.lsn > this.pending) this.pending = commit.lsn
    return this.inner.onStreamCommit(commit)
  }

  onStreamAbort(abort: StreamAbort): Awaitable {
    return this.inner.onStreamAbort(abort)
  }

  onRelation(relation: Relation, previous: Relation | undefined): Awaitable {
    return this.inner.onRelation?.(relation, previous)
  }

  onLogicalMessage(message: LogicalMessage): Awaitable {
    return this.inner.onLogicalMessage?.(message)
  }

  close(): void {
    this.off()
  }
}
