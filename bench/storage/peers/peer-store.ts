/**
 * What the SQLite and LMDB peers share above their storage: the map of logs,
 * shapes being created, the watermark, flush listeners and publishing. Each
 * peer supplies how rows are dropped and how the watermark is made durable.
 */
import type { FlushResult, ShapeLog } from '@sluice/storage'
import type { LogBook } from './log-book.js'
import { PeerError } from './log-book.js'

export interface PeerLog extends ShapeLog {
  readonly num: number
  readonly book: LogBook
}

export abstract class PeerLogStore<L extends PeerLog> {
  readonly readOnly = false
  protected readonly logs = new Map<string, L>()
  protected readonly creating = new Set<string>()
  private readonly listeners = new Set<(r: FlushResult) => void>()
  private advanced = 0n
  private durable = 0n
  protected closed = false

  constructor(private readonly label: string) {}

  get durableLsn(): bigint {
    return this.durable
  }

  ensureOpen(): void {
    if (this.closed) throw new PeerError('store_closed', `the ${this.label} store is closed`)
  }

  get(id: string): ShapeLog | undefined {
    return this.logs.get(id)
  }

  ids(): string[] {
    return [...this.logs.keys()]
  }

  finishedLogs(): Iterable<ShapeLog> {
    return this.logs.values()
  }

  async deleteShape(id: string): Promise<boolean> {
    this.ensureOpen()
    const log = this.logs.get(id)
    if (!log) return false
    this.logs.delete(id)
    this.dropRows(log.num)
    return true
  }

  advance(lsn: bigint): void {
    if (lsn > this.advanced) this.advanced = lsn
  }

  async flush(): Promise<FlushResult> {
    this.ensureOpen()
    const target = this.advanced
    const started = performance.now()
    if (target > this.durable) {
      await this.persistWatermark(target)
      this.durable = target
    }
    const advanced: string[] = []
    for (const log of this.logs.values()) if (log.book.publish(this.durable)) advanced.push(log.id)
    const result = { durableLsn: this.durable, advanced, durationMs: performance.now() - started }
    if (advanced.length > 0) for (const l of this.listeners) l(result)
    return result
  }

  onFlush(listener: (result: FlushResult) => void): () => void {
    this.listeners.add(listener)
    return () => this.listeners.delete(listener)
  }

  /** Removes a shape's rows in one transaction. */
  protected abstract dropRows(num: number): void
  /** Makes the watermark durable (a no-op when every commit is synced anyway). */
  protected abstract persistWatermark(lsn: bigint): void | Promise<void>
}
