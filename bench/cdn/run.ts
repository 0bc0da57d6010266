/**
 * bench:cdn: one shape followed by thousands of long-poll clients through a
 * real HTTP cache in front of Sluice (Electric Cloud's model): nginx with the
 * configuration the docs recommend (packages/server/deploy/nginx.conf) and
 * Varnish with packages/server/deploy/varnish.vcl, next to the clients talking
 * to the origin directly. Sluice, the cache, and the clients (raw HTTP/1.1 sockets,
 * up to 5,000 per process, each process from its own 127.0.0.x) are separate
 * processes.
 *
 * Measures, for each cache and client count:
 * - initial sync of every client (wall time; per-client time) and how often
 *   the origin answered each non-live URL (target: each chunk once);
 * - after each of >= 10 single-row commits, the time until the last client
 *   holds the change (target: p99 <= 1 s), and the median client's;
 * - live requests reaching the origin per live URL, i.e. per window
 *   (target: about one), counted by the origin itself.
 * Does not measure: several machines or a network between them, TLS, SSE
 * through the cache, many shapes, a commercial CDN.
 *
 * Usage: `npm run bench:cdn` (from the root). QUICK=1: a smoke run
 * (results/cdn.quick.*). BENCH_CDN_CLIENTS (comma-separated counts) and
 * BENCH_CDN_CACHES (none,nginx,varnish) and BENCH_CDN_WRITES for smaller runs
 * (results/cdn.partial.*);
 * BENCH_RESULTS_DIR for where the report goes.
 */
