import type { FastifyBaseLogger } from 'fastify'
import { describe, expect, it } from 'vitest'
import { requestLogger } from '../../src/http/request-logger.js'
import { createLogger } from '../../src/logger.js'

/** A real pino logger (the server's) writing to an array, with a count of the children made of it. */
function logger(level: 'info' | 'debug'): { log: FastifyBaseLogger; lines: Array<Record<string, unknown>>; children: () => number } {
  const lines: Array<Record<string, unknown>> = []
  const log = createLogger({ level, destination: { write: (text: string) => void lines.push(JSON.parse(text) as Record<string, unknown>) } })
  let children = 0
  const child = log.child
  // Counted, not replaced: the children are pino's own (and inherit this, so theirs are counted too).
  log.child = function (this: typeof log, ...args: Parameters<typeof child>) {
    children++
    return child.apply(this, args)
  } as typeof log.child
  return { log, lines, children: () => children }
}

const FACTORY_THIS = undefined as never
const RAW_REQUEST = undefined as never

describe('requestLogger (fastify childLoggerFactory)', () => {
  it('makes no child for a request that logs nothing at an enabled level, and one child, with the bindings, for one that does', () => {
    const { log, lines, children } = logger('info')
    const quiet = requestLogger.call(FACTORY_THIS, log, { reqId: 'req-1' }, {}, RAW_REQUEST)
    quiet.debug({ a: 1 }, 'not at info')
    quiet.trace('nor this')
    expect(quiet.level).toBe('info')
    expect((quiet as unknown as { isLevelEnabled(l: string): boolean }).isLevelEnabled('debug')).toBe(false)
    expect(children()).toBe(0)
    expect(lines).toEqual([])

    const loud = requestLogger.call(FACTORY_THIS, log, { reqId: 'req-2' }, {}, RAW_REQUEST)
    loud.warn({ code: 'x' }, 'first')
    loud.error('second')
    expect(children()).toBe(1)
    expect(lines.map((l) => [l.level, l.msg, l.reqId, l.code, l.name])).toEqual([
      [40, 'first', 'req-2', 'x', 'sluice'],
      [50, 'second', 'req-2', undefined, 'sluice'],
    ])
    // A child of the request logger carries both bindings, as pino's would.
    loud.child({ extra: true }).info('nested')
    expect(lines.at(-1)).toMatchObject({ msg: 'nested', reqId: 'req-2', extra: true })
  })

  it('follows the level: debug lines are written when the server logs at debug; child options make the child at once', () => {
    const { log, lines, children } = logger('debug')
    const l = requestLogger.call(FACTORY_THIS, log, { reqId: 'req-3' }, {}, RAW_REQUEST)
    l.debug({ status: 200 }, 'request')
    expect(lines).toEqual([expect.objectContaining({ level: 20, msg: 'request', reqId: 'req-3', status: 200 })])
    const own = requestLogger.call(FACTORY_THIS, log, { reqId: 'req-4' }, { level: 'warn' }, RAW_REQUEST)
    expect(children()).toBe(2)
    own.info('below its own level')
    expect(lines).toHaveLength(1)
  })
})
