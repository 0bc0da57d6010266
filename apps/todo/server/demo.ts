// The whole demo in one process, with no configuration: Sluice (which starts
// its embedded Postgres when no DATABASE_URL is given), the todo schema, the
// todo API and the built app. Prints the one URL to open.
//
//   npm start                      (from the repository root: builds the app and compiles this, then runs it)
//   node apps/todo/dist-server/demo.js [sluice settings...]      (after `pnpm --filter @sluice/todo-app build`)
//   node --import tsx --conditions=sluice-source apps/todo/server/demo.ts [sluice settings...]   (from source)
//
// Arguments and SLUICE_* variables are Sluice's own settings (`sluice --help`);
// TODO_PORT (default 4000) and TODO_HOST (default: Sluice's --host) place the app.
import { fileURLToPath } from 'node:url'
import { ConfigError, createServer, loadConfig, onShutdownSignals } from '@sluice/server'
import pg from 'pg'
import { buildTodoApi } from './api.js'
import { migrate } from './schema.js'
import { seedExample } from './seed.js'

const DEFAULT_APP_PORT = 4000
const staticDir = fileURLToPath(new URL('../dist', import.meta.url))

async function main(argv: readonly string[], env: NodeJS.ProcessEnv): Promise<void> {
  let config
  try {
    // Sluice's request and shape logs would bury the one line people need; `--log-level info` brings them back.
    config = loadConfig(argv, { SLUICE_LOG_LEVEL: 'warn', ...env })
  } catch (error) {
    if (!(error instanceof ConfigError)) throw error
    for (const problem of error.problems) process.stderr.write(`sluice: ${problem}\n`)
    process.exit(2)
  }
  const appPort = Number(env['TODO_PORT'] ?? DEFAULT_APP_PORT)
  const appHost = env['TODO_HOST'] ?? config.host

  const sluice = await createServer(config)
  const pool = new pg.Pool({ connectionString: sluice.databaseUrl, max: 10 })
  let api: ReturnType<typeof buildTodoApi> | undefined
  const stop = async (): Promise<void> => {
    await api?.close()
    await pool.end()
    await sluice.close()
  }
  try {
    const migration = await migrate(pool)
    // Only into a database this run created the tables in: a list someone deleted stays deleted.
    const seeded = migration.from === 0 && (await seedExample(pool))
    api = buildTodoApi({ pool, shapeUrl: `${sluice.url}/v1/shape`, staticDir })
    const address = await api.listen({ port: appPort, host: appHost })
    const url = address.replace('//0.0.0.0', '//127.0.0.1').replace('//[::]', '//127.0.0.1')
    const database = sluice.embedded === undefined ? 'your DATABASE_URL' : `an embedded Postgres in ${sluice.embedded.dataDir}`
    process.stdout.write(
      `\nSluice todo demo: open ${url}\n\n` +
        `  (Sluice on port ${sluice.port}, syncing from ${database}; shape logs in ${config.storageDir}` +
        `${seeded ? '; added an example list' : ''}. Ctrl-C stops it.)\n\n`,
    )
  } catch (error) {
    await stop().catch(() => {})
    throw error
  }

  // A repeat within a second (a group kill, npm passing it on) is the same request; a later one exits at once,
  // and the embedded Postgres goes with the process either way (its exit hook).
  onShutdownSignals({
    stop: () => {
      stop().then(
        () => process.exit(0),
        (error: unknown) => {
          process.stderr.write(`demo: shutdown failed: ${String(error)}\n`)
          process.exit(1)
        },
      )
    },
    force: () => process.exit(130),
  })
}

main(process.argv.slice(2), process.env).catch((error: unknown) => {
  process.stderr.write(`demo: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`)
  process.exit(1)
})