import { spawnSync } from 'node:child_process'
import { mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { loadavg, tmpdir } from 'node:os'
import { dirname, join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { fileURLToPath } from 'node:url'
import { findNginx, type NginxConfigContext, type NginxServer, startNginx, startPostgres } from '@sluice/test-utils'
import pg from 'pg'
import { CommandChild } from '../http/json-lines.js'
import { BENCH_PG_SETTINGS } from '../pipeline/pg.js'
import { processCpuMs } from '../pipeline/proc.js'
import type { LoadNote } from '../pipeline/report.js'
import { quantile } from '../pipeline/stats.js'
import { SystemMeter, waitForQuiet } from '../storage/measure.js'
import { machineInfo } from '../storage/report.js'
import { type CacheKind, type Distribution, type OriginKind, type Report, type Run, type WriteFigures, runLabel, targetChecks, writeReport } from './report.js'
import { compileEpollClients } from './epoll-clients.js'
import { treeCpuMs } from './tree-cpu.js'
import { ensureVarnish, startVarnish, type VarnishServer } from './varnish.js'
import { loadNote, log, runSeconds } from '../pipeline/run-log.js'

const QUICK = process.env.QUICK === '1'
const CLIENTS = process.env.BENCH_CDN_CLIENTS?.split(',').map(Number)
const CACHES = (process.env.BENCH_CDN_CACHES?.split(',').map((s) => s.trim()) ?? ['none', 'nginx', 'varnish']) as CacheKind[]
/** `ceiling`: the same cache and clients in front of a bare in-memory origin (ceiling-origin.ts), for every cache. */
const ORIGINS = (process.env.BENCH_CDN_ORIGINS?.split(',').map((s) => s.trim()) ?? ['sluice', 'ceiling']) as OriginKind[]
const PARTIAL =
  process.env.BENCH_CDN_ORIGINS !== undefined ||
  CLIENTS !== undefined ||
  process.env.BENCH_CDN_CACHES !== undefined ||
  process.env.BENCH_CDN_WRITES !== undefined ||
  process.env.BENCH_CDN_VARNISH_PARAMS !== undefined

/** `name=value,name=value` onto the recommended varnishd parameters, to try others. */
function varnishParamOverrides(text: string | undefined): Record<string, string> {
  if (text === undefined || text.trim() === '') return {}
  return Object.fromEntries(
    text.split(',').map((pair) => {
      const [name, value] = pair.split('=').map((s) => s.trim())
      if (!name || value === undefined) throw new Error(`BENCH_CDN_VARNISH_PARAMS: "${pair}" is not name=value`)
      return [name, value]
    }),
  )
}

const SETTINGS = {
  clients: CLIENTS ?? (QUICK ? [100, 500] : [1_000, 5_000, 10_000, 20_000]),
  /** The origin's own fd limit and one core: the direct baseline runs only up to here. */
  directMaxClients: 5_000,
  writes: Number(process.env.BENCH_CDN_WRITES ?? (QUICK ? 10 : 12)),
  /** Pause after every client has a write before the next one: their next long-polls are parked by then. */
  writeGapMs: 1_000,
  /** Longest wait for every client to have a write. */
  drainMs: 15_000,
  /** After the writes, no writes for longer than a long-poll: one window times out and the next one starts. */
  idleSeconds: QUICK ? 0 : 25,
  perProcess: 5_000,
  /** Clients of one process in their initial sync at once. */
  syncConcurrency: 500,
  rows: 300,
  chunkBytes: 8 * 1024,
  longPollTimeoutMs: 20_000,
  nginxWorkers: 4,
  nginxWorkerConnections: 8_192,
  /** One varnishd holds at most the open-file limit minus a few dozen clients; above this, two edges share them. */
  varnishClientsPerEdge: 15_000,
  /** timeout_idle 75 s as nginx's keepalive_timeout: Varnish's 5 s closes keep-alive sockets a client is about to reuse. */
  /**
   * As docs/cdn.md recommends. Few threads and a deep queue: waiting requests hold no thread, and a
   * write woke thousands of them (thread_pool_max 5000) at several times the CPU per client.
   */
  varnishParams: {
    ...{
      listen_depth: '4096',
      timeout_idle: '75',
      workspace_client: '32k',
      thread_pool_min: '50',
      thread_pool_max: '100',
      thread_queue_limit: '100000',
    },
    ...varnishParamOverrides(process.env.BENCH_CDN_VARNISH_PARAMS),
  },
  quietWaitSeconds: QUICK ? 0 : 10,
  /** `c`: the clients are epoll-clients.c (raw sockets, one epoll loop per process); `node`: clients.ts's own (raw sockets too). */
  clientEngine: process.env.BENCH_CDN_CLIENT === 'node' ? 'node' : 'c',
  /** varnishd's working directory (its shared-memory log, written for every request): on tmpfs, as the docs recommend. */
  varnishWorkBase: process.env.BENCH_CDN_VARNISH_WORKDIR ?? '/dev/shm',
}

const TABLE = 'cdn_items'
/** Admission limits raised: the direct baseline must be served, not refused. */
const ORIGIN_FLAGS = [
  '--log-level',
  'warn',
  '--chunk-bytes',
  String(SETTINGS.chunkBytes),
  '--long-poll-timeout',
  `${SETTINGS.longPollTimeoutMs}ms`,
  '--max-concurrent-initial',
  '1000000',
  '--max-concurrent-existing',
  '1000000',
]
const DEPLOY = fileURLToPath(new URL('../../packages/server/deploy/', import.meta.url))

const here = dirname(fileURLToPath(import.meta.url))
const resultsDir = join(here, '..', 'results')
let nextRun = 1
/** The compiled C clients, or undefined for the Node ones (BENCH_CDN_CLIENT=node, or no C compiler). */
let nativeClients: string | undefined

/** The deploy file with its machine-specific values replaced, each of which must occur exactly once. */
function substitute(file: string, pairs: ReadonlyArray<readonly [string, string]>): string {
  let text = readFileSync(join(DEPLOY, file), 'utf8')
  for (const [from, to] of pairs) {
    const count = text.split(from).length - 1
    if (count !== 1) throw new Error(`${file}: expected "${from}" exactly once, found it ${count} times`)
    text = text.replace(from, to)
  }
  return text
}

function nginxConfig(originPort: number) {
  return (context: NginxConfigContext): string =>
    substitute('nginx.conf', [
      // reuseport: one listening socket per worker, so the kernel spreads the clients evenly and no worker runs out of descriptors.
      ['listen 80;', `listen 127.0.0.1:${context.port} reuseport backlog=4096;`],
      ['server 127.0.0.1:3000;', `server 127.0.0.1:${originPort};`],
      ['proxy_cache_path /var/cache/nginx/sluice ', `proxy_cache_path ${context.cacheDir} `],
    ])
}

function varnishVcl(backendPort: number): string {
  return substitute('varnish.vcl', [['.port = "3000";', `.port = "${backendPort}";`]])
}

interface Cache {
  /** Where the clients go, one entry per edge. */
  readonly urls: readonly string[]
  /** The cache's processes (their descendants count too). */
  readonly pids: readonly number[]
  stats(): Record<string, number> | undefined
  stop(): Promise<void>
}

async function startCache(kind: CacheKind, clients: number, originUrl: string): Promise<Cache> {
  const originPort = Number(new URL(originUrl).port)
  if (kind === 'none') return { urls: [originUrl], pids: [], stats: () => undefined, stop: async () => {} }
  if (kind === 'nginx') {
    const nginx: NginxServer = await startNginx({
      upstreamPort: originPort,
      config: nginxConfig(originPort),
      workerProcesses: SETTINGS.nginxWorkers,
      workerConnections: SETTINGS.nginxWorkerConnections,
    })
    return {
      urls: [nginx.url],
      pids: [Number(readFileSync(join(nginx.dir, 'nginx.pid'), 'utf8').trim())],
      stats: () => undefined,
      stop: async () => {
        const errors = (await nginx.errorLog()).split('\n').filter((l) => /\[(error|crit|alert|emerg)\]/.test(l))
        if (errors.length > 0) log(`  nginx error log: ${errors.length} lines, e.g. ${errors.slice(0, 3).join(' | ')}`)
        await nginx.stop()
      },
    }
  }
  const options = { storage: 'malloc,256m', params: SETTINGS.varnishParams, workBase: SETTINGS.varnishWorkBase }
  const edges = Math.ceil(clients / SETTINGS.varnishClientsPerEdge)
  if (edges === 1) {
    const v = await startVarnish({ ...options, vcl: varnishVcl(originPort) })
    return { urls: [v.url], pids: [v.pid], stats: () => v.stats(), stop: () => v.stop() }
  }
  // Two tiers, as a CDN with a shield: each edge collapses its own clients, the shield collapses the edges.
  const shield = await startVarnish({ ...options, vcl: varnishVcl(originPort) })
  const started: VarnishServer[] = []
  for (let i = 0; i < edges; i++) started.push(await startVarnish({ ...options, vcl: varnishVcl(shield.port) }))
  return {
    urls: started.map((v) => v.url),
    pids: [shield.pid, ...started.map((v) => v.pid)],
    stats: () => shield.stats(),
    stop: async () => {
      for (const v of started) await v.stop()
      await shield.stop()
    },
  }
}

function distribution(values: readonly number[]): Distribution {
  return { p50: quantile(values, 0.5), p99: quantile(values, 0.99), max: values.length === 0 ? Number.NaN : Math.max(...values) }
}

function isLive(url: string): boolean {
  return /[?&]live=true(&|$)/.test(url)
}

function summariseCounts(counts: Record<string, number>, live: boolean): { urls: number; requests: number; maxPerUrl: number } {
  let urls = 0
  let requests = 0
  let maxPerUrl = 0
  for (const [url, n] of Object.entries(counts)) {
    if (!url.startsWith('/v1/shape') || isLive(url) !== live) continue
    urls++
    requests += n
    maxPerUrl = Math.max(maxPerUrl, n)
  }
  return { urls, requests, maxPerUrl }
}

/** Origin responses by status for live or non-live shape URLs, and the most 200s any one URL got. */
function served(responses: Record<string, number>, live: boolean): { byStatus: Record<string, number>; max200PerUrl: number } {
  const byStatus: Record<string, number> = {}
  let max200PerUrl = 0
  for (const [key, n] of Object.entries(responses)) {
    const space = key.indexOf(' ')
    const status = key.slice(0, space)
    const url = key.slice(space + 1)
    if (!url.startsWith('/v1/shape') || isLive(url) !== live) continue
    byStatus[status] = (byStatus[status] ?? 0) + n
    if (status === '200') max200PerUrl = Math.max(max200PerUrl, n)
  }
  return { byStatus, max200PerUrl }
}

interface Origin {
  readonly kind: OriginKind
  readonly child: CommandChild
  readonly url: string
}

async function oneRun(kind: CacheKind, clients: number, { kind: originKind, child: origin, url: originUrl }: Origin, db: pg.Client): Promise<Run> {
  const label = runLabel({ cache: kind, origin: originKind, edges: 1 })
  await waitForQuiet(SETTINGS.quietWaitSeconds * 1000)
  const cache = await startCache(kind, clients, originUrl)
  const groups: CommandChild[] = []
  try {
    await origin.call('reset')
    const processes = Math.ceil(clients / SETTINGS.perProcess)
    for (let i = 0; i < processes; i++) groups.push(await CommandChild.spawn(`clients-${i}`, fileURLToPath(new URL('./clients.ts', import.meta.url))))
    const t0 = performance.now()
    const synced = await Promise.all(
      groups.map((g, i) =>
        g.call<{ clients: number; wallMs: number; syncMs: number[]; syncBytes: number; errors: number; statuses: Record<string, number> }>('start', {
          baseUrl: cache.urls[i % cache.urls.length],
          table: TABLE,
          clients: Math.floor(clients / processes) + (i < clients % processes ? 1 : 0),
          localAddress: `127.0.0.${10 + i}`,
          syncConcurrency: SETTINGS.syncConcurrency,
          ...(nativeClients === undefined ? {} : { native: nativeClients }),
        }),
      ),
    )
    const syncWall = performance.now() - t0
    const syncCounts = summariseCounts(await origin.call<Record<string, number>>('counts'), false)
    const syncServed = served(await origin.call<Record<string, number>>('responses'), false)
    const statuses: Record<string, number> = {}
    for (const s of synced) for (const [k, v] of Object.entries(s.statuses)) statuses[k] = (statuses[k] ?? 0) + v
    const sync = {
      wallMs: syncWall,
      perClientMs: distribution(synced.flatMap((s) => s.syncMs)),
      bytesPerClient: synced.reduce((a, s) => a + s.syncBytes, 0) / clients,
      originUrls: syncCounts.urls,
      originRequests: syncCounts.requests,
      originMaxPerUrl: syncCounts.maxPerUrl,
      originServed: syncServed,
      errors: synced.reduce((a, s) => a + s.errors, 0),
      statuses,
    }
    log(
      `  ${label}, ${clients} clients: initial sync ${(syncWall / 1000).toFixed(1)} s (per client p50 ${sync.perClientMs.p50.toFixed(0)} ms, p99 ${sync.perClientMs.p99.toFixed(0)} ms), origin ${sync.originRequests} requests for ${sync.originUrls} URLs (max ${sync.originMaxPerUrl} per URL; responses ${JSON.stringify(syncServed.byStatus)}, max ${syncServed.max200PerUrl} 200s per URL), ${sync.errors} errors`,
    )

    // Every client's first long-poll reaches the cache (and one of them the origin) before the first write.
    await sleep(1_000)
    await origin.call('reset')
    const run = nextRun++
    await Promise.all(groups.map((g) => g.call('measure', { run })))
    const meter = new SystemMeter()
    const cpu0 = processCpuMs(origin.pid)
    const cacheCpu0 = cache.pids.reduce((a, pid) => a + treeCpuMs(pid), 0)
    const clientCpu0 = groups.reduce((a, g) => a + treeCpuMs(g.pid), 0)
    const live0 = performance.now()
    const stamps: bigint[] = []
    for (let w = 0; w < SETTINGS.writes; w++) {
      await sleep(SETTINGS.writeGapMs)
      const stamp = process.hrtime.bigint()
      stamps.push(stamp)
      if (originKind === 'ceiling') await origin.call('write', { stamp: `${run}:${stamp}` })
      else await db.query({ name: 'stamp', text: `UPDATE ${TABLE} SET stamp = $1 WHERE id = 1`, values: [`${run}:${stamp}`] })
      const deadline = performance.now() + SETTINGS.drainMs
      for (;;) {
        const got = (await Promise.all(groups.map((g) => g.call<number>('count', { stamp: String(stamp) })))).reduce((a, b) => a + b, 0)
        if (got >= clients || performance.now() > deadline) break
        await sleep(50)
      }
    }
    const writesWall = performance.now() - live0
    const cacheCpuPerWrite = (cache.pids.reduce((a, pid) => a + treeCpuMs(pid), 0) - cacheCpu0) / SETTINGS.writes
    const clientCpuPerWrite = (groups.reduce((a, g) => a + treeCpuMs(g.pid), 0) - clientCpu0) / SETTINGS.writes
    if (SETTINGS.idleSeconds > 0) await sleep(SETTINGS.idleSeconds * 1000)
    const liveWall = performance.now() - live0
    const cpu1 = processCpuMs(origin.pid)
    const counts = await origin.call<Record<string, number>>('counts')
    const responses = await origin.call<Record<string, number>>('responses')
    const liveCounts = summariseCounts(counts, true)
    const other = summariseCounts(counts, false)
    const receipts = await Promise.all(groups.map((g) => g.call<Record<string, number[]>>('receipts')))
    const writes: WriteFigures[] = stamps.map((stamp) => {
      const all = receipts.flatMap((r) => r[String(stamp)] ?? [])
      return {
        received: all.length,
        lastMs: all.length === 0 ? Number.NaN : Math.max(...all),
        p50ClientMs: quantile(all, 0.5),
        firstMs: all.length === 0 ? Number.NaN : Math.min(...all),
      }
    })
    const live = {
      writes,
      lastClient: distribution(writes.map((w) => w.lastMs)),
      medianClient: distribution(writes.map((w) => w.p50ClientMs)),
      firstClient: distribution(writes.map((w) => w.firstMs ?? Number.NaN)),
      incomplete: writes.filter((w) => w.received < clients).length,
      originLiveRequests: liveCounts.requests,
      originLiveUrls: liveCounts.urls,
      originPerWindow: liveCounts.urls === 0 ? Number.NaN : liveCounts.requests / liveCounts.urls,
      originMaxPerUrl: liveCounts.maxPerUrl,
      originOtherRequests: other.requests,
      originCpuPercent: cpu0 === undefined || cpu1 === undefined ? null : ((cpu1 - cpu0) / liveWall) * 100,
      cpuPressurePercent: meter.cpuPressurePercent() ?? null,
      loadavg1: loadavg()[0]!,
      idleSeconds: SETTINGS.idleSeconds,
      writesWallMs: writesWall,
      cacheCpuMsPerWrite: cacheCpuPerWrite,
      clientCpuMsPerWrite: clientCpuPerWrite,
      originServed: served(responses, true),
    }
    log(
      `  ${label}, ${clients} clients: last client p50 ${live.lastClient.p50.toFixed(0)} ms, p99 ${live.lastClient.p99.toFixed(0)} ms, max ${live.lastClient.max.toFixed(0)} ms; median client p50 ${live.medianClient.p50.toFixed(0)} ms; first client p50 ${live.firstClient.p50.toFixed(0)} ms; ${live.incomplete} incomplete writes; origin ${live.originLiveRequests} live requests for ${live.originLiveUrls} URLs (${live.originPerWindow.toFixed(2)} per window, max ${live.originMaxPerUrl}), ${live.originOtherRequests} other; origin CPU ${live.originCpuPercent?.toFixed(0) ?? '-'}%; CPU per write: cache ${cacheCpuPerWrite.toFixed(0)} ms, clients ${clientCpuPerWrite.toFixed(0)} ms (load ${live.loadavg1.toFixed(1)})`,
    )
    const finals = await Promise.all(groups.map((g) => g.call<{ errorKinds: Record<string, number> }>('stop')))
    const clientErrors: Record<string, number> = {}
    for (const f of finals) for (const [k, v] of Object.entries(f.errorKinds)) clientErrors[k] = (clientErrors[k] ?? 0) + v
    const stats = cache.stats()
    const cacheStats =
      stats === undefined
        ? undefined
        : Object.fromEntries(Object.entries(stats).filter(([k]) => /^MAIN\.(backend_req|cache_hit|cache_miss|busy_sleep|busy_wakeup|busy_killed|sess_conn|sess_drop|sess_fail|threads|threads_failed|client_req)$/.test(k)))
    const result: Run = { cache: kind, origin: originKind, clients, clientProcesses: processes, edges: cache.urls.length, sync, live, clientErrors, ...(cacheStats === undefined ? {} : { cacheStats }) }
    if (kind !== 'none' && originKind === 'sluice') for (const t of targetChecks(result)) log(`    target: ${t.what}: ${t.met ? 'met' : 'MISSED'} (${t.figure})`)
    return result
  } finally {
    for (const g of groups) await g.close()
    await cache.stop()
  }
}

async function main(): Promise<void> {
  const varnishVersion = CACHES.includes('varnish') ? ensureVarnish() : '-'
  const nginxVersion = CACHES.includes('nginx') ? (await findNginx()).version : '-'
  const fdLimit = spawnSync('sh', ['-c', 'ulimit -n'], { encoding: 'utf8' }).stdout.trim()
  if (SETTINGS.clientEngine === 'c') nativeClients = compileEpollClients()
  const clientEngine = nativeClients === undefined ? 'node' : 'c'
  const root = mkdtempSync(join(process.env.BENCH_DIR ?? tmpdir(), 'sluice-cdn-bench-'))
  // Taken now: its date is when the run started.
  const machine = machineInfo(root)
  const loads: LoadNote[] = [loadNote('start')]
  log(`CDN benchmark${QUICK ? ' (QUICK)' : ''}; nginx ${nginxVersion}, varnish ${varnishVersion}; ulimit -n ${fdLimit}; ${clientEngine === 'c' ? 'C' : 'Node'} clients; load ${loads[0]!.loadavg.join(', ')}`)
  const cluster = await startPostgres({ settings: BENCH_PG_SETTINGS })
  const db = new pg.Client({ connectionString: cluster.url })
  let origin: CommandChild | undefined
  let ceiling: CommandChild | undefined
  const runs: Run[] = []
  try {
    await cluster.query(`CREATE TABLE ${TABLE} (id int PRIMARY KEY, stamp text NOT NULL, pad text NOT NULL)`)
    await cluster.query(`INSERT INTO ${TABLE} SELECT i, '0:0', repeat(md5(i::text), 1) FROM generate_series(1, ${SETTINGS.rows}) AS i`)
    await db.connect()
    origin = await CommandChild.spawn('origin', fileURLToPath(new URL('./origin.ts', import.meta.url)))
    const { url: originUrl } = await origin.call<{ url: string }>('start', { databaseUrl: cluster.url, storageDir: join(root, 'sluice'), flags: ORIGIN_FLAGS })
    // The shape exists (its snapshot made) before any cache sees it: the runs measure serving, not creation.
    const first = await fetch(`${originUrl}/v1/shape?table=${TABLE}&offset=-1`)
    if (first.status !== 200) throw new Error(`the first request answered ${first.status}: ${await first.text()}`)
    await first.arrayBuffer()
    log(`Postgres ${cluster.version}; origin (Sluice) at ${originUrl}, pid ${origin.pid}`)
    const origins: Origin[] = []
    if (ORIGINS.includes('sluice')) origins.push({ kind: 'sluice', child: origin, url: originUrl })
    if (ORIGINS.includes('ceiling')) {
      ceiling = await CommandChild.spawn('ceiling', fileURLToPath(new URL('./ceiling-origin.ts', import.meta.url)))
      const { url } = await ceiling.call<{ url: string }>('start', { sluiceUrl: originUrl, longPollTimeoutMs: SETTINGS.longPollTimeoutMs })
      origins.push({ kind: 'ceiling', child: ceiling, url })
    }
    for (const clients of SETTINGS.clients) {
      for (const kind of CACHES) {
        if (kind === 'none' && clients > SETTINGS.directMaxClients) continue
        for (const o of origins) {
          // Straight at the origin there is no cache to measure a ceiling of.
          if (kind === 'none' && o.kind === 'ceiling') continue
          runs.push(await oneRun(kind, clients, o, db))
          loads.push(loadNote(`after ${kind}${o.kind === 'ceiling' ? ' (ceiling)' : ''} ${clients}`))
        }
      }
    }
  } finally {
    await db.end().catch(() => {})
    await ceiling?.call('stop').catch(() => {})
    await ceiling?.close()
    await origin?.call('stop').catch(() => {})
    await origin?.close()
    await cluster.stop()
  }
  loads.push(loadNote('end'))
  const report: Report = {
    quick: QUICK,
    partial: PARTIAL,
    machine: { ...machine, fdLimit },
    postgres: { version: cluster.version },
    versions: { nginx: nginxVersion, varnish: varnishVersion },
    settings: { ...SETTINGS, clientEngine },
    originFlags: ORIGIN_FLAGS,
    shape: { rows: SETTINGS.rows, chunkBytes: SETTINGS.chunkBytes },
    runSeconds: runSeconds(),
    loads,
    runs,
  }
  const name = QUICK ? 'cdn.quick' : PARTIAL ? 'cdn.partial' : 'cdn'
  const outDir = process.env.BENCH_RESULTS_DIR ?? resultsDir
  mkdirSync(outDir, { recursive: true })
  writeReport(report, join(outDir, name))
  log(`wrote ${join(outDir, name)}.md and .json (${report.runSeconds.toFixed(0)} s)`)
  rmSync(root, { recursive: true, force: true })
}

await main()
process.exit(0)
