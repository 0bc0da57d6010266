// Prometheus metrics (prom-client, a Registry of our own, never the global one).
// Most values are read from the pipeline when scraped; Postgres-side figures
// (WAL position, slot retention, walsender lag) come from one query whose answer
// is cached briefly, so a scrape storm costs Postgres one query per interval.
import { parseLsn } from '@sluice/protocol'
import pg from 'pg'
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client'
import { HEALTH_REASONS, type HealthReasonCode } from './health-report.js'
import { type BodyPath, type BodyPathName, PREAD_PATH } from './http/body-path.js'
import type { AdmissionStats } from './http/admission.js'
import type { HttpMetrics } from './http/http-metrics.js'
import type { RangeCacheStats } from './http/range-cache.js'
import type { ReleaseReason } from './heap-trim.js'
import type { Pipeline } from './pipeline.js'

export interface MetricsOptions {
  readonly pipeline: Pipeline
  /** For the Postgres-side figures; a pool of one connection is opened on first scrape. */
  readonly connectionString: string
  readonly slotName: string
  /** How long one Postgres sample is reused (default 1000 ms). */
  readonly sampleMaxAgeMs?: number
  /** Node process metrics (process_*, nodejs_*); default true. */
  readonly defaultMetrics?: boolean
  /** How large bodies are sent; default pread. */
  readonly bodyPath?: BodyPath
  /** The heap trim's count of memory releases, by reason (heap-trim.ts). */
  readonly memoryReleases?: Readonly<Record<ReleaseReason, number>>
}

interface PostgresSample {
  readonly at: number
  readonly currentLsn: bigint
  readonly retainedBytes: number | undefined
  /** What Postgres last recorded as acknowledged (the floor when nothing was routed since start). */
  readonly confirmedLsn: bigint | undefined
  readonly flushLagSeconds: number | undefined
}

/** A counter that follows a count kept elsewhere (read at each scrape), by the amount it grew since the last. */
function mirroredCounter(name: string, help: string, registers: Registry[], read: () => number): void {
  let seen = 0
  new Counter({
    name,
    help,
    registers,
    collect() {
      const now = read()
      if (now > seen) this.inc(now - seen)
      seen = now
    },
  })
}

const FLUSH_BUCKETS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5]

const SAMPLE_SQL = `
SELECT pg_current_wal_lsn()::text AS current,
       (SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), s.restart_lsn)::text FROM pg_replication_slots s WHERE s.slot_name = $1) AS retained,
       (SELECT s.confirmed_flush_lsn::text FROM pg_replication_slots s WHERE s.slot_name = $1) AS confirmed,
       (SELECT extract(epoch FROM r.flush_lag)::float8
          FROM pg_replication_slots s JOIN pg_stat_replication r ON r.pid = s.active_pid
         WHERE s.slot_name = $1) AS flush_lag`

/** The longest a scrape waits for Postgres (a connection, then the slot's query). */
const SAMPLE_TIMEOUT_MS = 2_000

/** The metrics of one server; `buildApp` is given it as the HTTP layer's `metrics`. */
export class ServerMetrics implements HttpMetrics {
  readonly registry = new Registry()
  // What the HTTP layer counts per request is kept in plain numbers and read into the metrics when they are
  // collected: a prom-client inc() or set() per request (with a label's hash) costs more than the rest of it.
  private bytesServedTotal = 0
  private readonly bodyBytesByPath: Record<BodyPathName, number> = { sendfile: 0, pread: 0 }
  private logReadsTotal = 0
  private liveWaitersNow = 0
  readonly flushSeconds: Histogram
  private readonly pool: pg.Pool
  private sample: PostgresSample | undefined
  private sampling: Promise<PostgresSample | undefined> | undefined
  private readonly cleanup: Array<() => void> = []
  private closed = false
  private rangeCacheWatched = false
  private admissionWatched = false

