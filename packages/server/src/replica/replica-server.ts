// A read replica from a config (`sluice start --read-only`): the storage
// directory a writer owns, opened read-only, served by the same HTTP app as
// the writer's. Nothing happens on import; `main.ts` picks this or
// `createServer` by `config.readOnly`.
import { existsSync } from 'node:fs'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { type ReadOnlyFileLogStore, WATERMARK_FILE, openReadOnlyLogStore } from '@sluice/storage'
import type { FastifyBaseLogger, FastifyInstance } from 'fastify'
import pg from 'pg'
import { ConfigError, type SluiceConfig } from '../config.js'
import { ServerError } from '../errors.js'
import { DEFAULT_SENDFILE_MIN_BYTES } from '../defaults.js'
import { buildApp } from '../http/app.js'
import { type BodyPath, resolveBodyPath } from '../http/body-path.js'
import { loadNativeAddon } from '../native-addon.js'
import { type SluiceLogger, createLogger } from '../logger.js'
import { SHUTDOWN_GRACE_MS, hostForUrl, httpOptions } from '../server.js'
import { ReplicaShapeService } from './replica-shape-service.js'

/** While no writer has created the store yet, a replica starting looks for it this often. */
const STORE_WAIT_INTERVAL_MS = 250

export interface ReplicaServer {
  readonly config: SluiceConfig
  readonly url: string
  readonly port: number
  /** The database whose catalog the replica reads. */
  readonly databaseUrl: string
  /** A replica never runs a Postgres of its own. */
  readonly embedded: undefined
  readonly app: FastifyInstance
  readonly shapes: ReplicaShapeService
  readonly store: ReadOnlyFileLogStore
  readonly bodyPath: BodyPath
  readonly logger: SluiceLogger
  readonly startupMs: number
  /** Stops accepting, answers waiting requests, closes the store. Idempotent. */
  close(): Promise<void>
}

export interface CreateReplicaServerOptions {
  readonly logger?: SluiceLogger
  /** Gives up waiting for a writer to create the store after this long (default: waits as long as it takes). */
  readonly storeWaitMs?: number
  /** Gives up that wait at once (the start then rejects with `replica_stopped`): a stop signal while no writer has run yet. */
  readonly signal?: AbortSignal
}

export async function createReplicaServer(config: SluiceConfig, options: CreateReplicaServerOptions = {}): Promise<ReplicaServer> {
  const started = performance.now()
  const logger = options.logger ?? createLogger({ level: config.logLevel })
  const databaseUrl = config.databaseUrl
  const problems: string[] = []
  if (databaseUrl === undefined) problems.push('--read-only: needs --database-url (a read replica reads the catalog of the database its writer replicates; it starts no Postgres)')
  if (config.standby) problems.push('--read-only and --standby: choose one (a standby becomes the writer, a read replica never writes)')
  if (problems.length > 0 || databaseUrl === undefined) throw new ConfigError(problems)
  const dir = join(config.storageDir, 'logs')
  await untilStoreExists(dir, options.storeWaitMs ?? Number.POSITIVE_INFINITY, logger, options.signal)
  const store = openReadOnlyLogStore({ dir, pollIntervalMs: 0 })
  const db = new pg.Pool({ connectionString: databaseUrl, max: 2, application_name: 'sluice_replica' })
  db.on('error', (err) => logger.warn({ err }, 'idle Postgres connection failed'))
  let shapes: ReplicaShapeService | undefined
  let app: FastifyInstance | undefined
  try {
    shapes = await ReplicaShapeService.open({
      store,
      dir,
      db,
      tableCacheMs: config.tableCacheMs,
      fallbackMs: config.replicaPollMs,
      logger: logger.child({ component: 'replica' }),
    })
    const bodyPath = await resolveBodyPath(config.sendfile)
    if (bodyPath.name === 'sendfile') logger.info({ bodyPath: 'sendfile', minBytes: DEFAULT_SENDFILE_MIN_BYTES }, 'large response bodies are sent with sendfile(2)')
    const addon = config.parkLongPolls ? await loadNativeAddon() : undefined
    app = buildApp({ shapes, http: httpOptions(config), logger: logger as FastifyBaseLogger, bodyPath, addon })
    const address = await app.listen({ port: config.port, host: config.host })
    const port = Number(new URL(address).port)
    logger.info({ storageDir: config.storageDir, shapes: shapes.stats().shapes, watching: shapes.stats().watching }, 'read replica serving the store')
    const service = shapes
    const listening = app
    let closing: Promise<void> | undefined
    const shutdown = async (): Promise<void> => {
      const grace = setTimeout(() => listening.server.closeAllConnections(), SHUTDOWN_GRACE_MS)
      grace.unref()
      await listening.close()
      clearTimeout(grace)
      service.close()
      await db.end().catch(() => {})
      await store.close()
    }
    return {
      config,
      url: `http://${hostForUrl(config.host)}:${port}`,
      port,
      databaseUrl,
      embedded: undefined,
      app: listening,
      shapes: service,
      store,
      bodyPath,
      logger,
      startupMs: Math.round(performance.now() - started),
      close: () => (closing ??= shutdown()),
    }
  } catch (error) {
    await app?.close().catch(() => {})
    shapes?.close()
    await db.end().catch(() => {})
    await store.close().catch(() => {})
    throw error
  }
}

/** A replica started before its writer ever ran waits for the store rather than failing (a fleet starts in any order). */
async function untilStoreExists(dir: string, waitMs: number, logger: SluiceLogger, signal: AbortSignal | undefined): Promise<void> {
  const deadline = Date.now() + waitMs
  let said = false
  while (!existsSync(join(dir, WATERMARK_FILE))) {
    if (signal?.aborted === true) throw new ServerError('replica_stopped')
    if (Date.now() >= deadline) throw new ConfigError([`--read-only: ${dir} holds no store (has a writer run on this storage directory?)`])
    if (!said) logger.info({ dir }, 'read replica: waiting for a writer to create the store')
    said = true
    // The abort ends the sleep too (the loop then throws): a stop is not held up by the interval.
    await sleep(STORE_WAIT_INTERVAL_MS, undefined, signal === undefined ? undefined : { signal }).catch(() => {})
  }
}
