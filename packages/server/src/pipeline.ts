import { join } from 'node:path'
import { formatLsn } from '@sluice/protocol'
import { FileLogStore, type FileStoreOptions, FlushError, type FsPort, type StorageError, type StoreLockOptions, openFileLogStore } from '@sluice/storage'
import { waitAndPromote } from './standby.js'
import { ServerError } from './errors.js'
import pg from 'pg'
import {
  BufferingSink,
  DEFAULT_PUBLICATION_NAME,
  DEFAULT_SLOT_NAME,
  PublicationManager,
  ReplicationClient,
  type ReplicationClientOptions,
  SlotManager,
  SpillDir,
  SpillStreamBuffer,
} from './replication/index.js'
import { PipelineShapeService } from './pipeline-shape-service.js'
import type { ShapeService } from './shape-service.js'
import {
  DEFAULT_COMPACT_INTERVAL_MS,
  DEFAULT_COMPACT_MIN_ENTRIES,
  DEFAULT_COMPACT_RATIO,
  DEFAULT_COMPACT_RETIRE_MS,
  DEFAULT_HEALTH_REPLICATION_TIMEOUT_MS,
  DEFAULT_MEMORY_BUDGET_BYTES,
  DEFAULT_SNAPSHOT_CONNECTIONS,
  MOVE_IN_CONNECTIONS,
  DEFAULT_SUBSET_CONNECTIONS,
} from './defaults.js'
import { DEFAULT_DEDUPE_WINDOW_MS, LogDedupe, errorKey } from './log-dedupe.js'
import { PAUSE_SHAPE_MEMORY, PAUSE_STORAGE_TAILS, PipelineHealth } from './pipeline-health.js'
import { ShapeManager, type ShapeLogger } from './shapes/shape-manager.js'
import { ShapeRouter } from './shapes/router.js'
import { ShapeCompactor } from './shapes/compaction/shape-compactor.js'
import { RoutedAhead } from './shapes/routed-ahead.js'
import { catalogChanged } from './shapes/invalidation.js'
import { loadTableStates } from './shapes/table-catalog.js'
import { loadNativeAddon } from './native-addon.js'
import { LargeTransactionWatch } from './large-transaction-watch.js'

/**
 * The sync pipeline, wired (docs/architecture.md §2): the replication client feeds the
 * router, the router appends to the storage engine, each flush of the engine
 * acknowledges its durable watermark to Postgres, and the shape manager brings
 * shapes in and out. The HTTP layer reaches all of it through `shapeService`.
 */