  constructor(private readonly options: MetricsOptions) {
    const { pipeline } = options
    const registers = [this.registry]
    const maxAge = options.sampleMaxAgeMs ?? 1000
    // Bounded waits: a Postgres whose network went silent must not hold every scrape (and a shutdown) for minutes.
    this.pool = new pg.Pool({
      connectionString: options.connectionString,
      max: 1,
      idleTimeoutMillis: 30_000,
      application_name: 'sluice_metrics',
      connectionTimeoutMillis: SAMPLE_TIMEOUT_MS,
      query_timeout: SAMPLE_TIMEOUT_MS,
    })
    this.pool.on('error', () => {})
    if (options.defaultMetrics ?? true) collectDefaultMetrics({ register: this.registry })

    mirroredCounter('sluice_http_bytes_served_total', 'Bytes of shape response bodies sent.', registers, () => this.bytesServedTotal)
    mirroredCounter(
      'sluice_http_log_reads_total',
      'Ranges of shape logs read to answer shape requests; live requests woken by one write at the same offset share one read.',
      registers,
      () => this.logReadsTotal,
    )
    const byPath = this.bodyBytesByPath
    const bodyBytesSeen: Record<BodyPathName, number> = { sendfile: 0, pread: 0 }
    new Counter({
      name: 'sluice_http_body_bytes_total',
      help: 'Bytes of shape response bodies sent, by path: sendfile (file to socket in the kernel) or pread (read into a buffer, then written).',
      labelNames: ['path'],
      registers,
      collect() {
        for (const path of ['sendfile', 'pread'] as const) {
          this.inc({ path }, byPath[path] - bodyBytesSeen[path])
          bodyBytesSeen[path] = byPath[path]
        }
      },
    })
    const bodyPath = options.bodyPath ?? PREAD_PATH
    const pathGauge = new Gauge({
      name: 'sluice_http_body_path',
      help: 'How large shape response bodies are sent: 1 for the path in use (sendfile when the addon loaded and --no-sendfile is not given), 0 for the other.',
      labelNames: ['path'],
      registers,
    })
    for (const path of ['sendfile', 'pread'] as const) pathGauge.set({ path }, path === bodyPath.name ? 1 : 0)
    const addon = bodyPath.sendfile
    if (addon !== undefined) {
      let callsSeen = addon.stats().calls
      new Counter({
        name: 'sluice_sendfile_calls_total',
        help: 'sendfile(2) calls made (several per body when the socket buffer fills).',
        registers,
        collect() {
          const now = addon.stats().calls
          if (now > callsSeen) this.inc(now - callsSeen)
          callsSeen = now
        },
      })
    }
    const metrics = this
    new Gauge({
      name: 'sluice_live_waiters',
      help: 'Live requests (long-poll and SSE) waiting for new data.',
      registers,
      collect() {
        this.set(metrics.liveWaitersNow)
      },
    })
    this.flushSeconds = new Histogram({
      name: 'sluice_storage_flush_duration_seconds',
      help: 'Duration of storage flushes (group commits: fsync of every dirty log and the watermark).',
      buckets: FLUSH_BUCKETS,
      registers,
    })

    mirroredCounter(
      'sluice_transactions_routed_total',
      'Transactions read from the replication stream and routed to shapes (rate() is changes per second).',
      registers,
      () => pipeline.router.transactionsRouted,
    )
    mirroredCounter(
      'sluice_transactions_routed_ahead_total',
      'Of the transactions routed, those Postgres streamed before their commit that were routed while they arrived (their commit only spliced in the LSN).',
      registers,
      () => pipeline.router.transactionsRoutedAhead,
    )
    const releases = options.memoryReleases
    if (releases !== undefined) {
      const seen: Record<string, number> = {}
      new Counter({
        name: 'sluice_memory_releases_total',
        help: 'Times memory was given back at once: a collection asked of V8, then the C heap trimmed; by reason (large_transaction: one became durable; idle_after_transaction: the server went idle after one; retired_shapes: an expiry sweep ended; compacted_after_retirement: the compacting collections 10 s after that; idle_after_creation: the server went idle after a burst of shape creation).',
        labelNames: ['reason'],
        registers,
        collect() {
          for (const [reason, now] of Object.entries(releases)) {
            this.inc({ reason }, now - (seen[reason] ?? 0))
            seen[reason] = now
          }
        },
      })
    }
    const statsGauge = <S>(stats: () => S) => statsGauges(registers, stats)
    const shapeGauge = statsGauge(() => pipeline.shapes.stats())
    shapeGauge('sluice_shapes', 'Shapes kept (ready or being created).', (s) => s.shapes)
    shapeGauge('sluice_shapes_creating', 'Shapes whose initial snapshot has not finished.', (s) => s.creating)
    shapeGauge('sluice_subquery_view_entries', "Values held in subquery shapes' result sets (--max-subquery-view-entries).", (s) => s.subqueryViewEntries)
    shapeGauge('sluice_shape_queue_bytes', 'Bytes of transactions held in memory for shapes being created.', (s) => s.queuedBytes)
    shapeGauge('sluice_shape_spilled_queues', 'Queues of shapes being created that moved to disk.', (s) => s.spilledQueues)
    shapeGauge('sluice_replication_paused', '1 while replication is paused for the memory of transactions and queues (--memory-budget).', (s) => (s.paused ? 1 : 0))
    shapeGauge('sluice_replication_pauses', 'Times replication was paused for the memory of transactions and queues since start.', (s) => s.pauses)
    mirroredCounter('sluice_shapes_expired_total', 'Shapes expired: no request used them for --shape-ttl (clients that come back get 409).', registers, () => pipeline.shapes.stats().expired)
    mirroredCounter('sluice_shapes_evicted_total', 'Shapes evicted: the least recently used, when a new shape needed room past --max-shapes (clients get 409).', registers, () => pipeline.shapes.stats().evicted)
    const storeGauge = statsGauge(() => pipeline.store.stats())
    storeGauge('sluice_storage_tail_bytes', 'Bytes of changes journaled and not yet written to their shape logs (past --tail-budget replication pauses).', (s) => s.tailBytes)
    storeGauge('sluice_storage_journal_segments', 'Journal segments on disk (more than one: a checkpoint is due or running).', (s) => s.journalSegments)
    storeGauge('sluice_storage_paused', '1 while replication is paused for the storage tail budget (a checkpoint is writing tails out).', (s) => (s.underPressure ? 1 : 0))
    storeGauge('sluice_storage_pauses', 'Times replication was paused for the storage tail budget since start.', (s) => s.pressures)
    const compaction = pipeline.compactor.stats
    mirroredCounter('sluice_compactions_total', 'Shape logs compacted (--compact-ratio).', registers, () => compaction.compactions)
    mirroredCounter('sluice_compaction_failures_total', 'Compactions that failed or were abandoned (the log stays as it was).', registers, () => compaction.failures)
    mirroredCounter('sluice_compaction_reclaimed_bytes_total', 'Bytes of shape logs that compaction replaced by smaller ones.', registers, () => compaction.bytesReclaimed)
    const compactionGauge = statsGauge(() => compaction)
    compactionGauge('sluice_compaction_running', '1 while a shape log is being compacted.', (c) => (c.running ? 1 : 0))
    compactionGauge('sluice_compaction_last_duration_seconds', 'How long the last compaction took.', (c) => c.lastDurationMs / 1000)
    compactionGauge('sluice_compaction_peak_keys', 'Most row keys one compaction held in memory.', (c) => c.peakKeys)

    const created = new Counter({ name: 'sluice_shapes_ready_total', help: 'Shapes that became ready (snapshot finished or restored).', registers })
    const invalidated = new Counter({
      name: 'sluice_shapes_invalidated_total',
      help: 'Shapes invalidated (clients get 409), by reason.',
      labelNames: ['reason'],
      registers,
    })
    // Those went inside Pipeline.start, before anyone could listen.
    if (pipeline.replicationGap !== undefined) invalidated.inc({ reason: 'replication_gap' }, pipeline.replicationGap.invalidated)
    const onReady = () => created.inc()
    const onInvalidated = (event: { reason: { kind: string } }) => invalidated.inc({ reason: event.reason.kind })
    pipeline.shapes.on('ready', onReady)
    pipeline.shapes.on('invalidated', onInvalidated)
    this.cleanup.push(() => pipeline.shapes.off('ready', onReady), () => pipeline.shapes.off('invalidated', onInvalidated))

    // What /v1/health answers, scrapeable: an alert can fire on the same reasons a load balancer acts on.
    new Gauge({
      name: 'sluice_healthy',
      help: '1 when GET /v1/health answers 200; 0 when it answers 503 (sluice_health_reason says why).',
      registers,
      collect() {
        this.set(pipeline.health.report().reasons.length === 0 ? 1 : 0)
      },
    })
    new Gauge({
      name: 'sluice_health_reason',
      help: 'Per reason code of GET /v1/health: 1 while that reason makes it answer 503.',
      labelNames: ['code'],
      registers,
      collect() {
        const present = new Set(pipeline.health.report().reasons.map((r) => r.code))
        for (const code of Object.keys(HEALTH_REASONS) as HealthReasonCode[]) this.set({ code }, present.has(code) ? 1 : 0)
      },
    })
    mirroredCounter(
      'sluice_storage_commit_failures_total',
      'Store flushes (group commits) that failed; the changes they held are replayed from Postgres.',
      registers,
      () => pipeline.health.commitFailures,
    )
    new Gauge({
      name: 'sluice_replication_connected',
      help: '1 while the replication connection streams from Postgres.',
      registers,
      collect() {
        this.set(pipeline.replication.disconnectedSince === undefined ? 1 : 0)
      },
    })
    new Gauge({
      name: 'sluice_durable_lsn',
      help: 'The storage engine durable watermark (an LSN as a number).',
      registers,
      collect() {
        this.set(Number(pipeline.store.durableLsn))
      },
    })
    const self = this
    new Gauge({
      name: 'sluice_replication_lag_bytes',
      help: "WAL bytes between Postgres's current position and Sluice's durable watermark (or the slot's confirmed_flush_lsn if higher; sampled at most once a second).",
      registers,
      async collect() {
        const sample = await self.postgresSample(maxAge)
        if (sample === undefined) return
        // Before anything is routed the store's watermark is 0; Postgres's record of what was acknowledged is the floor.
        const durableLsn = pipeline.store.durableLsn
        const floor = sample.confirmedLsn !== undefined && sample.confirmedLsn > durableLsn ? sample.confirmedLsn : durableLsn
        const lag = sample.currentLsn - floor
        this.set(lag > 0n ? Number(lag) : 0)
      },
    })
    new Gauge({
      name: 'sluice_replication_lag_seconds',
      help: "Postgres's flush_lag for Sluice's walsender (time from WAL write to Sluice acknowledging it durable); 0 when caught up.",
      registers,
      async collect() {
        const sample = await self.postgresSample(maxAge)
        if (sample !== undefined) this.set(sample.flushLagSeconds ?? 0)
      },
    })
    new Gauge({
      name: 'sluice_slot_retained_wal_bytes',
      help: 'WAL Postgres keeps for the replication slot (pg_current_wal_lsn() - restart_lsn).',
      registers,
      async collect() {
        const sample = await self.postgresSample(maxAge)
        if (sample?.retainedBytes !== undefined) this.set(sample.retainedBytes)
      },
    })
    new Gauge({
      name: 'sluice_metrics_postgres_up',
      help: '1 when the last Postgres sample for these metrics succeeded.',
      registers,
      async collect() {
        this.set((await self.postgresSample(maxAge)) === undefined ? 0 : 1)
      },
    })

    this.timeFlushes()
  }

