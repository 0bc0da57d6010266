import type {
  Awaitable,
  Change,
  ChangeSink,
  StreamAbort,
  StreamCommit,
  StreamedChange,
  Transaction,
} from './change-sink.js'
import type { LogicalMessage, Relation } from './pgoutput-messages.js'

interface OpenStream {
  changes: Change[]
  /** subxid → index of its first change: a subtransaction abort truncates there. */
  readonly subxactStart: Map<number, number>
}

/**
 * The reference implementation of the buffering that `ChangeSink` describes,
 * in memory: streamed changes are collected per top-level xid and handed on as
 * one whole `Transaction` at commit. For tests and as a model for a spilling
 * implementation; it holds every open streamed transaction in memory, which is
 * exactly what a production sink must not do.
 */
export class MemoryStreamBuffer implements ChangeSink {
  private readonly open = new Map<number, OpenStream>()

  constructor(
    private readonly target: (transaction: Transaction) => Awaitable,
    private readonly hooks: Pick<ChangeSink, 'onRelation' | 'onLogicalMessage'> = {},
  ) {}

  /** Top-level xids with buffered changes. */
  get openXids(): number[] {
    return [...this.open.keys()]
  }

  onTransaction(transaction: Transaction): Awaitable {
    return this.target(transaction)
  }

  onStreamedChanges(xid: number, changes: readonly StreamedChange[]): Awaitable {
    let stream = this.open.get(xid)
    if (stream === undefined) {
      stream = { changes: [], subxactStart: new Map() }
      this.open.set(xid, stream)
    }
    for (const { subxid, change } of changes) {
      if (!stream.subxactStart.has(subxid)) stream.subxactStart.set(subxid, stream.changes.length)
      stream.changes.push(change)
    }
    return undefined
  }

  onStreamCommit(commit: StreamCommit): Awaitable {
    const stream = this.open.get(commit.xid)
    this.open.delete(commit.xid)
    return this.target({
      xid: commit.xid,
      lsn: commit.lsn,
      endLsn: commit.endLsn,
      commitTime: commit.commitTime,
      origin: undefined,
      changes: stream?.changes ?? [],
    })
  }

  onStreamAbort(abort: StreamAbort): Awaitable {
    if (abort.subxid === abort.xid) {
      this.open.delete(abort.xid)
      return undefined
    }
    const stream = this.open.get(abort.xid)
    const start = stream?.subxactStart.get(abort.subxid)
    if (stream === undefined || start === undefined) return undefined
    stream.changes.length = start
    // Subtransactions that began after the aborted one were nested in it.
    for (const [subxid, first] of stream.subxactStart) if (first >= start) stream.subxactStart.delete(subxid)
    return undefined
  }

  onRelation(relation: Relation, previous: Relation | undefined): Awaitable {
    return this.hooks.onRelation?.(relation, previous)
  }

  onLogicalMessage(message: LogicalMessage): Awaitable {
    return this.hooks.onLogicalMessage?.(message)
  }
}
