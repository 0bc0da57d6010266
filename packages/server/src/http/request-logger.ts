import type { FastifyBaseLogger } from 'fastify'
import type { FastifyChildLoggerFactory } from 'fastify/types/logger.js'

type Bindings = Record<string, unknown>
type Level = 'fatal' | 'error' | 'warn' | 'info' | 'debug' | 'trace'

/**
 * fastify's per-request logger (its `childLoggerFactory`), made on first use.
 * fastify makes a pino child for every request, to bind the request id; a
 * child is a few objects and strings, and a request that logs nothing (every
 * parked long-poll, at the usual levels) needed none. This holds the parent
 * and the bindings, and makes the child the first time a line is logged at an
 * enabled level, so what gets logged, and with which bindings, is unchanged.
 * Child options (a route's own log level or serializers) get the child at
 * once, as fastify would.
 */
export const requestLogger: FastifyChildLoggerFactory = (logger, bindings, options) => {
  if (Object.keys(options).length > 0) return logger.child(bindings, options)
  return new LazyChild(logger, bindings) as unknown as FastifyBaseLogger
}

class LazyChild {
  private made: FastifyBaseLogger | undefined = undefined

  constructor(
    private readonly parent: FastifyBaseLogger,
    private readonly bindings: Bindings,
  ) {}

  private real(): FastifyBaseLogger {
    return (this.made ??= this.parent.child(this.bindings))
  }

  get level(): string {
    return (this.made ?? this.parent).level
  }

  set level(level: string) {
    this.real().level = level
  }

  isLevelEnabled(level: string): boolean {
    const log = (this.made ?? this.parent) as { isLevelEnabled?: (level: string) => boolean }
    return log.isLevelEnabled === undefined || log.isLevelEnabled.call(log, level)
  }

  child(bindings: Bindings, options?: Record<string, unknown>): FastifyBaseLogger {
    return this.real().child(bindings, options)
  }

  fatal(...args: unknown[]): void {
    this.write('fatal', args)
  }

  error(...args: unknown[]): void {
    this.write('error', args)
  }

  warn(...args: unknown[]): void {
    this.write('warn', args)
  }

  info(...args: unknown[]): void {
    this.write('info', args)
  }

  debug(...args: unknown[]): void {
    this.write('debug', args)
  }

  trace(...args: unknown[]): void {
    this.write('trace', args)
  }

  silent(): void {}

  private write(level: Level, args: unknown[]): void {
    if (this.made === undefined && !this.isLevelEnabled(level)) return
    const log = this.real()
    ;(log[level] as (...a: unknown[]) => void).apply(log, args)
  }
}