  /** For the HTTP layer: bytes of a shape response body sent. */
  addBytesServed(bytes: number, path: BodyPathName): void {
    if (bytes <= 0) return
    this.bytesServedTotal += bytes
    this.bodyBytesByPath[path] += bytes
  }

  /** For the HTTP layer: one range of a shape log read. */
  addLogRead(): void {
    this.logReadsTotal++
  }

  /** For the HTTP layer: the range cache's figures, read at each collection. */
  watchRangeCache(stats: () => RangeCacheStats): void {
    if (this.rangeCacheWatched) return
    this.rangeCacheWatched = true
    const registers = [this.registry]
    const gauge = statsGauges(registers, stats)
    gauge('sluice_http_range_cache_bytes', 'Bytes of recently served log range bodies held in memory (--range-cache).', (s) => s.bytes)
    gauge('sluice_http_range_cache_entries', 'Log range bodies held in memory.', (s) => s.entries)
    mirroredCounter('sluice_http_range_cache_hits_total', 'Shape responses whose body was written from the range cache (no read of the log).', registers, () => stats().hits)
    mirroredCounter('sluice_http_range_cache_misses_total', 'Range cache lookups that found nothing: the body was read from the log.', registers, () => stats().misses)
    mirroredCounter('sluice_http_range_cache_evictions_total', 'Bodies dropped from the range cache to stay within its size.', registers, () => stats().evictions)
  }

