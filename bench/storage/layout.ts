/**
 * The read logs, planned before any engine writes them: how many transactions
 * make the wanted number of chunks, where the chunks end, and which mid-chunk
 * offsets the readers start from. Every engine then appends the same
 * transactions (same seed, same LSNs), so all of them hold byte-identical logs
 * and answer each read with the same bytes, which the runner checks.
 */
import type { LogOffset } from '@sluice/protocol'
import type { RowPool } from './rows.js'
import { TxSource, prng } from './rows.js'

export interface ReadStart {
  /** Read after this offset: an entry in the middle of a chunk. */
  readonly after: LogOffset
  /** Bytes a read of the rest of that chunk plus `n` whole chunks returns, by n. */
  readonly bytesFor: ReadonlyMap<number, number>
}

export interface ReadLogPlan {
  readonly chunkBytes: number
  readonly rowsPerTx: number
  readonly transactions: number
  readonly lastLsn: bigint
  readonly closedChunks: number
  readonly totalBytes: number
  readonly starts: readonly ReadStart[]
}

/**
 * Plans a live region of at least `chunks` closed chunks and `startCount`
 * starting offsets, each in a chunk that still has `maxRead` closed chunks
 * after it, at a random point between 20% and 80% of the chunk.
 */
export function planReadLog(
  pool: RowPool,
  options: { chunkBytes: number; chunks: number; rowsPerTx: number; startCount: number; reads: readonly number[]; seed: number },
): ReadLogPlan {
  const { chunkBytes, chunks, rowsPerTx } = options
  const source = new TxSource(pool)
  // Per entry: offset and end position in the live region; per chunk: its end entry.
  const offsets: LogOffset[] = []
  const ends: number[] = []
  const chunkEnds: number[] = []
  let pos = 0
  let fill = 0
  let transactions = 0
  while (chunkEnds.length < chunks) {
    const tx = source.transaction(rowsPerTx)
    transactions++
    for (const e of tx) {
      const size = e.json.length + 1
      pos += size
      fill += size
      offsets.push(e.offset)
      ends.push(pos)
      if (fill >= chunkBytes) {
        chunkEnds.push(offsets.length)
        fill = 0
      }
    }
    if (transactions > 1e7) throw new Error('read log plan does not converge')
  }
  const maxRead = Math.max(...options.reads)
  const lastStartChunk = chunkEnds.length - 1 - maxRead
  if (lastStartChunk < 0) throw new Error(`a read log of ${chunks} chunks cannot serve reads of ${maxRead} chunks`)
  const random = prng(options.seed)
  const starts: ReadStart[] = []
  for (let i = 0; i < options.startCount; i++) {
    const chunk = i % (lastStartChunk + 1)
    const first = chunk > 0 ? chunkEnds[chunk - 1]! : 0
    const last = chunkEnds[chunk]! - 1
    const entry = first + Math.floor((last - first) * (0.2 + 0.6 * random()))
    const bytesFor = new Map<number, number>()
    for (const n of options.reads) bytesFor.set(n, ends[chunkEnds[chunk + n]! - 1]! - ends[entry]!)
    starts.push({ after: offsets[entry]!, bytesFor })
  }
  return {
    chunkBytes,
    rowsPerTx,
    transactions,
    lastLsn: source.lastLsn,
    closedChunks: chunkEnds.length,
    totalBytes: pos,
    starts,
  }
}

/** Appends a planned read log to anything with `append` (all engines get the same transactions). */
export function* planTransactions(pool: RowPool, plan: ReadLogPlan): Generator<ReturnType<TxSource['transaction']>> {
  const source = new TxSource(pool)
  for (let i = 0; i < plan.transactions; i++) yield source.transaction(plan.rowsPerTx)
}