export interface PipelineOptions {
  /** Postgres connection string; the role needs REPLICATION (and to own the published tables). */
  readonly connectionString: string
  /** Shape logs live under `<storageDir>/logs`, scratch files under `<storageDir>/spill`. */
  readonly storageDir: string
  readonly slotName?: string
  readonly publicationName?: string
  readonly chunkBytes?: number
  readonly flushIntervalMs?: number
  readonly memoryBudgetBytes?: number
  /** The store's budget for changes journaled but not yet in their logs' files (FileStoreOptions.tailBudgetBytes). */
  readonly tailBudgetBytes?: number
  /** Route streamed transactions while they arrive (routed-ahead.ts). Default true; false routes them only at their commit. */
  readonly routeAhead?: boolean
  readonly snapshotConnections?: number
  /** Postgres connections for subset snapshots (docs/protocol.md §6), apart from the snapshot pool so they never delay shape creation. */
  readonly subsetConnections?: number
  readonly maxShapes?: number
  readonly maxSubqueryViewEntries?: number
  /** Ready shapes no request used for this long expire (default DEFAULT_SHAPE_TTL_MS; 0: never). See ShapeManagerOptions.shapeTtlMs. */
  readonly shapeTtlMs?: number
  /** The clock shape expiry goes by (ShapeManagerOptions.clock; tests move it by hand). Default `performance.now`. */
  readonly shapeClock?: () => number
  /** How long a table's catalog answer is reused by `resolve` (default DEFAULT_TABLE_CACHE_MS). See ShapeManagerOptions.tableCacheMs. */
  readonly tableCacheMs?: number
  /** How often the catalog is checked for DDL on tables with shapes (default DEFAULT_CATALOG_CHECK_MS; 0: never). See ShapeManagerOptions.catalogCheckMs. */
  readonly catalogCheckMs?: number
  /** Bounds on what a subquery shape holds during a move-in (default DEFAULT_SUBQUERY_MAX_HELD_*). See ShapeManagerOptions.subqueryHeld. */
  readonly subqueryHeld?: { readonly transactions?: number; readonly changes?: number }
  /** Transactions above this many bytes are routed from disk, not memory. Default: an eighth of the memory budget. */
  readonly maxTransactionBytes?: number
  readonly protoVersion?: ReplicationClientOptions['protoVersion']
  /** Extra walsender settings (e.g. a small logical_decoding_work_mem in tests). */
  readonly replicationSettings?: Readonly<Record<string, string>>
  readonly logger?: ShapeLogger
  /** The storage engine's filesystem (a port for fault-injection tests). */
  readonly storageFs?: FsPort
  /** How the storage directory's writer lock is taken and waited for (writer-lock.ts). */
  readonly writerLock?: StoreLockOptions
  /**
   * A standby writer (standby.ts): builds its store's logs and restores its
   * shapes from the heads file while another process writes, keeps them
   * current while it waits for the writer lock, and takes over with only what
   * changed left to do.
   */
  readonly standby?: boolean
  /**
   * Gives up the start: a standby's wait for the writer lock (the start
   * rejects with `standby_stopped`), or the wait for replication to begin,
   * which retries for ever while the slot is in use elsewhere (`start_stopped`).
   */
  readonly signal?: AbortSignal
  /** How often a standby follows a new heads file of the writer (default DEFAULT_STANDBY_REFRESH_MS). */
  readonly standbyRefreshMs?: number
  /** How often the writer rewrites its heads file while something changes (FileStoreOptions.headsIntervalMs). */
  readonly headsIntervalMs?: number
  /** How long replication may be disconnected before health reports it (default DEFAULT_HEALTH_REPLICATION_TIMEOUT_MS). */
  readonly healthReplicationTimeoutMs?: number
  /** Repeats of one error line are summarised once per this many ms (default DEFAULT_DEDUPE_WINDOW_MS). */
  readonly logDedupeWindowMs?: number
  /** Compact a shape's log when it reaches this many times its entries after the last compaction (0: never). Default DEFAULT_COMPACT_RATIO. */
  readonly compactRatio?: number
  /** …and has grown by at least this many entries. Default DEFAULT_COMPACT_MIN_ENTRIES. */
  readonly compactMinEntries?: number
  /** How often shapes are checked for compaction. Default DEFAULT_COMPACT_INTERVAL_MS. */
  readonly compactIntervalMs?: number
  /** How long a compacted-away log keeps taking copies before it is deleted. Default DEFAULT_COMPACT_RETIRE_MS. */
  readonly compactRetireMs?: number
  /** A large (streamed or spilled) transaction is durable: the server gives its buffers' memory back (heap-trim.ts). */
  readonly onLargeTransactionDurable?: (lsn: bigint) => void
}

/**
 * Found at start: the slot had confirmed past the store's durable watermark
 * while the store held shapes, so Postgres would never send the transactions
 * in between again and every restored shape was invalidated.
 */
export interface ReplicationGap {
  /** The slot's `confirmed_flush_lsn`: Postgres resends commits from here on. */
  readonly slotLsn: bigint
  /** The store's durable watermark: every commit up to here is in the logs. */
  readonly storeLsn: bigint
  /** Restored shapes invalidated for it. */
  readonly invalidated: number
}

/**
 * Idle positions (see ReplicationClientOptions.promiseIdle) reach the store at
 * most this often. Each costs a flush and a journal sync, and under a busy
 * workload on unpublished tables keepalives come once per flush, so unpaced
 * they would keep the store flushing at its flush interval for WAL no shape
 * reads. Releasing that WAL a quarter of a second later costs nothing.
 */
const IDLE_PROMISE_INTERVAL_MS = 250

export { DEFAULT_SUBSET_CONNECTIONS } from './defaults.js'

