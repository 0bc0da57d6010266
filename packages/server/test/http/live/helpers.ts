import type { LogOffset } from '@sluice/protocol'
import type { FlushResult, LogEntryInput, ShapeLog, ShapeLogStore } from '@sluice/storage'

const enc = new TextEncoder()

export const SNAPSHOT_END = '{"headers":{"control":"snapshot-end","xmin":"1","xmax":"2","xip_list":[]}}'

export function rowJson(i: number, extra: Record<string, string> = {}): string {
  return JSON.stringify({ key: `"public"."t"/"${i}"`, value: { id: String(i), ...extra }, headers: { operation: 'insert', relation: ['public', 't'] } })
}

export function changeJson(lsn: bigint, op: number, i: number, extra: Record<string, string> = {}): string {
  return JSON.stringify({ key: `"public"."t"/"${i}"`, value: { id: String(i), ...extra }, headers: { operation: 'update', lsn: String(lsn), op_position: op } })
}

export async function makeShape(store: ShapeLogStore, id: string, rows: readonly string[]): Promise<ShapeLog> {
  const writer = store.createShape(id)
  writer.append(rows.map((r) => enc.encode(r)))
  return writer.finish(enc.encode(SNAPSHOT_END))
}

/** Appends one transaction of the given JSON lines at `lsn` and flushes it (wakes waiters). */
export async function commit(store: ShapeLogStore, log: ShapeLog, lsn: bigint, lines: readonly string[]): Promise<FlushResult> {
  const entries: LogEntryInput[] = lines.map((json, k) => ({ offset: { tx: lsn, op: BigInt(2 * k) } as LogOffset, json: enc.encode(json) }))
  log.appendTransaction(entries)
  store.advance(lsn)
  return store.flush()
}

/** A store stand-in that only emits flushes (for fake-timer tests where a real store's own timers would be faked too). */
export class FakeFlushes {
  readonly listeners = new Set<(r: FlushResult) => void>()
  onFlush(listener: (r: FlushResult) => void): () => void {
    this.listeners.add(listener)
    return () => this.listeners.delete(listener)
  }
  emit(advanced: readonly string[], durableLsn = 1n): void {
    for (const l of this.listeners) l({ durableLsn, advanced, durationMs: 0 })
  }
}

/** Resolves in the next macrotask, after pending promise reactions. */
export const settle = (): Promise<void> => new Promise((r) => setImmediate(r))
