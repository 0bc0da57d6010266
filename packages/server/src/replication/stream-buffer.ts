import type {
  Awaitable,
  BufferedTransaction,
  Change,
  ChangeSink,
  StreamAbort,
  StreamCommit,
  StreamedChange,
  Transaction,
  TransactionSink,
} from './change-sink.js'
import type { LogicalMessage, Relation } from './pgoutput-messages.js'

/**
 * Where the changes of a streamed transaction wait until it commits or aborts:
 * `MemoryStreamBuffer` (in memory, for tests and as the reference) and
 * `SpillStreamBuffer` (bounded memory, the rest in a spill file).
 *
 * The rules every buffer follows: changes are kept per top-level xid, in the
 * order appended. Before the first change of a `subxid` not seen yet for that
 * xid, the buffer remembers where it starts. A subtransaction abort
 * (`subxid !== xid`) cuts the transaction back to that start (if it has one):
 * everything after the first change of an aborted subtransaction belongs to it
 * or to its own children, because changes are streamed in WAL order (Postgres's
 * own apply worker relies on the same fact). Any other abort drops the xid.
 * `commit` hands the changes back in order, as one transaction; the
 * transactions delivered whole before the commit have smaller LSNs and those
 * after larger ones, so commit order still holds.
 */
export interface StreamBuffer {
  /** Buffers the next changes of `xid`, in order. */
  append(xid: number, changes: readonly StreamedChange[]): Awaitable
  abort(abort: StreamAbort): Awaitable
  /**
   * The committed transaction's changes, in order, in batches; the xid is closed
   * at once (a later `append` of it starts a new transaction). An xid with
   * nothing buffered yields nothing. Iterate it once.
   */
  commit(xid: number): AsyncIterable<readonly Change[]>
  /** Top-level xids with buffered changes (neither committed nor dropped yet). */
  readonly openXids: number[]
}

/**
 * Work done on a streamed transaction while it streams in, beside the
 * buffer's copy (the shape router's `RoutedAhead`): it may deliver the
 * transaction itself at the commit, from what it prepared, or decline (then
 * the buffered copy is delivered as usual). Called in stream order, each
 * call's promise awaited before the next, like the buffer.
 */
export interface StreamAhead {
  append(xid: number, changes: readonly StreamedChange[]): Awaitable
  abort(abort: StreamAbort): Awaitable
  /** The delivery of the committed transaction, or undefined to have the buffered copy delivered instead. */
  commit(commit: StreamCommit): Promise<void> | undefined
}

/**
 * The ChangeSink that joins streamed transactions: it keeps their changes in a
 * `StreamBuffer` and hands the target only committed transactions, small ones
 * whole and as they come, streamed ones at their commit as a sequence of
 * batches read back from the buffer, or, when `ahead` prepared one and takes
 * it, from there (the buffer's copy is then dropped).
 */
export class BufferingSink implements ChangeSink {
  constructor(
    readonly buffer: StreamBuffer,
    private readonly target: TransactionSink,
    private readonly ahead?: StreamAhead,
  ) {}

  onTransaction(transaction: Transaction): Awaitable {
    return this.target.onTransaction(transaction)
  }

  onStreamedChanges(xid: number, changes: readonly StreamedChange[]): Awaitable {
    const buffered = this.buffer.append(xid, changes)
    return this.ahead === undefined ? buffered : both(buffered, this.ahead.append(xid, changes))
  }

  onStreamAbort(abort: StreamAbort): Awaitable {
    const buffered = this.buffer.abort(abort)
    return this.ahead === undefined ? buffered : both(buffered, this.ahead.abort(abort))
  }

  onStreamCommit(commit: StreamCommit): Awaitable {
    const { xid, lsn, endLsn, commitTime } = commit
    const delivery = this.ahead?.commit(commit)
    if (delivery === undefined) return this.target.onBufferedTransaction({ xid, lsn, endLsn, commitTime, batches: this.buffer.commit(xid) })
    // Delivered from what was routed ahead: the buffer's copy goes as a redelivery's would.
    return both(delivery, this.buffer.abort({ xid, subxid: xid, reason: 'already-durable' }))
  }

  onRelation(relation: Relation, previous: Relation | undefined): Awaitable {
    return this.target.onRelation?.(relation, previous)
  }

  onLogicalMessage(message: LogicalMessage): Awaitable {
    return this.target.onLogicalMessage?.(message)
  }
}

function both(a: Awaitable, b: Awaitable): Awaitable {
  if (a === undefined) return b
  if (b === undefined) return a
  return Promise.all([a, b]).then(() => undefined)
}

/**
 * A TransactionSink that reads every buffered transaction back whole and hands
 * `target` one `Transaction` per commit, in order: for tests and small tools,
 * never for production (a big transaction is held in memory).
 */
export function wholeTransactions(target: (transaction: Transaction) => Awaitable, hooks: Pick<TransactionSink, 'onRelation' | 'onLogicalMessage'> = {}): TransactionSink {
  return {
    onTransaction: target,
    async onBufferedTransaction(buffered: BufferedTransaction): Promise<void> {
      const changes: Change[] = []
      for await (const batch of buffered.batches) changes.push(...batch)
      const { xid, lsn, endLsn, commitTime } = buffered
      await target({ xid, lsn, endLsn, commitTime, origin: undefined, changes })
    },
    ...hooks,
  }
}