/** What `Pipeline.start` wires together; the pipeline keeps them for `stop`. */
interface PipelineParts {
  readonly store: FileLogStore
  readonly shapes: ShapeManager
  readonly router: ShapeRouter
  readonly replication: ReplicationClient
  readonly shapeService: ShapeService
  readonly health: PipelineHealth
  readonly dedupe: LogDedupe
  /** Every Postgres pool (catalog, snapshots, subsets), ended on stop. */
  readonly pools: readonly pg.Pool[]
  readonly streams: SpillStreamBuffer
  readonly ahead: RoutedAhead
  /** Listeners on the store, removed on stop. */
  readonly unsubscribe: ReadonlyArray<() => void>
  readonly replicationGap: ReplicationGap | undefined
  readonly compactor: ShapeCompactor
  readonly logger: ShapeLogger | undefined
}

export class Pipeline {
  readonly store: FileLogStore
  readonly shapes: ShapeManager
  readonly router: ShapeRouter
  readonly replication: ReplicationClient
  /** The port the HTTP layer is built on (`buildApp({ shapes: pipeline.shapeService })`). */
  readonly shapeService: ShapeService
  /** Whether the store commits and replication streams (what `/v1/health` reports, through `shapeService`). */
  readonly health: PipelineHealth
  /** Set when the restored shapes had to go because the slot was ahead of the store (see `start`). */
  readonly replicationGap: ReplicationGap | undefined
  /** Background log compaction (shapes/compaction/). */
  readonly compactor: ShapeCompactor
  private readonly dedupe: LogDedupe
  private readonly pools: readonly pg.Pool[]
  private readonly streams: SpillStreamBuffer
  /** Streamed transactions being routed while they arrive (see routed-ahead.ts). */
  readonly ahead: RoutedAhead
  private readonly unsubscribe: ReadonlyArray<() => void>
  private readonly logger: ShapeLogger | undefined
  private stopping: Promise<void> | undefined

  private constructor(parts: PipelineParts) {
    this.store = parts.store
    this.shapes = parts.shapes
    this.router = parts.router
    this.replication = parts.replication
    this.shapeService = parts.shapeService
    this.health = parts.health
    this.dedupe = parts.dedupe
    this.replicationGap = parts.replicationGap
    this.pools = parts.pools
    this.streams = parts.streams
    this.ahead = parts.ahead
    this.unsubscribe = parts.unsubscribe
    this.compactor = parts.compactor
    this.logger = parts.logger
  }

  /** The global last-processed LSN of docs/protocol.md §3.4 (see `ShapeService.lastSeenLsn`). */
  get lastSeenLsn(): bigint {
    return this.shapeService.lastSeenLsn
  }

