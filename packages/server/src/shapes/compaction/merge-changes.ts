import type { LogOffset } from '@sluice/protocol'
import { compareOffsets } from '@sluice/protocol'

/*
 * What compaction keeps of a log's prefix (docs/protocol.md §4.5): per row key,
 * one message that brings a client from any earlier offset to the row as it
 * stands at the compaction point, at the offset of the key's last change. So
 * an offset a client holds resolves in the compacted log exactly as it did in
 * the original: the entries after it are the keys that changed after it.
 *
 *   row present, known in full   `insert` with the whole row (a client that has
 *                                the key replaces it, one that has not adds it)
 *   row present, only changes    `update` with every column the changes carried,
 *     known (log=changes_only    latest value each: a client merges it into what
 *     with no insert seen)       it holds, as it would the updates themselves
 *   row gone                     `delete` (a client that still holds it must
 *                                hear it; one that does not ignores it)
 *   snapshot row never changed   left where it is, at its 0_n
 */

type Row = Record<string, string | null>

/** A map entry and its state object, roughly, beside the key's characters. */
const KEY_STATE_BYTES = 160

interface Message {
  key?: string
  value?: Row
  headers: { operation?: string; relation?: unknown; lsn?: string; op_position?: number; txids?: unknown; control?: string }
}

/** A key's state at the compaction point; `snapshot` while only its snapshot row is known. */
interface KeyState {
  offset: LogOffset
  /** `rebase`: changed since its snapshot row, whose values the second pass merges in. */
  op: 'insert' | 'update' | 'delete' | 'snapshot' | 'rebase'
  value: Row | undefined
  relation: unknown
  txids: unknown
}

/** One message of the compacted live region. */
export interface MergedEntry {
  readonly offset: LogOffset
  readonly json: Buffer
}

export class ChangeMerger {
  private readonly keys = new Map<string, KeyState>()
  /** The snapshot-end line, kept as it was. */
  snapshotEnd: Buffer | undefined
  /** Live messages taken (the history the merge replaces). */
  changes = 0
  /** An estimate of the memory the map holds (keys, states, the values of changed keys), for the compaction's budget. */
  heldBytes = 0

  /** A snapshot row of chunk `chunk`. */
  snapshotRow(json: Buffer, chunk: bigint): void {
    const m = JSON.parse(json.toString('utf8')) as Message
    if (m.key === undefined) {
      if (m.headers.control === 'snapshot-end') this.snapshotEnd = Buffer.from(json)
      return
    }
    this.keys.set(m.key, { offset: { tx: 0n, op: chunk }, op: 'snapshot', value: undefined, relation: undefined, txids: undefined })
    this.heldBytes += KEY_STATE_BYTES + 2 * m.key.length
  }

  /**
   * A replicated change (offsets increase from call to call), at the offset its
   * headers give; false (and not taken) when that is past `until`.
   */
  change(json: Buffer, until: LogOffset): boolean {
    const m = JSON.parse(json.toString('utf8')) as Message
    const key = m.key
    if (key === undefined || m.headers.lsn === undefined) return true
    const offset = { tx: BigInt(m.headers.lsn), op: BigInt(m.headers.op_position ?? 0) }
    if (compareOffsets(offset, until) > 0) return false
    this.changes++
    const operation = m.headers.operation
    const prev = this.keys.get(key)
    const state: KeyState = prev ?? { offset, op: 'update', value: undefined, relation: undefined, txids: undefined }
    state.offset = offset
    state.relation = m.headers.relation
    state.txids = m.headers.txids
    if (operation === 'insert') {
      state.op = 'insert'
      state.value = { ...m.value }
    } else if (operation === 'delete') {
      state.op = 'delete'
      state.value = { ...m.value }
    } else if (prev !== undefined && (prev.op === 'insert' || prev.op === 'update' || prev.op === 'rebase')) {
      state.value = { ...prev.value, ...m.value }
    } else if (prev !== undefined && prev.op === 'snapshot') {
      // The whole row is the snapshot row, not kept in memory: the second pass reads it back (base).
      state.op = 'rebase'
      state.value = { ...m.value }
    } else {
      state.op = 'update'
      state.value = { ...state.value, ...m.value }
    }
    if (prev === undefined) {
      this.keys.set(key, state)
      this.heldBytes += KEY_STATE_BYTES + 2 * key.length
    }
    // A key's first change: its values (parsed, about twice their JSON) are held from now on.
    if (prev === undefined || prev.op === 'snapshot') this.heldBytes += 2 * json.length
    return true
  }

  /** Keys whose snapshot row is still their state. */
  isUntouched(key: string): boolean {
    return this.keys.get(key)?.op === 'snapshot'
  }

  /** Keys updated since their snapshot row: the row's values, to merge the updates into. */
  needsBase(key: string): boolean {
    return this.keys.get(key)?.op === 'rebase'
  }

  /** Gives an updated snapshot row its base values (the second pass over the snapshot). */
  base(key: string, row: Row): void {
    const state = this.keys.get(key)!
    state.value = { ...row, ...state.value }
    state.op = 'insert'
  }

  /** Number of keys held (the merge's memory, one entry per key of the prefix). */
  get size(): number {
    return this.keys.size
  }

  /** The compacted live region, in offset order; each message is encoded as it is taken. */
  *merged(): Generator<MergedEntry> {
    const changed: Array<[string, KeyState]> = []
    for (const entry of this.keys) if (entry[1].op !== 'snapshot') changed.push(entry)
    changed.sort((a, b) => compareOffsets(a[1].offset, b[1].offset))
    for (const [key, s] of changed) {
      // A rebase left without its base (no second pass) is still right as an update.
      const op = s.op === 'rebase' ? 'update' : s.op
      const headers = { operation: op, relation: s.relation, lsn: String(s.offset.tx), op_position: Number(s.offset.op), txids: s.txids }
      yield { offset: s.offset, json: Buffer.from(JSON.stringify({ key, value: s.value, headers })) }
    }
  }
}

/** The key and value of a snapshot row (the second pass reads rows again to keep or drop them). */
export function rowOf(json: Buffer): { key: string | undefined; value: Row | undefined } {
  const m = JSON.parse(json.toString('utf8')) as Message
  return { key: m.key, value: m.value }
}
