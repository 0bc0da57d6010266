// A whole Sluice server from a config: the embedded Postgres when no database URL
// is given, the pipeline, the HTTP app with /metrics, listening; and its orderly
// shutdown. Nothing happens on import; `main.ts` is the CLI around it.
import { mkdir } from 'node:fs/promises'
import { join } from 'node:path'
import type { FastifyBaseLogger, FastifyInstance } from 'fastify'
import { ConfigError, type SluiceConfig } from './config.js'
import { DEFAULT_SEND_TIMEOUT_MS, DEFAULT_SENDFILE_MIN_BYTES } from './defaults.js'
import { type EmbeddedPostgres, startEmbeddedPostgres } from './embedded-postgres.js'
import { buildApp } from './http/app.js'
import { type BodyPath, resolveBodyPath } from './http/body-path.js'
import { loadNativeAddon } from './native-addon.js'
import { type HeapTrim, startHeapTrim } from './heap-trim.js'
import { releasePooledBodies } from './http/log-body.js'
import { RequestCaches } from './http/request-caches.js'
import { forgetDefinitionKeys } from './shapes/definition/shape-definition.js'
import { forgetParsedClauses } from './where/parse-clause.js'
import { forgetCanonicalTexts } from './where/where-clause.js'
import { writerLockOptions } from './writer-lock.js'
import { metricsRoute } from './http/metrics-route.js'
import { DEFAULT_HTTP_OPTIONS, type HttpOptions } from './http/options.js'
import { type SluiceLogger, createLogger } from './logger.js'
import { ServerMetrics } from './metrics.js'
import { Pipeline } from './pipeline.js'
import type { ShapeLogger } from './shapes/shape-manager.js'

/** How long shutdown waits for in-flight requests before closing their connections. */
export const SHUTDOWN_GRACE_MS = 10_000

export interface SluiceServer {
  readonly config: SluiceConfig
  /** http://host:port of the listening socket (the real port when --port 0). */
  readonly url: string
  readonly port: number
  /** The database Sluice replicates from (the embedded one's when it runs one). */
  readonly databaseUrl: string
  /** Set when Sluice started its own Postgres. */
  readonly embedded: EmbeddedPostgres | undefined
  readonly pipeline: Pipeline
  readonly app: FastifyInstance
  readonly metrics: ServerMetrics
  /** How large response bodies are sent (sendfile, or pread and why). */
  readonly bodyPath: BodyPath
  readonly logger: SluiceLogger
  /** Milliseconds from createServer() to listening. */
  readonly startupMs: number
  /**
   * Stops accepting, answers waiting requests, stops the pipeline (flush +
   * acknowledge), stops the embedded Postgres. Idempotent.
   */
  close(): Promise<void>
}

export interface CreateServerOptions {
  /** Default: a pino logger on stdout at config.logLevel. */
  readonly logger?: SluiceLogger
  /** Gives up a standby's wait for the writer lock (the start then rejects with `standby_stopped`). */
  readonly signal?: AbortSignal
}

export function httpOptions(config: SluiceConfig): HttpOptions {
  return {
    longPollTimeoutMs: config.longPollTimeoutMs,
    maxAge: config.cacheMaxAge,
    staleAge: config.cacheStaleAge,
    secret: config.secret,
    allowDelete: config.allowDelete,
    maxConcurrentInitial: config.maxConcurrentInitial,
    maxConcurrentExisting: config.maxConcurrentExisting,
    initialQueueLength: config.initialQueueLength,
    initialQueueWaitMs: config.initialQueueWaitMs,
    maxCreatingShapes: config.maxCreatingShapes,
    clientShapesPerMinute: config.clientShapesPerMinute,
    clientIdHeader: config.clientIdHeader,
    sseTimeoutMs: config.sseTimeoutMs,
    sendfileMinBytes: DEFAULT_SENDFILE_MIN_BYTES,
    sendTimeoutMs: DEFAULT_SEND_TIMEOUT_MS,
    rangeCacheBytes: config.rangeCacheBytes,
    requestTimeoutMs: DEFAULT_HTTP_OPTIONS.requestTimeoutMs,
    parkLongPolls: config.parkLongPolls,
  }
}

export function hostForUrl(host: string): string {
  if (host === '0.0.0.0' || host === '::') return '127.0.0.1'
  return host.includes(':') ? `[${host}]` : host
}

/** The pipeline's logger, minus the disconnection warning its own orderly stop causes. */
function pipelineLogger(log: SluiceLogger): ShapeLogger {
  return {
    info: (data, message) => log.info(data, message),
    warn: (data, message) => {
      const err = (data as { err?: { code?: unknown } }).err
      if (err?.code === 'client_stopped') log.debug(data, message)
      else log.warn(data, message)
    },
    error: (data, message) => log.error(data, message),
  }
}

