// The server's logger: pino, JSON lines on stdout. Fastify is handed the same
// instance, so request logs and pipeline logs share one stream and one level.
import pino, { type DestinationStream, type Logger } from 'pino'
import type { LogLevel } from './config.js'

export type SluiceLogger = Logger

export interface CreateLoggerOptions {
  readonly level: LogLevel
  /** Default: stdout (synchronous writes, so nothing is lost when the process exits). */
  readonly destination?: DestinationStream
}

export function createLogger(options: CreateLoggerOptions): SluiceLogger {
  return pino(
    {
      level: options.level,
      base: { name: 'sluice' },
      // Secrets can arrive in query strings and connection strings.
      redact: { paths: ['req.query.secret', 'databaseUrl', 'connectionString'], censor: '[redacted]' },
    },
    options.destination ?? pino.destination({ dest: 1, sync: true }),
  )
}

/** Hides the password of a connection string for logs and banners. */
export function redactUrl(url: string): string {
  try {
    const parsed = new URL(url)
    if (parsed.password !== '') parsed.password = '***'
    // libpq (and pg) also take the password as a query parameter.
    for (const name of ['password', 'sslpassword']) if (parsed.searchParams.has(name)) parsed.searchParams.set(name, '***')
    return parsed.toString()
  } catch {
    return '(unparseable URL)'
  }
}