  /** For the HTTP layer: admission control's figures, read at each collection. */
  watchAdmission(stats: () => AdmissionStats): void {
    if (this.admissionWatched) return
    this.admissionWatched = true
    const registers = [this.registry]
    const kinds = ['initial', 'existing'] as const
    new Gauge({
      name: 'sluice_http_requests_in_flight',
      help: 'Shape requests holding an admission slot, by kind (initial: offset=-1; existing: the rest, parked long-polls included).',
      labelNames: ['kind'],
      registers,
      collect() {
        const { inFlight } = stats()
        for (const kind of kinds) this.set({ kind }, inFlight[kind])
      },
    })
    new Gauge({
      name: 'sluice_http_admission_queue_length',
      help: 'Shape requests over their kind’s limit waiting for a slot (--initial-queue-length); kind creation: new shapes waiting past --max-creating-shapes.',
      labelNames: ['kind'],
      registers,
      collect() {
        const { queues } = stats()
        for (const kind of [...kinds, 'creation'] as const) this.set({ kind }, queues[kind]?.length ?? 0)
      },
    })
    const queue = () => stats().queues.initial
    mirroredCounter('sluice_http_admission_queued_admitted_total', 'Initial requests admitted after waiting in the queue.', registers, () => queue()?.admitted ?? 0)
    mirroredCounter(
      'sluice_http_admission_queue_wait_seconds_total',
      'Seconds waited in the queue by the initial requests then admitted (divided by sluice_http_admission_queued_admitted_total: the mean wait).',
      registers,
      () => (queue()?.waitedMs ?? 0) / 1000,
    )
    mirroredCounter(
      'sluice_http_admission_queue_abandoned_total',
      'Initial requests whose client went away while they waited in the queue (they took no slot).',
      registers,
      () => queue()?.abandoned ?? 0,
    )
    const reasons = { limit: 'limit', queueFull: 'queue_full', queueWait: 'queue_wait' } as const
    const refusedSeen = { initial: { limit: 0, queueFull: 0, queueWait: 0 }, existing: { limit: 0, queueFull: 0, queueWait: 0 } }
    new Counter({
      name: 'sluice_http_admission_refused_total',
      help: 'Shape requests answered 503 concurrent_request_limit_exceeded, by kind and reason (limit: over the limit with no queue; queue_full; queue_wait: waited the longest allowed).',
      labelNames: ['kind', 'reason'],
      registers,
      collect() {
        const { refused } = stats()
        for (const kind of kinds) {
          for (const key of ['limit', 'queueFull', 'queueWait'] as const) {
            const grew = refused[kind][key] - refusedSeen[kind][key]
            if (grew > 0) this.inc({ kind, reason: reasons[key] }, grew)
            refusedSeen[kind][key] = refused[kind][key]
          }
        }
      },
    })
  }