  /** Opens storage, restores shapes, ensures the publication and slot, and starts streaming. */
  static async start(options: PipelineOptions): Promise<Pipeline> {
    const memoryBudgetBytes = options.memoryBudgetBytes ?? DEFAULT_MEMORY_BUDGET_BYTES
    // The batched stat at the store's open after a clean stop; without it the store stats file by file.
    const statFiles = (await loadNativeAddon())?.statFiles
    let opening = true
    const storeOptions: FileStoreOptions = {
      dir: join(options.storageDir, 'logs'),
      ...(statFiles === undefined ? {} : { statFiles }),
      ...(options.chunkBytes === undefined ? {} : { chunkBytes: options.chunkBytes }),
      ...(options.flushIntervalMs === undefined ? {} : { flushIntervalMs: options.flushIntervalMs }),
      ...(options.storageFs === undefined ? {} : { fs: options.storageFs }),
      ...(options.writerLock === undefined ? {} : { lock: options.writerLock }),
      ...(options.tailBudgetBytes === undefined ? {} : { tailBudgetBytes: options.tailBudgetBytes }),
      ...(options.headsIntervalMs === undefined ? {} : { headsIntervalMs: options.headsIntervalMs }),
      // A log set aside at open (quarantine/) is not restored: its shape is made again on request and
      // its clients, naming the old handle, get 409. Later errors go to the listener below.
      onError: (err) => {
        if (opening) options.logger?.error({ err }, err.code === 'io_error' || err.code === 'disk_full' ? 'storage error at open' : 'shape log quarantined at open')
      },
    }
    const standby = options.standby === true
    const opened = performance.now()
    const store = standby ? await FileLogStore.prepare(storeOptions) : await openFileLogStore(storeOptions)
    if (!standby) {
      opening = false
      // What a slow start spent its time on: logs vouched for by the heads file are opened without a scan.
      options.logger?.info(
        { logs: store.size, fromHeadsFile: store.cleanOpened, scanned: store.size - store.cleanOpened, quarantined: store.quarantined.length, ms: Math.round(performance.now() - opened) },
        'store opened',
      )
    }
    const db = new pg.Pool({ connectionString: options.connectionString, max: 4, application_name: 'sluice' })
    const snapshotConnections = options.snapshotConnections ?? DEFAULT_SNAPSHOT_CONNECTIONS
    const snapshotPool = new pg.Pool({
      connectionString: options.connectionString,
      max: snapshotConnections,
      application_name: 'sluice_snapshot',
    })
    const subsetPool = new pg.Pool({
      connectionString: options.connectionString,
      max: options.subsetConnections ?? DEFAULT_SUBSET_CONNECTIONS,
      application_name: 'sluice_subset',
    })
    const moveInPool = new pg.Pool({ connectionString: options.connectionString, max: MOVE_IN_CONNECTIONS, application_name: 'sluice_move_in' })
    const pools = [db, snapshotPool, subsetPool, moveInPool]
    // Idle pooled connections can die with Postgres; the pool replaces them, this keeps the process alive.
    for (const pool of pools) pool.on('error', (err) => options.logger?.warn({ err }, 'idle Postgres connection failed'))
    let streams: SpillStreamBuffer | undefined
    let ahead: RoutedAhead | undefined
    let shapes: ShapeManager | undefined
    try {
      const publication = new PublicationManager(db, { name: options.publicationName ?? DEFAULT_PUBLICATION_NAME })
      const queuesDir = join(options.storageDir, 'spill', 'queues')
      let replication: ReplicationClient | undefined
      const idle = pacedAdvance(store, IDLE_PROMISE_INTERVAL_MS)
      const routed = { lsn: store.durableLsn }
      // From a failed flush until the replay starts nothing routed is promised to the store: a transaction whose
      // routing was under way at the failure finishes with some of its lines rolled back, and promising it would
      // let the store publish it, after which the replay skips it as durable.
      let replayPending = false
      const router = new ShapeRouter({
        advance: (lsn) => {
          if (replayPending) return
          routed.lsn = lsn
          store.advance(lsn)
        },
        // Past the tail budget, until a checkpoint; else while a write-back or a flush has fallen behind (a huge transaction).
        holdBack: () => (store.underPressure ? untilPressureEnds(store) : store.backlog()),
        invalidate: async (handles, reason) => {
          await shapes?.invalidateHandles(handles, reason)
        },
        verifyTable: async (info) => {
          try {
            return catalogChanged(info, (await loadTableStates(db, [info.oid])).get(info.oid))
          } catch (err) {
            // The catalog watch asks again within a second.
            options.logger?.warn({ err, table: `${info.schema}.${info.name}` }, 'checking a table against the catalog failed')
            return undefined
          }
        },
      })
      const shapeOptions = {
        store,
        router,
        db,
        snapshotPool,
        snapshotConnections,
        moveInPool,
        publication,
        memoryBudgetBytes,
        ...(options.maxShapes === undefined ? {} : { maxShapes: options.maxShapes }),
        ...(options.maxSubqueryViewEntries === undefined ? {} : { maxSubqueryViewEntries: options.maxSubqueryViewEntries }),
        ...(options.shapeTtlMs === undefined ? {} : { shapeTtlMs: options.shapeTtlMs }),
        ...(options.shapeClock === undefined ? {} : { clock: options.shapeClock }),
        ...(options.tableCacheMs === undefined ? {} : { tableCacheMs: options.tableCacheMs }),
        ...(options.catalogCheckMs === undefined ? {} : { catalogCheckMs: options.catalogCheckMs }),
        ...(options.subqueryHeld === undefined ? {} : { subqueryHeld: options.subqueryHeld }),
        ...(options.logger === undefined ? {} : { logger: options.logger }),
        onPressure: (paused: boolean) => (paused ? replication?.pause(PAUSE_SHAPE_MEMORY) : replication?.resume(PAUSE_SHAPE_MEMORY)),
      }
      if (standby) {
        // Everything the takeover can do without the lock, done while waiting for it (standby.ts); the
        // spill directory, still the writer's, is wiped below once the lock is ours.
        shapes = await ShapeManager.prepare({ ...shapeOptions, spillDir: SpillDir.at(queuesDir) })
        await waitAndPromote(store, shapes, options)
        opening = false
        await shapes.promote({ recheckTables: true })
      }
      await publication.ensure()
      const slot = new SlotManager(db, { name: options.slotName ?? DEFAULT_SLOT_NAME })
      const slotLsn = (await slot.ensure()).slot.confirmedFlushLsn ?? 0n
      // Opened once each: opening wipes what a previous process left, which the slot will resend.
      streams = await SpillStreamBuffer.open(await SpillDir.open(join(options.storageDir, 'spill', 'streams')))
      const queues = await SpillDir.open(queuesDir)
      const routedDir = await SpillDir.open(join(options.storageDir, 'spill', 'routed'))
      // Streamed transactions are routed as they arrive, their lines kept until the commit (routed-ahead.ts).
      ahead = new RoutedAhead(router, routedDir)
      shapes ??= await ShapeManager.open({ ...shapeOptions, spillDir: queues })
      const replicationGap = await discardIfSlotAhead(shapes, slotLsn, store.durableLsn, options.logger)
      // Now every log holds all commits below the slot's position (or there is no log): say so, so that a
      // crash before the first transaction is routed does not find a fresh store's shapes behind the slot.
      routed.lsn = store.durableLsn
      if (slotLsn > 0n) store.advance(slotLsn - 1n)
      const buffering = new BufferingSink(streams, router, options.routeAhead === false ? undefined : ahead)
      const onLarge = options.onLargeTransactionDurable
      const largeTransactions = onLarge === undefined ? undefined : new LargeTransactionWatch(buffering, store, onLarge)
      replication = new ReplicationClient({
        connection: options.connectionString,
        // Streamed and oversized transactions wait in the spill buffer until they commit, routed meanwhile.
        sink: largeTransactions ?? buffering,
        durableLsn: () => store.durableLsn,
        // The slot skips WAL nobody subscribed to only once the store's watermark covers it (see discardIfSlotAhead).
        // Not while a move-in holds routed transactions back from the store (router.holdAdvance).
        promiseIdle: (lsn) => (router.advanceHeld ? undefined : idle.advance(lsn)),
        // The replay after a failed flush starts from the store's durable state, nothing accepted past it left.
        beforeReplay: async () => {
          const cut = await store.rollbackToDurable()
          replayPending = false
          options.logger?.info({ logs: cut, durableLsn: formatLsn(store.durableLsn) }, 'replaying from the durable watermark')
        },
        // Subquery shapes learn from a message of their own when the stream has passed a move-in's snapshot.
        messages: true,
        slotName: slot.name,
        publicationNames: [publication.name],
        maxTransactionBytes: options.maxTransactionBytes ?? Math.max(1024 * 1024, Math.floor(memoryBudgetBytes / 8)),
        ...(options.protoVersion === undefined ? {} : { protoVersion: options.protoVersion }),
        ...(options.replicationSettings === undefined ? {} : { settings: options.replicationSettings }),
      })
      const client = replication
      const ack = ackAfterWakes((lsn) => void client.acknowledge(lsn))
      const holdForStore = (held: boolean): void => (held ? client.pause(PAUSE_STORAGE_TAILS) : client.resume(PAUSE_STORAGE_TAILS))
      if (store.underPressure) holdForStore(true)
      const health = new PipelineHealth({
        store,
        replication: client,
        replicationTimeoutMs: options.healthReplicationTimeoutMs ?? DEFAULT_HEALTH_REPLICATION_TIMEOUT_MS,
      })
      // A full disk fails every flush and every replay after it: one line per fault and window, not hundreds.
      const dedupe = new LogDedupe({ windowMs: options.logDedupeWindowMs ?? DEFAULT_DEDUPE_WINDOW_MS })
      const logger = options.logger
      let failingSince: number | undefined
      const unsubscribe = [
        idle.cancel,
        () => largeTransactions?.close(),
        // Tails past their budget wait for a checkpoint, which needs the event loop the stream would take.
        store.onPressure(holdForStore),
        ack.cancel,
        store.onFlush((result) => ack.soon(result.durableLsn), { advanced: false }),
        store.onError((error: StorageError) => {
          if (logger !== undefined) dedupe.log(errorKey('storage error', error), (data, msg) => logger.error(data, msg), { err: error }, 'storage error')
          if (!(error instanceof FlushError)) return
          failingSince ??= Date.now()
          replayPending = true
          idle.cancel()
          // Accepted but unsynced entries were rolled back: have Postgres send them again. State kept beside
          // the logs goes first (subquery shapes' result sets), before any of it is delivered again; what their
          // move-ins held back, released as they go, is not promised (replayPending).
          shapes?.storeRolledBack()
          client.replayFromDurable(error)
        }),
        store.onFlush(() => {
          if (failingSince === undefined) return
          // The summaries of what repeated while it failed come before the line that says it ended.
          dedupe.flush()
          logger?.info({ failedForMs: Date.now() - failingSince, failures: health.commitFailures }, 'storage commits again')
          failingSince = undefined
        }, { advanced: false }),
      ]
      client.on('disconnected', (info) => {
        if (logger === undefined) return
        dedupe.log(errorKey('replication disconnected', info.reason), (data, msg) => logger.warn(data, msg), { err: info.reason, retryInMs: info.retryInMs }, 'replication disconnected')
      })
      await startStoppable(client, options.signal)
      const shapeService = new PipelineShapeService({ shapes, store, router, subsetPool, routed, health })
      const compactor = new ShapeCompactor({
        store,
        router,
        shapes,
        ratio: options.compactRatio ?? DEFAULT_COMPACT_RATIO,
        minEntries: options.compactMinEntries ?? DEFAULT_COMPACT_MIN_ENTRIES,
        intervalMs: options.compactIntervalMs ?? DEFAULT_COMPACT_INTERVAL_MS,
        retireAfterMs: options.compactRetireMs ?? DEFAULT_COMPACT_RETIRE_MS,
        // A quarter of the budget for held transactions: a compaction is background work.
        memoryBytes: Math.floor(memoryBudgetBytes / 4),
        logger: options.logger,
      })
      compactor.start()
      return new Pipeline({ store, shapes, router, replication: client, shapeService, health, dedupe, pools, streams, ahead, unsubscribe, replicationGap, compactor, logger: options.logger })
    } catch (error) {
      // Its catalog watch would otherwise go on asking a closed pool.
      await shapes?.close().catch(() => {})
      await streams?.close().catch(() => {})
      await ahead?.close().catch(() => {})
      await Promise.allSettled(pools.map((p) => p.end()))
      await store.close().catch(() => {})
      throw error
    }
  }

