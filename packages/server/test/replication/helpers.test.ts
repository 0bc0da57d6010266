import { readFileSync } from 'node:fs'
import { describe, expect, it } from 'vitest'
import {
  DEFAULT_BACKOFF,
  DISPLAY_SETTINGS,
  PgoutputDecodeError,
  REPLICATION_ERROR_CODES,
  SluicePgoutputPlugin,
  backoffDelay,
  quoteLiteral,
  startupOptions,
} from '../../src/replication/index.js'
import { Wire } from './wire.js'

describe('backoffDelay', () => {
  const policy = { initialMs: 100, maxMs: 1_000, multiplier: 2 }

  it.each([
    { attempt: 0, random: 0, delay: 50 },
    { attempt: 0, random: 0.999_999, delay: 100 },
    { attempt: 1, random: 0.5, delay: 150 },
    { attempt: 3, random: 0, delay: 400 },
    { attempt: 4, random: 0.999_999, delay: 1_000 },
    { attempt: 50, random: 0, delay: 500 },
  ])('attempt $attempt with random $random waits $delay ms', ({ attempt, random, delay }) => {
    expect(backoffDelay(attempt, policy, () => random)).toBe(delay)
  })

  it('never exceeds the cap and grows on average', () => {
    const delays = Array.from({ length: 20 }, (_, attempt) => backoffDelay(attempt, DEFAULT_BACKOFF))
    expect(Math.max(...delays)).toBeLessThanOrEqual(DEFAULT_BACKOFF.maxMs)
    expect(delays[10]).toBeGreaterThan(delays[0] ?? Infinity)
  })
})

describe('startupOptions', () => {
  it('escapes the spaces the server would split on', () => {
    expect(startupOptions({ DateStyle: 'ISO, DMY', a: 'b\\c' })).toBe('-c DateStyle=ISO,\\ DMY -c a=b\\\\c')
  })

  it('carries every display setting of docs/protocol.md §3.5', () => {
    expect(startupOptions(DISPLAY_SETTINGS)).toBe(
      '-c bytea_output=hex -c DateStyle=ISO,\\ DMY -c TimeZone=UTC -c extra_float_digits=1 -c IntervalStyle=iso_8601',
    )
  })
})

describe('quoteLiteral', () => {
  it.each([
    ['plain', "'plain'"],
    ["it's", "'it''s'"],
    ['"x"', `'"x"'`],
    ['', "''"],
  ])('%s', (input, quoted) => {
    expect(quoteLiteral(input)).toBe(quoted)
  })
})

describe('SluicePgoutputPlugin.parse', () => {
  it('counts what it parses and returns failures instead of throwing (it runs inside the socket handler)', () => {
    const plugin = new SluicePgoutputPlugin({ publicationNames: ['p'] })
    expect(plugin.name).toBe('pgoutput')
    expect(plugin.parse(Wire.of('S').u32(9).u8(1).build())).toEqual({ tag: 'stream-start', xid: 9, firstSegment: true })
    // The plugin tracks segments: this Insert carries an xid prefix.
    expect(plugin.parse(Wire.of('I').u32(9).u32(1).char('N').tuple(['x']).build())).toMatchObject({ tag: 'insert', xid: 9 })
    const failure = plugin.parse(Buffer.from('Z'))
    expect(failure).toMatchObject({ tag: 'decode-failure' })
    expect((failure as { error: unknown }).error).toBeInstanceOf(PgoutputDecodeError)
    expect(plugin.received).toBe(3)
  })
})

describe('error codes', () => {
  it('are all documented in the README section', () => {
    const readme = readFileSync(new URL('../../README.md', import.meta.url), 'utf8')
    const section = readme.slice(readme.indexOf('## Replication'))
    const documented = [...section.matchAll(/^\| `([a-z_]+)` \|/gm)].map((m) => m[1])
    expect(documented.sort()).toEqual(Object.keys(REPLICATION_ERROR_CODES).sort())
  })
})