  /** For the HTTP layer: the number of live requests currently waiting. */
  setLiveWaiters(count: number): void {
    this.liveWaitersNow = count
  }

  /** Records every flush that published something, with the duration the store measured. */
  private timeFlushes(): void {
    const histogram = this.flushSeconds
    const off = this.options.pipeline.store.onFlush((result) => histogram.observe(result.durationMs / 1000), { advanced: false })
    this.cleanup.push(off)
  }

  private postgresSample(maxAgeMs: number): Promise<PostgresSample | undefined> {
    if (this.sample !== undefined && Date.now() - this.sample.at < maxAgeMs) return Promise.resolve(this.sample)
    if (this.closed) return Promise.resolve(undefined)
    this.sampling ??= this.pool
      .query<{ current: string; retained: string | null; confirmed: string | null; flush_lag: number | null }>(SAMPLE_SQL, [this.options.slotName])
      .then(
        ({ rows: [row] }) => {
          this.sample = {
            at: Date.now(),
            currentLsn: parseLsn(row!.current),
            retainedBytes: row!.retained === null ? undefined : Number(row!.retained),
            confirmedLsn: row!.confirmed === null ? undefined : parseLsn(row!.confirmed),
            flushLagSeconds: row!.flush_lag ?? undefined,
          }
          return this.sample
        },
        () => undefined,
      )
      .finally(() => (this.sampling = undefined))
    return this.sampling
  }

  /** The Prometheus text exposition of every metric. */
  metrics(): Promise<string> {
    return this.registry.metrics()
  }

  get contentType(): string {
    return this.registry.contentType
  }

  async close(): Promise<void> {
    if (this.closed) return
    this.closed = true
    for (const off of this.cleanup) off()
    await this.sampling
    await this.pool.end().catch(() => {})
  }
}

/** A maker of gauges, one per figure of a `stats()` snapshot, read at each scrape. */
function statsGauges<S>(registers: Registry[], stats: () => S): (name: string, help: string, read: (s: S) => number) => Gauge {
  return (name, help, read) =>
    new Gauge({
      name,
      help,
      registers,
      collect() {
        this.set(read(stats()))
      },
    })
}
