import { readFileSync } from 'node:fs'
import { resolve } from 'node:path'
import { describe, expect, it } from 'vitest'
import { DEFAULT_CHUNK_BYTES, DEFAULT_TAIL_BUDGET_BYTES } from '@sluice/storage'
import { SETTINGS, type SluiceConfig, helpText, loadConfig, parseBytes, parseCli, parseDuration, settingsMarkdown } from '../../src/config.js'
import { DEFAULT_HEALTH_REPLICATION_TIMEOUT_MS, DEFAULT_MAX_SHAPES, DEFAULT_MEMORY_BUDGET_BYTES, DEFAULT_SNAPSHOT_CONNECTIONS, DEFAULT_TABLE_CACHE_MS } from '../../src/defaults.js'
import { DEFAULT_HTTP_OPTIONS } from '../../src/http/options.js'
import { redactUrl } from '../../src/logger.js'
import { httpOptions } from '../../src/server.js'

const DEFAULTS: Partial<SluiceConfig> = {
  databaseUrl: undefined,
  port: 3000,
  host: '127.0.0.1',
  storageDir: resolve('./.sluice'),
  secret: undefined,
  chunkBytes: 10 * 1024 * 1024,
  longPollTimeoutMs: 20_000,
  cacheMaxAge: 60,
  cacheStaleAge: 300,
  sseTimeoutMs: 60_000,
  flushIntervalMs: 10,
  memoryBudgetBytes: 256 * 1024 * 1024,
  tailBudgetBytes: 1024 * 1024 * 1024,
  routeAhead: true,
  snapshotConnections: 4,
  maxShapes: 1_000_000,
  maxSubqueryViewEntries: 2_000_000,
  shapeTtlMs: 86_400_000,
  maxCreatingShapes: 100,
  clientShapesPerMinute: 0,
  clientIdHeader: undefined,
  publication: 'sluice_publication',
  slot: 'sluice_slot',
  allowDelete: false,
  sendfile: true,
  parkLongPolls: true,
  rangeCacheBytes: 32 * 1024 * 1024,
  maxConcurrentInitial: 300,
  maxConcurrentExisting: 10_000,
  initialQueueLength: 5_000,
  initialQueueWaitMs: 10_000,
  logLevel: 'info',
  postgresBin: undefined,
  tableCacheMs: 1000,
  healthReplicationTimeoutMs: 30_000,
  catalogCheckMs: 1000,
  standby: false,
  writerLockWaitMs: 10_000,
  standbyRefreshMs: 10_000,
  headsIntervalMs: 30_000,
  readOnly: false,
  replicaPollMs: 1000,
  compactRatio: 4,
  compactMinEntries: 10_000,
}

/** A valid non-default value for each setting: [text, parsed]. */
const SAMPLES: Record<keyof SluiceConfig, [string, unknown]> = {
  databaseUrl: ['postgres://u:p@db.example:5433/app', 'postgres://u:p@db.example:5433/app'],
  port: ['4001', 4001],
  host: ['0.0.0.0', '0.0.0.0'],
  storageDir: ['/var/lib/sluice', '/var/lib/sluice'],
  secret: ['s3cr3t', 's3cr3t'],
  chunkBytes: ['64KiB', 64 * 1024],
  longPollTimeoutMs: ['1500ms', 1500],
  cacheMaxAge: ['2m', 120],
  cacheStaleAge: ['1h', 3600],
  sseTimeoutMs: ['30s', 30_000],
  flushIntervalMs: ['25ms', 25],
  memoryBudgetBytes: ['1GiB', 1024 ** 3],
  tailBudgetBytes: ['64MiB', 64 * 1024 ** 2],
  snapshotConnections: ['12', 12],
  maxShapes: ['500', 500],
  maxSubqueryViewEntries: ['1000', 1000],
  shapeTtlMs: ['30m', 1_800_000],
  maxCreatingShapes: ['0', 0],
  clientShapesPerMinute: ['60', 60],
  clientIdHeader: ['X-User-Id', 'x-user-id'],
  compactRatio: ['0', 0],
  compactMinEntries: ['500', 500],
  tableCacheMs: ['250ms', 250],
  catalogCheckMs: ['5s', 5000],
  publication: ['My Pub', 'My Pub'],
  slot: ['other_slot_2', 'other_slot_2'],
  allowDelete: ['true', true],
  routeAhead: ['false', false],
  sendfile: ['false', false],
  parkLongPolls: ['false', false],
  rangeCacheBytes: ['0', 0],
  standby: ['true', true],
  writerLockWaitMs: ['2s', 2000],
  standbyRefreshMs: ['3s', 3000],
  headsIntervalMs: ['1500ms', 1500],
  readOnly: ['true', true],
  replicaPollMs: ['250ms', 250],
  maxConcurrentInitial: ['7', 7],
  maxConcurrentExisting: ['8', 8],
  initialQueueLength: ['0', 0],
  initialQueueWaitMs: ['2500ms', 2500],
  logLevel: ['debug', 'debug'],
  healthReplicationTimeoutMs: ['0', 0],
  postgresBin: ['/opt/pg/bin', '/opt/pg/bin'],
}

