import { FlushError, type FlushResult, StorageError } from '@sluice/storage'
import { describe, expect, it } from 'vitest'
import { healthBody } from '../../src/health-report.js'
import { type HealthReplication, type HealthStore, PAUSE_SHAPE_MEMORY, PAUSE_STORAGE_TAILS, PipelineHealth } from '../../src/pipeline-health.js'

/**
 * The verdict from given states of the store and the replication client (the
 * ports PipelineHealth reads), on a clock the test sets. The pg tests in this
 * folder bring each state about for real; this one pins the boundaries: the
 * disconnection timeout, the order of reasons, what each pause reason maps to.
 */
class StoreState implements HealthStore {
  lastError: StorageError | undefined
  private readonly errors = new Set<(err: StorageError) => void>()
  private readonly flushes = new Set<(result: FlushResult) => void>()
  onError(listener: (err: StorageError) => void): () => void {
    this.errors.add(listener)
    return () => this.errors.delete(listener)
  }
  onFlush(listener: (result: FlushResult) => void): () => void {
    this.flushes.add(listener)
    return () => this.flushes.delete(listener)
  }
  fail(err: FlushError): void {
    this.lastError = err
    for (const l of this.errors) l(err)
  }
  succeed(): void {
    this.lastError = undefined
    for (const l of this.flushes) l({ durableLsn: 1n, advanced: [], durationMs: 1 })
  }
}

function replicationState(): HealthReplication & { disconnectedSince: number | undefined; fatalError: Error | undefined; pausedSince: Map<string, number> } {
  return { disconnectedSince: undefined, fatalError: undefined, pausedSince: new Map() }
}

const diskFull = (): FlushError => new FlushError(new StorageError('disk_full', 'commit the journal failed: ENOSPC'), 5n, [])

describe('PipelineHealth', () => {
  it('reports a disconnection only once it has lasted the timeout', () => {
    let now = 1_000_000
    const replication = replicationState()
    const health = new PipelineHealth({ store: new StoreState(), replication, replicationTimeoutMs: 30_000, now: () => now })
    expect(health.report().reasons).toEqual([])
    replication.disconnectedSince = now
    now += 29_999
    expect(health.report().reasons).toEqual([])
    now += 1
    expect(health.report().reasons).toEqual([
      { code: 'replication_disconnected', message: 'The replication connection to Postgres has been down for 30 s', since: 1_000_000 },
    ])
    replication.disconnectedSince = undefined
    expect(health.report().reasons).toEqual([])
  })

  it('a timeout of 0 reports a disconnection at once; a stopped client is reported whatever the timeout', () => {
    const now = 5_000
    const replication = replicationState()
    expect(new PipelineHealth({ store: new StoreState(), replication: { ...replication, disconnectedSince: now }, replicationTimeoutMs: 0, now: () => now }).report().reasons.map((r) => r.code)).toEqual([
      'replication_disconnected',
    ])
    const stopped = new PipelineHealth({
      store: new StoreState(),
      replication: { ...replication, disconnectedSince: now, fatalError: new Error('slot "s" does not exist') },
      replicationTimeoutMs: 3_600_000,
      now: () => now,
    })
    expect(stopped.report().reasons).toEqual([{ code: 'replication_stopped', message: expect.stringContaining('slot "s" does not exist'), since: now }])
  })

  it('a failing store: since its first failure, counted, cleared by a successful flush', () => {
    let now = 100
    const store = new StoreState()
    const health = new PipelineHealth({ store, replication: replicationState(), replicationTimeoutMs: 0, now: () => now })
    store.fail(diskFull())
    now = 200
    store.fail(diskFull())
    expect(health.commitFailures).toBe(2)
    expect(health.report().reasons).toEqual([{ code: 'storage_disk_full', message: expect.stringContaining('ENOSPC'), since: 100 }])
    store.succeed()
    expect(health.report().reasons).toEqual([])
    store.lastError = new FlushError(new StorageError('io_error', 'sync failed: EIO'), 5n, [])
    now = 300
    // A failed flush() the store did not report as an event still counts, from when it was seen.
    expect(health.report().reasons).toEqual([{ code: 'storage_io_error', message: expect.stringContaining('EIO'), since: 300 }])
  })

  it('orders reasons: commits, then the connection, then pauses; maps pause reasons to their codes', () => {
    const now = 10_000
    const store = new StoreState()
    const replication = replicationState()
    const health = new PipelineHealth({ store, replication, replicationTimeoutMs: 0, now: () => now })
    replication.pausedSince.set(PAUSE_SHAPE_MEMORY, 3_000)
    replication.pausedSince.set('manual', 2_000)
    replication.pausedSince.set(PAUSE_STORAGE_TAILS, 4_000)
    replication.disconnectedSince = 9_000
    store.fail(diskFull())
    const report = health.report()
    expect(report.reasons.map((r) => [r.code, r.since])).toEqual([
      ['storage_disk_full', 10_000],
      ['replication_disconnected', 9_000],
      ['storage_paused', 4_000],
      ['replication_paused', 2_000],
    ])
    expect(report.reasons[3]!.message).toMatch(/shape_memory, manual/)
    const body = JSON.parse(healthBody(report)) as { status: string; reason: string; message: string; reasons: Array<{ code: string; since: string }> }
    expect(body.status).toBe('unavailable')
    expect(body.reason).toBe('storage_disk_full')
    expect(body.message).toBe(report.reasons[0]!.message)
    expect(body.reasons.map((r) => r.since)).toEqual([10_000, 9_000, 4_000, 2_000].map((t) => new Date(t).toISOString()))
    expect(healthBody({ reasons: [] })).toBe('{"status":"active"}')
  })

  it('close() stops listening to the store', () => {
    const store = new StoreState()
    const health = new PipelineHealth({ store, replication: replicationState(), replicationTimeoutMs: 0 })
    health.close()
    store.fail(diskFull())
    expect(health.commitFailures).toBe(0)
  })
})