export async function createServer(config: SluiceConfig, options: CreateServerOptions = {}): Promise<SluiceServer> {
  if (config.readOnly) throw new ConfigError(['--read-only: start a read replica with createReplicaServer'])
  const started = performance.now()
  const logger = options.logger ?? createLogger({ level: config.logLevel })
  await mkdir(config.storageDir, { recursive: true })

  let embedded: EmbeddedPostgres | undefined
  let pipeline: Pipeline | undefined
  let metrics: ServerMetrics | undefined
  let app: FastifyInstance | undefined
  let heapTrim: HeapTrim | undefined
  const undo = async (): Promise<void> => {
    heapTrim?.stop()
    await app?.close().catch(() => {})
    await metrics?.close().catch(() => {})
    await pipeline?.stop().catch((err: unknown) => logger.error({ err }, 'pipeline stop failed'))
    await embedded?.stop().catch((err: unknown) => logger.error({ err }, 'embedded Postgres stop failed'))
  }

  try {
    let databaseUrl = config.databaseUrl
    if (databaseUrl === undefined) {
      embedded = await startEmbeddedPostgres({ dir: join(config.storageDir, 'postgres'), binDir: config.postgresBin })
      databaseUrl = embedded.url
      logger.info(
        { dataDir: embedded.dataDir, created: embedded.created, port: embedded.port, postgres: embedded.binaries.version, binaries: embedded.binaries.source },
        embedded.created ? 'embedded Postgres created and started' : 'embedded Postgres started',
      )
    }

    const requestCaches = new RequestCaches()
    // The process-wide ones; the shape routes add their own.
    for (const forget of [forgetParsedClauses, forgetCanonicalTexts, forgetDefinitionKeys, releasePooledBodies]) requestCaches.add(forget)
    const trim = await startHeapTrim({
      shed: () => pipeline?.store.shedMemory(),
      forget: () => requestCaches.forget(),
      onRelease: ({ reason, critical, pauseMs }) => logger.info({ reason, critical, pauseMs: Math.round(pauseMs * 10) / 10 }, 'memory given back'),
    })
    heapTrim = trim
    const writerLock = await writerLockOptions({ standby: config.standby, waitMs: config.writerLockWaitMs, logger })
    pipeline = await Pipeline.start({
      connectionString: databaseUrl,
      writerLock,
      standby: config.standby,
      ...(options.signal === undefined ? {} : { signal: options.signal }),
      standbyRefreshMs: config.standbyRefreshMs,
      headsIntervalMs: config.headsIntervalMs,
      storageDir: config.storageDir,
      slotName: config.slot,
      publicationName: config.publication,
      chunkBytes: config.chunkBytes,
      flushIntervalMs: config.flushIntervalMs,
      memoryBudgetBytes: config.memoryBudgetBytes,
      tailBudgetBytes: config.tailBudgetBytes,
      routeAhead: config.routeAhead,
      snapshotConnections: config.snapshotConnections,
      maxShapes: config.maxShapes,
      maxSubqueryViewEntries: config.maxSubqueryViewEntries,
      shapeTtlMs: config.shapeTtlMs,
      compactRatio: config.compactRatio,
      compactMinEntries: config.compactMinEntries,
      tableCacheMs: config.tableCacheMs,
      healthReplicationTimeoutMs: config.healthReplicationTimeoutMs,
      catalogCheckMs: config.catalogCheckMs,
      logger: pipelineLogger(logger.child({ component: 'pipeline' })),
      onLargeTransactionDurable: () => trim.largeTransactionDurable(),
    })
    const shapes = pipeline.shapes
    const shapeLog = logger.child({ component: 'shapes' })
    shapes.on('ready', (handle) => {
      const definition = shapes.definition(handle)
      shapeLog.info({ handle, table: definition === undefined ? undefined : `${definition.schema}.${definition.table}` }, 'shape ready')
      trim.shapeCreated()
    })
    shapes.on('invalidated', ({ handle, definition, reason }) => {
      shapeLog.info({ handle, table: `${definition.schema}.${definition.table}`, reason: reason.kind }, 'shape invalidated')
      trim.shapeRetired()
    })

    const bodyPath = await resolveBodyPath(config.sendfile)
    if (bodyPath.name === 'sendfile') logger.info({ bodyPath: 'sendfile', minBytes: DEFAULT_SENDFILE_MIN_BYTES }, 'large response bodies are sent with sendfile(2)')
    else logger.info({ bodyPath: 'pread', reason: bodyPath.reason }, 'response bodies are sent with pread (no sendfile)')
    metrics = new ServerMetrics({ pipeline, connectionString: databaseUrl, slotName: config.slot, bodyPath, memoryReleases: trim.releases })
    const addon = config.parkLongPolls ? await loadNativeAddon() : undefined
    if (config.parkLongPolls) logger.info({ parkLongPolls: addon !== undefined }, addon !== undefined ? 'waiting long-polls are parked outside node:http' : 'waiting long-polls stay in node:http (the native addon did not load)')
    app = buildApp({ shapes: pipeline.shapeService, http: httpOptions(config), logger: logger as FastifyBaseLogger, metrics, bodyPath, caches: requestCaches, addon })
    app.register(metricsRoute, { metrics })
    const address = await app.listen({ port: config.port, host: config.host })
    // A long-running writer will use the tail reserve: mapped now, not page by page on the append path,
    // and only now, so that its steps do not slow the start.
    void pipeline.store.prefaultTails()
    const port = Number(new URL(address).port)
    const url = `http://${hostForUrl(config.host)}:${port}`

    let closing: Promise<void> | undefined
    const server: SluiceServer = {
      config,
      url,
      port,
      databaseUrl,
      embedded,
      pipeline,
      app,
      metrics,
      bodyPath,
      logger,
      startupMs: Math.round(performance.now() - started),
      close: () => (closing ??= shutdown()),
    }
    const shutdown = async (): Promise<void> => {
      // Stops accepting; waiting long-polls and SSE streams are answered by the app's onClose.
      // A request that never finishes (a client sending its body forever) is cut after a grace period.
      const grace = setTimeout(() => app!.server.closeAllConnections(), SHUTDOWN_GRACE_MS)
      grace.unref()
      await app!.close()
      clearTimeout(grace)
      trim.stop()
      await metrics!.close()
      // Makes everything routed durable and acknowledges it to Postgres.
      await pipeline!.stop()
      await embedded?.stop()
    }
    return server
  } catch (error) {
    await undo()
    throw error
  }
}
