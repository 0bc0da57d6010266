// Everything the browser tests run against, all real: a Postgres cluster, a
// Sluice server (restartable on the same port and storage), optionally nginx
// as a caching CDN in front of it (the documented deploy/nginx.conf), the todo
// API serving the built app, and a headless Chromium.
import { readFileSync } from 'node:fs'
import { createRequire } from 'node:module'
import { type SluiceConfig, createServer, loadConfig } from '@sluice/server'
import {
  CHROMIUM_ARGS,
  type NginxConfigContext,
  type NginxServer,
  type PostgresCluster,
  type TempDir,
  findChromium,
  startNginx,
  stablePort,
  startPostgres,
  tempDir,
} from '@sluice/test-utils'
import type { FastifyInstance } from 'fastify'
import pg from 'pg'
import { type Browser, chromium } from 'playwright-core'
import { buildTodoApi } from '../server/api.js'

type SluiceServer = Awaited<ReturnType<typeof createServer>>
import { migrate } from '../server/schema.js'

/**
 * deploy/nginx.conf with its three machine-specific values replaced, exactly
 * as the server's CDN tests do; each must occur once, so an edit that moves
 * one fails here rather than testing another configuration.
 */
function deployConfig(context: NginxConfigContext): string {
  const path = createRequire(import.meta.url).resolve('@sluice/server/deploy/nginx.conf')
  let text = readFileSync(path, 'utf8')
  const substitutions: ReadonlyArray<readonly [string, string]> = [
    ['listen 80;', `listen 127.0.0.1:${context.port};`],
    ['server 127.0.0.1:3000;', `server 127.0.0.1:${context.upstreamPort};`],
    ['proxy_cache_path /var/cache/nginx/sluice ', `proxy_cache_path ${context.cacheDir} `],
  ]
  for (const [from, to] of substitutions) {
    const count = text.split(from).length - 1
    if (count !== 1) throw new Error(`deploy/nginx.conf: expected "${from}" once, found it ${count} times`)
    text = text.replace(from, to)
  }
  return text
}

export interface Stack {
  readonly postgres: PostgresCluster
  /** A pool on the app's database, for writes made "with psql", not through the app. */
  readonly db: pg.Pool
  /** The Sluice origin (http://127.0.0.1:port), whatever the browser is pointed at. */
  readonly sluiceUrl: string
  /** What the app reads shapes from: nginx's `/v1/shape` when it is in front, else Sluice's. */
  readonly shapeUrl: string
  /** The app: the todo API serving the built page. */
  readonly appUrl: string
  readonly nginx: NginxServer | undefined
  readonly browser: Browser
  readonly sluice: SluiceServer | undefined
  /** Stops Sluice (its orderly shutdown, as SIGTERM would), leaving everything else running. */
  stopSluice(): Promise<void>
  /** Starts Sluice again on the same port, storage directory and replication slot. */
  startSluice(): Promise<void>
  close(): Promise<void>
}

export interface StackOptions {
  /** The built app (vite build output). */
  readonly appDir: string
  readonly viaNginx: boolean
}

export async function startStack(options: StackOptions): Promise<Stack> {
  const cleanups: Array<() => Promise<unknown>> = []
  const close = async (): Promise<void> => {
    for (const cleanup of cleanups.reverse()) await cleanup().catch((error: unknown) => console.error('stack cleanup:', error))
    cleanups.length = 0
  }
  try {
    const [postgres, chromiumBinary] = await Promise.all([startPostgres(), findChromium()])
    cleanups.push(() => postgres.stop())
    const storage: TempDir = await tempDir('todo-sluice')
    cleanups.push(() => storage.remove())

    const db = new pg.Pool({ connectionString: postgres.url, max: 4 })
    cleanups.push(() => db.end())
    await migrate(db)

    // Outside the ephemeral range: the server is stopped and started again on this port, and meanwhile a
    // listener on port 0 elsewhere could be given a port from freePort.
    const port = await stablePort()
    const config: SluiceConfig = loadConfig(
      [
        ...['--database-url', postgres.url],
        ...['--port', String(port)],
        ...['--storage-dir', storage.path],
        // The 409 test rotates a shape with DELETE /v1/shape.
        '--allow-delete',
        '--log-level',
        'warn',
      ],
      {},
    )
    let sluice: SluiceServer | undefined = await createServer(config)
    cleanups.push(() => sluice?.close() ?? Promise.resolve())

    let nginx: NginxServer | undefined
    if (options.viaNginx) {
      nginx = await startNginx({ upstreamPort: port, config: deployConfig })
      cleanups.push(() => nginx!.stop())
    }
    const sluiceUrl = `http://127.0.0.1:${port}`
    const shapeUrl = `${nginx?.url ?? sluiceUrl}/v1/shape`

    const api: FastifyInstance = buildTodoApi({ pool: db, shapeUrl, staticDir: options.appDir })
    const address = await api.listen({ port: 0, host: '127.0.0.1' })
    cleanups.push(() => api.close())

    const browser = await chromium.launch({ executablePath: chromiumBinary.path, args: [...CHROMIUM_ARGS] })
    cleanups.push(() => browser.close())

    return {
      postgres,
      db,
      sluiceUrl,
      shapeUrl,
      appUrl: address,
      nginx,
      browser,
      get sluice() {
        return sluice
      },
      async stopSluice() {
        await sluice?.close()
        sluice = undefined
      },
      async startSluice() {
        if (sluice !== undefined) throw new Error('Sluice is already running')
        sluice = await createServer(config)
      },
      close,
    }
  } catch (error) {
    await close()
    throw error
  }
}
