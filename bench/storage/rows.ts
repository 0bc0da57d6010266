/**
 * The rows every engine stores: change lines shaped like the ones the server
 * encodes (docs/protocol.md), pre-encoded once, so the timed loops measure storage
 * and not JSON encoding. A seeded generator makes every run, and every engine
 * within a run, store the same bytes.
 */
import type { LogEntryInput } from '@sluice/storage'
import { seededRandom as prng } from '@sluice/test-utils'

/** Target mean size of one JSON line, in bytes (the brief's ~200-byte rows). */
export const ROW_BYTES = 200

/** Distinct rows in the pool; appends cycle through it. Large enough that no engine sees a tiny repeating set. */
const POOL_ROWS = 4096

/** Benchmarks must not depend on Math.random: the workloads' one seeded generator. */
export { prng }

const WORDS = ['alpha', 'bravo', 'cedar', 'delta', 'ember', 'fjord', 'gale', 'harbor', 'iris', 'juniper', 'kiln', 'lumen']

/** One change line for row `id`, padded with its title so the mean lands on ROW_BYTES. */
export function changeLine(id: number, lsn: bigint, op: number, txid: number, random: () => number): string {
  const operation = random() < 0.6 ? 'insert' : random() < 0.8 ? 'update' : 'delete'
  const build = (title: string): string =>
    JSON.stringify({
      key: `"public"."items"/"${id}"`,
      value: { id: String(id), title },
      headers: { operation, relation: ['public', 'items'], lsn: String(lsn), op_position: op, txids: [txid] },
    })
  const bare = build('')
  // Titles vary by +-20 bytes around the padding that reaches the target mean.
  const pad = Math.max(0, ROW_BYTES - bare.length + Math.floor(random() * 41) - 20)
  let title = ''
  while (title.length < pad) title += `${WORDS[Math.floor(random() * WORDS.length)]!} `
  return build(title.slice(0, pad))
}

export interface RowPool {
  readonly rows: readonly Uint8Array[]
  readonly meanBytes: number
}

export function rowPool(seed = 1): RowPool {
  const random = prng(seed)
  const encoder = new TextEncoder()
  const rows: Uint8Array[] = []
  let total = 0
  for (let i = 0; i < POOL_ROWS; i++) {
    const row = encoder.encode(changeLine(100_000 + i, 0x1_6b37_4d48n + BigInt(i), i % 1000, 750_000 + i, random))
    rows.push(row)
    total += row.length
  }
  return { rows, meanBytes: total / rows.length }
}

/**
 * Hands out transactions with strictly increasing commit LSNs, the way the
 * replication stream does. Every engine gets its own source, started at the
 * same LSN, so all of them store the same offsets and the same bytes.
 */
export class TxSource {
  private next: bigint
  private cursor = 0

  constructor(
    private readonly pool: RowPool,
    firstLsn = 0x1_0000_0000n,
  ) {
    this.next = firstLsn
  }

  /** The last LSN handed out (0 before the first). */
  lastLsn = 0n

  transaction(rows: number): LogEntryInput[] {
    const tx = this.next
    // LSNs advance by roughly the WAL bytes a transaction of that size takes.
    this.next += BigInt(64 + rows * 256)
    this.lastLsn = tx
    const entries: LogEntryInput[] = new Array<LogEntryInput>(rows)
    for (let op = 0; op < rows; op++) {
      const json = this.pool.rows[this.cursor]!
      this.cursor = (this.cursor + 1) % this.pool.rows.length
      entries[op] = { offset: { tx, op: BigInt(op) }, json }
    }
    return entries
  }
}

/** Stored size of a transaction (each entry is its JSON plus one separator byte). */
export function storedBytes(entries: readonly LogEntryInput[]): number {
  let n = 0
  for (const e of entries) n += e.json.length + 1
  return n
}
