// The pipeline's health (what `/v1/health` answers, through ShapeService): can
// the store commit, is replication connected, is it paused. Each answer is
// read from the part that owns the state when asked; the only state kept here
// is when the store's commits began failing and how many failed, which the
// store reports as events.
import { FlushError, type FlushResult, type StorageError } from '@sluice/storage'
import { HEALTH_REASONS, type HealthReason, type HealthReport } from './health-report.js'

/** The pause reason of the store's tail budget (see Pipeline.start). */
export const PAUSE_STORAGE_TAILS = 'storage_tails'
/** The pause reason of the shapes' memory budget (see Pipeline.start). */
export const PAUSE_SHAPE_MEMORY = 'shape_memory'

/** What health reads of the store. */
export interface HealthStore {
  /** The last flush's error, cleared by the next successful flush. */
  readonly lastError: StorageError | undefined
  onError(listener: (err: StorageError) => void): () => void
  onFlush(listener: (result: FlushResult) => void, options?: { advanced: false }): () => void
}

/** What health reads of the replication client. */
export interface HealthReplication {
  readonly disconnectedSince: number | undefined
  readonly fatalError: Error | undefined
  readonly pausedSince: ReadonlyMap<string, number>
}

export interface PipelineHealthOptions {
  readonly store: HealthStore
  readonly replication: HealthReplication
  /** How long replication may be disconnected before health reports it (0: at once). */
  readonly replicationTimeoutMs: number
  /** The clock (ms since the epoch); Date.now by default. */
  readonly now?: () => number
}

export class PipelineHealth {
  private readonly store: HealthStore
  private readonly replication: HealthReplication
  private readonly replicationTimeoutMs: number
  private readonly now: () => number
  /** When the current run of failed commits began; undefined while commits succeed. */
  private failingSince: number | undefined
  private failures = 0
  private readonly unsubscribe: Array<() => void>

  constructor(options: PipelineHealthOptions) {
    this.store = options.store
    this.replication = options.replication
    this.replicationTimeoutMs = options.replicationTimeoutMs
    this.now = options.now ?? Date.now
    this.unsubscribe = [
      this.store.onError((err) => {
        if (!(err instanceof FlushError)) return
        this.failures++
        this.failingSince ??= this.now()
      }),
      this.store.onFlush(() => {
        this.failingSince = undefined
      }, { advanced: false }),
    ]
  }

  /** Flushes that failed (reported by the store's background flushes) since start. */
  get commitFailures(): number {
    return this.failures
  }

  report(): HealthReport {
    const now = this.now()
    const reasons: HealthReason[] = []
    const storeError = this.store.lastError
    if (storeError !== undefined) {
      // A failure of an explicit flush() is not reported as an event: it began when it was first seen.
      this.failingSince ??= now
      const code = storeError.code === 'disk_full' ? 'storage_disk_full' : 'storage_io_error'
      reasons.push({ code, message: `${HEALTH_REASONS[code]}: ${storeError.message}`, since: this.failingSince })
    }
    const { fatalError, disconnectedSince, pausedSince } = this.replication
    if (fatalError !== undefined) {
      reasons.push({ code: 'replication_stopped', message: `${HEALTH_REASONS.replication_stopped}: ${fatalError.message}`, since: disconnectedSince ?? now })
    } else if (disconnectedSince !== undefined && now - disconnectedSince >= this.replicationTimeoutMs) {
      const seconds = Math.round((now - disconnectedSince) / 1000)
      reasons.push({ code: 'replication_disconnected', message: `The replication connection to Postgres has been down for ${seconds} s`, since: disconnectedSince })
    }
    const storage = pausedSince.get(PAUSE_STORAGE_TAILS)
    if (storage !== undefined) reasons.push({ code: 'storage_paused', message: HEALTH_REASONS.storage_paused, since: storage })
    const others = [...pausedSince].filter(([reason]) => reason !== PAUSE_STORAGE_TAILS)
    if (others.length > 0) {
      reasons.push({
        code: 'replication_paused',
        message: `${HEALTH_REASONS.replication_paused} (${others.map(([reason]) => reason).join(', ')})`,
        since: Math.min(...others.map(([, since]) => since)),
      })
    }
    return { reasons }
  }

  close(): void {
    for (const off of this.unsubscribe) off()
  }
}