describe('config schema', () => {
  it('gives an embedder that leaves a setting out what the CLI gives (one constant each)', () => {
    const cli = loadConfig([], {})
    expect(httpOptions(cli)).toEqual({ ...DEFAULT_HTTP_OPTIONS, secret: undefined })
    expect(cli.memoryBudgetBytes).toBe(DEFAULT_MEMORY_BUDGET_BYTES)
    expect(cli.snapshotConnections).toBe(DEFAULT_SNAPSHOT_CONNECTIONS)
    expect(cli.maxShapes).toBe(DEFAULT_MAX_SHAPES)
    expect(cli.tableCacheMs).toBe(DEFAULT_TABLE_CACHE_MS)
    expect(cli.tailBudgetBytes).toBe(DEFAULT_TAIL_BUDGET_BYTES)
    expect(cli.chunkBytes).toBe(DEFAULT_CHUNK_BYTES)
    expect(cli.healthReplicationTimeoutMs).toBe(DEFAULT_HEALTH_REPLICATION_TIMEOUT_MS)
  })

  it('has one sample per setting, each env var SLUICE_* (DATABASE_URL excepted) and each flag unique', () => {
    expect(new Set(SETTINGS.map((s) => s.key))).toEqual(new Set(Object.keys(SAMPLES)))
    expect(new Set(SETTINGS.map((s) => s.flag)).size).toBe(SETTINGS.length)
    for (const s of SETTINGS) expect(s.env === 'DATABASE_URL' || s.env.startsWith('SLUICE_'), s.env).toBe(true)
  })

  it('defaults', () => {
    const parsed = parseCli(['start'], {})
    expect(parsed.problems).toEqual([])
    expect(parsed.command).toBe('start')
    expect(parsed.config).toEqual(DEFAULTS)
  })

  for (const setting of SETTINGS) {
    const [text, value] = SAMPLES[setting.key]
    it(`--${setting.flag} from the flag, the flag=value form, ${setting.env} and the default`, () => {
      expect(loadConfig([`--${setting.flag}`, text], {})[setting.key]).toEqual(value)
      expect(loadConfig([`--${setting.flag}=${text}`], {})[setting.key]).toEqual(value)
      expect(loadConfig([], { [setting.env]: text })[setting.key]).toEqual(value)
      expect(loadConfig([], {})[setting.key]).toEqual(DEFAULTS[setting.key])
      // A flag wins over the environment; an empty variable counts as unset.
      if (setting.default !== undefined) expect(loadConfig([`--${setting.flag}`, text], { [setting.env]: setting.default })[setting.key]).toEqual(value)
      expect(loadConfig([], { [setting.env]: '' })[setting.key]).toEqual(DEFAULTS[setting.key])
    })
  }

  it('relative storage dirs resolve against the working directory', () => {
    expect(loadConfig(['--storage-dir', 'data/x'], {}).storageDir).toBe(resolve('data/x'))
  })

  it('booleans: bare flag, --no- form, and words', () => {
    expect(loadConfig(['--allow-delete'], {}).allowDelete).toBe(true)
    expect(loadConfig(['--allow-delete', 'start'], {}).allowDelete).toBe(true)
    expect(loadConfig(['--allow-delete', 'no'], {}).allowDelete).toBe(false)
    expect(loadConfig(['--no-allow-delete'], { SLUICE_ALLOW_DELETE: 'on' }).allowDelete).toBe(false)
    for (const t of ['true', '1', 'yes', 'on', 'TRUE']) expect(loadConfig([], { SLUICE_ALLOW_DELETE: t }).allowDelete).toBe(true)
    for (const f of ['false', '0', 'no', 'off']) expect(loadConfig([], { SLUICE_ALLOW_DELETE: f }).allowDelete).toBe(false)
    // The benchmarking switch: on unless turned off.
    expect(loadConfig([], {}).sendfile).toBe(true)
    expect(loadConfig(['--no-sendfile'], {}).sendfile).toBe(false)
  })

  it('sizes and durations are parsed strictly', () => {
    expect(parseBytes('64MiB')).toBe(64 * 1024 * 1024)
    expect(parseBytes('1.5KiB')).toBe(1536)
    expect(parseBytes('2MB')).toBe(2_000_000)
    expect(parseBytes('2 MiB')).toBe(2 * 1024 * 1024)
    expect(parseBytes('1048576')).toBe(1048576)
    for (const bad of ['', '64mib', '64M', 'MiB', '-1KiB', '1e3', '0x10', '1.5', '1.5B', ' 1KiB', '1KiB ', '1,024', '1KiBs', '0.3B'])
      expect(parseBytes(bad), bad).toBeUndefined()
    expect(parseDuration('20s')).toBe(20_000)
    expect(parseDuration('1.5s')).toBe(1500)
    expect(parseDuration('5m')).toBe(300_000)
    expect(parseDuration('1h')).toBe(3_600_000)
    expect(parseDuration('250ms')).toBe(250)
    expect(parseDuration('0')).toBe(0)
    for (const bad of ['', '20', '20S', 's', '-1s', '1.0005s', '1d', '20 s', '1e3ms', 'PT20S', '20sec'])
      expect(parseDuration(bad), bad).toBeUndefined()
    // Decimals whose product binary floating point leaves a hair off a whole number of milliseconds.
    expect(parseDuration('1.1h')).toBe(3_960_000)
    expect(parseDuration('2.3h')).toBe(8_280_000)
    expect(parseDuration('4.35m')).toBe(261_000)
    expect(parseDuration('1.005s')).toBe(1005)
    expect(parseBytes('1.1MB')).toBe(1_100_000)
    expect(parseBytes('4.1TB')).toBe(4_100_000_000_000)
    expect(parseBytes('8.2TB')).toBe(8_200_000_000_000)
  })

  it('-v and --version win over start, as --help does', () => {
    for (const argv of [['start', '-v'], ['start', '--version'], ['--version', 'start']]) expect(parseCli(argv, {}).command, argv.join(' ')).toBe('version')
    expect(parseCli(['start', '--help', '-v'], {}).command).toBe('help')
    expect(parseCli(['start'], {}).command).toBe('start')
  })

  it('the banner hides a password given in the query string too', () => {
    expect(redactUrl('postgres://app:s3cret@db/x')).toBe('postgres://app:***@db/x')
    const hidden = redactUrl('postgres://app@db/x?password=hunter2&sslpassword=k3y&sslmode=require')
    expect(hidden).not.toMatch(/hunter2|k3y/)
    expect(hidden).toContain('sslmode=require')
  })

  const INVALID: Array<[string[], Record<string, string>, string]> = [
    [['--database-url', 'mysql://x'], {}, '--database-url: expected a postgres:// or postgresql:// URL, got (hidden)'],
    [[], { DATABASE_URL: 'not a url' }, 'DATABASE_URL (environment): expected a postgres:// or postgresql:// URL, got (hidden)'],
    [['--port', 'abc'], {}, '--port: expected an integer from 0 to 65535, got "abc"'],
    [[], { SLUICE_PORT: '70000' }, 'SLUICE_PORT (environment): expected an integer from 0 to 65535, got "70000"'],
    [['--port', '-1'], {}, '--port: expected an integer from 0 to 65535, got "-1"'],
    [['--port', '3000.5'], {}, '--port: expected an integer from 0 to 65535, got "3000.5"'],
    [['--host='], {}, '--host: expected a non-empty value, got ""'],
    [['--storage-dir='], {}, '--storage-dir: expected a non-empty value, got ""'],
    [['--secret='], {}, '--secret: expected a non-empty value, got (hidden)'],
    [['--chunk-bytes', '64mb'], {}, '--chunk-bytes: expected a size from 1KiB to 1GiB, such as 64MiB, 512KiB or 1048576, got "64mb"'],
    [['--chunk-bytes', '2GiB'], {}, '--chunk-bytes: expected a size from 1KiB to 1GiB, such as 64MiB, 512KiB or 1048576, got "2GiB"'],
    [['--range-cache', 'lots'], {}, '--range-cache: expected a size from 0B to 1TiB, such as 64MiB, 512KiB or 1048576, got "lots"'],
    [['--long-poll-timeout', '20'], {}, '--long-poll-timeout: expected a duration from 100ms to 1h, such as 500ms, 20s or 5m, got "20"'],
    [['--cache-max-age', '1500ms'], {}, '--cache-max-age: expected a duration from 0s to 31536000s in whole seconds, such as 500ms, 20s or 5m, got "1500ms"'],
    [[], { SLUICE_CACHE_STALE_AGE: 'soon' }, 'SLUICE_CACHE_STALE_AGE (environment): expected a duration from 0s to 31536000s in whole seconds, such as 500ms, 20s or 5m, got "soon"'],
    [['--sse-timeout', '1s'], {}, '--sse-timeout: expected a duration from 2s to 1h, such as 500ms, 20s or 5m, got "1s"'],
    [['--flush-interval', '0'], {}, '--flush-interval: expected a duration from 1ms to 1m, such as 500ms, 20s or 5m, got "0"'],
    [['--memory-budget', '1MiB'], {}, '--memory-budget: expected a size from 16MiB to 1TiB, such as 64MiB, 512KiB or 1048576, got "1MiB"'],
    [[], { SLUICE_TAIL_BUDGET: '1MiB' }, 'SLUICE_TAIL_BUDGET (environment): expected a size from 4MiB to 1TiB, such as 64MiB, 512KiB or 1048576, got "1MiB"'],
    [['--snapshot-connections', '0'], {}, '--snapshot-connections: expected an integer from 1 to 1000, got "0"'],
    [['--max-shapes', 'many'], {}, '--max-shapes: expected an integer from 1 to 100000000, got "many"'],
    [['--max-subquery-view-entries', '-1'], {}, '--max-subquery-view-entries: expected an integer from 0 to 1000000000, got "-1"'],
    [['--shape-ttl', '10'], {}, '--shape-ttl: expected a duration from 0ms to 8760h, such as 500ms, 20s or 5m, got "10"'],
    [['--max-creating-shapes', '-1'], {}, '--max-creating-shapes: expected an integer from 0 to 1000000, got "-1"'],
    [[], { SLUICE_CLIENT_SHAPES_PER_MINUTE: 'lots' }, 'SLUICE_CLIENT_SHAPES_PER_MINUTE (environment): expected an integer from 0 to 100000000, got "lots"'],
    [['--client-id-header='], {}, '--client-id-header: expected a non-empty value, got ""'],
    [['--compact-ratio', '-1'], {}, '--compact-ratio: expected an integer from 0 to 1000000, got "-1"'],
    [[], { SLUICE_COMPACT_MIN_ENTRIES: '0' }, 'SLUICE_COMPACT_MIN_ENTRIES (environment): expected an integer from 1 to 1000000000, got "0"'],
    [['--table-cache', '2h'], {}, '--table-cache: expected a duration from 0ms to 1h, such as 500ms, 20s or 5m, got "2h"'],
    [['--catalog-check', '2h'], {}, '--catalog-check: expected a duration from 0ms to 1h, such as 500ms, 20s or 5m, got "2h"'],
    [['--publication', 'x'.repeat(64)], {}, `--publication: expected a name of 1-63 bytes without NUL, got "${'x'.repeat(64)}"`],
    [['--slot', 'Bad-Slot'], {}, '--slot: expected 1-63 lower-case letters, digits or underscores, got "Bad-Slot"'],
    [['--allow-delete=maybe'], {}, '--allow-delete: expected true or false, got "maybe"'],
    [['--standby=later'], {}, '--standby: expected true or false, got "later"'],
    [['--writer-lock-wait', '-1s'], {}, '--writer-lock-wait: expected a duration from 0ms to 1h, such as 500ms, 20s or 5m, got "-1s"'],
    [['--standby-refresh', '50ms'], {}, '--standby-refresh: expected a duration from 100ms to 1h, such as 500ms, 20s or 5m, got "50ms"'],
    [['--heads-interval', '2h'], {}, '--heads-interval: expected a duration from 0ms to 1h, such as 500ms, 20s or 5m, got "2h"'],
    [['--read-only=maybe'], {}, '--read-only: expected true or false, got "maybe"'],
    [['--replica-poll', '2h'], {}, '--replica-poll: expected a duration from 0ms to 1h, such as 500ms, 20s or 5m, got "2h"'],
    [[], { SLUICE_SENDFILE: 'sometimes' }, 'SLUICE_SENDFILE (environment): expected true or false, got "sometimes"'],
    [[], { SLUICE_PARK_LONG_POLLS: 'maybe' }, 'SLUICE_PARK_LONG_POLLS (environment): expected true or false, got "maybe"'],
    [[], { SLUICE_ROUTE_AHEAD: 'later' }, 'SLUICE_ROUTE_AHEAD (environment): expected true or false, got "later"'],
    [['--max-concurrent-initial', '0'], {}, '--max-concurrent-initial: expected an integer from 1 to 1000000, got "0"'],
    [['--max-concurrent-existing', 'x'], {}, '--max-concurrent-existing: expected an integer from 1 to 10000000, got "x"'],
    [['--initial-queue-length', '-1'], {}, '--initial-queue-length: expected an integer from 0 to 1000000, got "-1"'],
    [[], { SLUICE_INITIAL_QUEUE_WAIT: '0' }, 'SLUICE_INITIAL_QUEUE_WAIT (environment): expected a duration from 1ms to 10m, such as 500ms, 20s or 5m, got "0"'],
    [['--log-level', 'loud'], {}, '--log-level: expected one of fatal, error, warn, info, debug, trace, silent, got "loud"'],
    [[], { SLUICE_HEALTH_REPLICATION_TIMEOUT: '2h' }, 'SLUICE_HEALTH_REPLICATION_TIMEOUT (environment): expected a duration from 0ms to 1h, such as 500ms, 20s or 5m, got "2h"'],
    [['--postgres-bin='], {}, '--postgres-bin: expected a non-empty value, got ""'],
    [['--bogus'], {}, 'unknown option --bogus (see sluice --help)'],
    [['-x'], {}, 'unknown option -x (see sluice --help)'],
    [['stop'], {}, 'unexpected argument "stop" (the only command is "start"; see sluice --help)'],
    [['--port'], {}, '--port: missing value'],
    [['--port', '1', '--port', '2'], {}, '--port: given more than once'],
  ]
  for (const [argv, env, line] of INVALID) {
    it(`refuses ${JSON.stringify(argv)} ${JSON.stringify(env)}`, () => {
      const parsed = parseCli(argv, env)
      expect(parsed.config).toBeUndefined()
      expect(parsed.problems).toEqual([line])
    })
  }

  it('every setting in the table above has an invalid case', () => {
    const covered = new Set(INVALID.flatMap(([argv, env]) => [...argv.map((a) => a.replace(/^--([a-z-]+).*$/, '$1')), ...Object.keys(env)]))
    for (const s of SETTINGS) expect(covered.has(s.flag) || covered.has(s.env), s.flag).toBe(true)
  })

  it('reports every problem, one line each', () => {
    const parsed = parseCli(['--port', 'x', '--slot', 'A', '--nope'], { SLUICE_LOG_LEVEL: 'chatty' })
    expect(parsed.problems).toHaveLength(4)
  })

  it('--help lists every flag, env var and default, whatever else is wrong', () => {
    const parsed = parseCli(['--port', 'x', '--help'], {})
    expect(parsed.command).toBe('help')
    const help = helpText()
    for (const s of SETTINGS) {
      expect(help).toContain(`--${s.flag}`)
      expect(help).toContain(`env: ${s.env}`)
      if (s.default !== undefined) expect(help).toContain(`[default: ${s.default}]`)
    }
  })

  it("the package README's settings table is the one settingsMarkdown() makes, placeholders kept visible", () => {
    const readme = readFileSync(new URL('../../README.md', import.meta.url), 'utf8')
    const table = settingsMarkdown()
    expect(readme).toContain(`This table is generated by \`settingsMarkdown()\`:\n\n${table}\n\n`)
    // Outside code, <storage-dir> would be an HTML tag to a markdown renderer, and vanish.
    expect(table.replace(/`[^`]*`/g, '')).not.toMatch(/<[a-z]/)
  })
})