  /** Stops streaming, makes everything routed durable, acknowledges it, and closes. Idempotent. */
  stop(): Promise<void> {
    this.stopping ??= this.shutdown()
    return this.stopping
  }

  private async shutdown(): Promise<void> {
    // Each step's milliseconds, logged at the end: with many shapes a stop takes seconds, and a standby waits for it.
    const steps: Record<string, number> = {}
    let at = performance.now()
    const step = (name: string): void => {
      const now = performance.now()
      steps[name] = Math.round(now - at)
      at = now
    }
    await this.compactor.stop()
    await this.shapes.close()
    step('shapesMs')
    const flushed = await this.store.flush().catch(() => undefined)
    if (flushed !== undefined) this.replication.acknowledge(flushed.durableLsn)
    await this.replication.stop()
    step('replicationMs')
    for (const off of this.unsubscribe) off()
    this.health.close()
    this.dedupe.flush()
    await this.streams.close().catch(() => {})
    await this.ahead.close().catch(() => {})
    await Promise.allSettled(this.pools.map((p) => p.end()))
    step('poolsMs')
    await this.store.close()
    step('storeMs')
    this.logger?.info({ ...steps, shapes: this.shapes.size }, 'pipeline stopped')
  }
}

/** Resolves once the store no longer asks its writer to hold back (its tails are back within their budget, or it closed). */
function untilPressureEnds(store: FileLogStore): Promise<void> {
  return new Promise((resolve) => {
    const off = store.onPressure((held) => {
      if (held) return
      off()
      resolve()
    })
    if (!store.underPressure) {
      off()
      resolve()
    }
  })
}

/**
 * Postgres hears of a flush at the next turn of the event loop, with the
 * highest watermark given meanwhile: a flush's listeners include the live
 * requests it wakes, and a status update sent before them (a socket write that
 * also wakes the walsender) would stand between the fdatasync and the
 * responses. The slot's position only has to follow the watermark.
 */
function ackAfterWakes(acknowledge: (lsn: bigint) => void): { soon: (lsn: bigint) => void; cancel: () => void } {
  let latest = 0n
  let immediate: NodeJS.Immediate | undefined
  const run = (): void => {
    immediate = undefined
    acknowledge(latest)
  }
  return {
    soon: (lsn) => {
      if (lsn > latest) latest = lsn
      immediate ??= setImmediate(run)
    },
    cancel: () => {
      if (immediate !== undefined) clearImmediate(immediate)
      immediate = undefined
    },
  }
}

/** `store.advance` at most once per `intervalMs`, with the highest LSN given meanwhile. */
function pacedAdvance(store: FileLogStore, intervalMs: number): { advance: (lsn: bigint) => void; cancel: () => void } {
  let latest = 0n
  let timer: NodeJS.Timeout | undefined
  return {
    advance: (lsn) => {
      if (lsn > latest) latest = lsn
      if (timer !== undefined) return
      timer = setTimeout(() => {
        timer = undefined
        store.advance(latest)
      }, intervalMs)
      timer.unref()
    },
    // Drops a pending promise and what it would have promised (a stop, or a failed flush before the replay).
    cancel: () => {
      clearTimeout(timer)
      timer = undefined
      latest = 0n
    },
  }
}

/**
 * Postgres is acknowledged only up to the store's durable watermark, so the
 * slot's `confirmed_flush_lsn` (the first commit LSN it sends again) is at most
 * one past it. Further ahead, commits between the two will never arrive, and
 * every restored log would silently miss them: the store directory came from
 * an older backup or another machine, the store cut its watermark back after a
 * damaged journal, or another server moved the slot. Those shapes are
 * invalidated (clients get 409 and resync) before replication starts; shapes
 * created afterwards take a fresh snapshot.
 */
async function discardIfSlotAhead(shapes: ShapeManager, slotLsn: bigint, storeLsn: bigint, logger: ShapeLogger | undefined): Promise<ReplicationGap | undefined> {
  const handles = shapes.handles()
  if (slotLsn <= storeLsn + 1n || handles.length === 0) return undefined
  const detail = `the replication slot had confirmed ${formatLsn(slotLsn)}, past the shape store's durable position ${formatLsn(storeLsn)}: changes in between were lost`
  await shapes.invalidateHandles(handles, { kind: 'replication_gap', detail })
  logger?.warn(
    { slotLsn: formatLsn(slotLsn), storeLsn: formatLsn(storeLsn), invalidated: handles.length },
    `replication slot is ahead of the shape store (${formatLsn(slotLsn)} > ${formatLsn(storeLsn)}); invalidated ${handles.length} restored shape(s)`,
  )
  return { slotLsn, storeLsn, invalidated: handles.length }
}

/**
 * Starts replication, which retries for as long as Postgres refuses it (the
 * slot active in another process, a database down); an abort of `signal` (a
 * stop signal during start-up) stops the client and rejects with
 * `start_stopped`.
 */
async function startStoppable(client: ReplicationClient, signal: AbortSignal | undefined): Promise<void> {
  if (signal?.aborted === true) throw new ServerError('start_stopped')
  const onAbort = (): void => void client.stop()
  signal?.addEventListener('abort', onAbort, { once: true })
  try {
    await client.start()
  } catch (error) {
    if (isAborted(signal)) throw new ServerError('start_stopped', undefined, { cause: error })
    throw error
  } finally {
    signal?.removeEventListener('abort', onAbort)
  }
}

/** Read through a call: TypeScript would keep `signal.aborted` narrowed to its value before an await. */
function isAborted(signal: AbortSignal | undefined): boolean {
  return signal?.aborted === true
}
