/**
 * bench:subquery: subquery shapes against as many `list_id = $1` shapes
 * (issue 33 item 10), with the `sluice start` server, Postgres, the writer and
 * the live clients in their own processes.
 *
 * For each shape count (1,000 and 10,000) and each kind of shape, on a fresh
 * server and fresh tables (`members(user_id, list_id)`, `todos`; each user in
 * 3 lists, each list in 3 users' views, 2 todos per list):
 * - memory: the server's RSS and V8 heap (median over a settle window) before
 *   and after the shapes were made over HTTP, per shape; with the view
 *   entries the server counts (`sluice_subquery_view_entries`). A third run at
 *   the smallest count gives each user 30 lists: its extra memory over its
 *   extra entries is the memory per view entry; and, measured apart with a
 *   full collection before and after (view-memory.ts), the bytes per entry of
 *   the server's own view and router-index classes;
 * - routing throughput: back-to-back transactions updating random todos
 *   (outer-table writes, each reaching 3 subquery shapes or 1 equality shape),
 *   changes/s from the burst's start until the server's durable LSN passed
 *   its last commit, and the server's CPU per change;
 * - move-in latency: live clients of a few users' shapes; a member row
 *   inserted (the user joins a list that has todos) until the client has the
 *   list's todos; p50/p99. Beside it, for equality shapes: a todo inserted
 *   until its list's client has it (no move, the plain live path).
 * Does not measure: NOT IN, OR or nested subqueries, a client library's own
 * cost, an HTTP cache, other machines.
 *
 * Usage: `npm run bench:subquery`. QUICK=1: 100 and 300 shapes, short
 * windows (results/subquery.quick.*). BENCH_SUBQUERY_SIZES (comma-separated),
 * BENCH_SUBQUERY_TRIALS, BENCH_SUBQUERY_BURST (transactions of 50 updates),
 * BENCH_SETTLE_S: partial runs (results/subquery.partial.*).
 */
import { spawnSync } from 'node:child_process'
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { loadavg, tmpdir } from 'node:os'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { fileURLToPath } from 'node:url'
import { type PostgresCluster, startPostgres } from '@sluice/test-utils'
import { CommandChild } from '../http/json-lines.js'
import { startSluice } from '../http/sluice-process.js'
import { BENCH_PG_SETTINGS } from '../pipeline/pg.js'
import { processCpuMs } from '../pipeline/proc.js'
import { log } from '../pipeline/run-log.js'
import { quantile } from '../pipeline/stats.js'
import { SystemMeter } from '../storage/measure.js'
import { machineInfo } from '../storage/report.js'
import { type Burst, type Latency, type Report, type Run, heapPerShape, markdown, perEntry, rssPerShape } from './report.js'
import { type Mode, TODOS_PER_LIST, schemaSql, shapePath, todoIds, todoKey } from './schema.js'
import type { Layout } from './view-memory.js'

const QUICK = process.env.QUICK === '1'
const SIZES = (process.env.BENCH_SUBQUERY_SIZES?.split(',').map(Number) ?? (QUICK ? [100, 300] : [1_000, 10_000])).filter((n) => n > 0)
const TRIALS = Number(process.env.BENCH_SUBQUERY_TRIALS ?? (QUICK ? 8 : 40))
const SETTLE_S = Number(process.env.BENCH_SETTLE_S ?? (QUICK ? 4 : 12))
const BURST = Number(process.env.BENCH_SUBQUERY_BURST ?? (QUICK ? 100 : 400))
const PARTIAL = ['BENCH_SUBQUERY_SIZES', 'BENCH_SUBQUERY_TRIALS', 'BENCH_SETTLE_S', 'BENCH_SUBQUERY_BURST'].some((k) => process.env[k] !== undefined)
const RESULTS_DIR = process.env.BENCH_RESULTS_DIR ?? fileURLToPath(new URL('../results/', import.meta.url))

const SETTINGS = {
  perUser: 3,
  widePerUser: QUICK ? 30 : 100,
  /** Lists with todos and no member, for move-in trials. */
  spare: TRIALS + 10,
  /** Live clients (users or lists 1..followed). */
  followed: 10,
  burstTransactions: BURST,
  burstRows: 50,
  createConcurrency: 16,
  trialGapMs: 150,
  trialTimeoutMs: 30_000,
}

function rssBytes(pid: number): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))
  if (m === null) throw new Error(`no VmRSS for ${pid}`)
  return Number(m[1]) * 1024
}

async function metric(url: string, name: string): Promise<number> {
  const text = await (await fetch(`${url}/metrics`)).text()
  const line = text.split('\n').find((l) => l.startsWith(`${name} `))
  return line === undefined ? Number.NaN : Number(line.split(' ')[1])
}

const median = (xs: readonly number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!

/**
 * Median RSS over the second half of a settle window, and the least V8 heap
 * in use seen in it (the live heap after a collection: nothing can force one
 * in the server from outside).
 */
async function settle(pid: number, url: string): Promise<{ rss: number; heap: number }> {
  const rss: number[] = []
  const heap: number[] = []
  const end = Date.now() + SETTLE_S * 1000
  while (Date.now() < end) {
    rss.push(rssBytes(pid))
    heap.push(await metric(url, 'nodejs_heap_size_used_bytes'))
    await sleep(500)
  }
  const half = Math.floor(rss.length / 2)
  return { rss: median(rss.slice(half)), heap: Math.min(...heap.slice(half)) }
}

async function createShapes(url: string, mode: Mode, count: number): Promise<number> {
  let next = 0
  const started = performance.now()
  const worker = async (): Promise<void> => {
    for (let i = next++; i < count; i = next++) {
      for (;;) {
        const r = await fetch(`${url}${shapePath(mode, i + 1)}&offset=-1`)
        await r.arrayBuffer()
        if (r.status === 200) break
        if (r.status !== 503 && r.status !== 429) throw new Error(`shape ${i + 1}: ${r.status}`)
        await sleep(1000 * Number(r.headers.get('retry-after') ?? 1))
      }
    }
  }
  await Promise.all(Array.from({ length: SETTINGS.createConcurrency }, worker))
  return (performance.now() - started) / 1000
}

function lsnNumber(text: string): number {
  const [hi, lo] = text.split('/')
  return Number.parseInt(hi!, 16) * 2 ** 32 + Number.parseInt(lo!, 16)
}

async function burst(url: string, pid: number, writer: CommandChild, maxId: number): Promise<Burst> {
  const cpu0 = processCpuMs(pid)
  const meter = new SystemMeter()
  const t0 = performance.now()
  const done = await writer.call<{ ms: number; lsn: string; changes: number }>('burst', { transactions: SETTINGS.burstTransactions, rows: SETTINGS.burstRows, maxId })
  const target = lsnNumber(done.lsn)
  while ((await metric(url, 'sluice_durable_lsn')) < target) await sleep(5)
  const routedMs = performance.now() - t0
  const cpu1 = processCpuMs(pid)
  return {
    transactions: SETTINGS.burstTransactions,
    rowsPerTransaction: SETTINGS.burstRows,
    changes: done.changes,
    writeMs: done.ms,
    routedMs,
    changesPerSecond: done.changes / (routedMs / 1000),
    writeChangesPerSecond: done.changes / (done.ms / 1000),
    serverCpuMsPerKChange: cpu0 === undefined || cpu1 === undefined ? null : ((cpu1 - cpu0) / done.changes) * 1000,
    cpuPressurePercent: meter.cpuPressurePercent() ?? null,
  }
}

async function latency(mode: Mode, lists: number, writer: CommandChild, follower: CommandChild): Promise<Latency> {
  const samples: number[] = []
  let missed = 0
  for (let i = 0; i < TRIALS; i++) {
    const shape = i % SETTINGS.followed
    let keys: string[]
    let committedAt: number
    if (mode === 'equality') {
      const id = (lists + SETTINGS.spare) * TODOS_PER_LIST + 1 + i
      keys = [todoKey(id)]
      ;({ committedAt } = await writer.call<{ committedAt: number }>('insertTodo', { id, list: shape + 1 }))
    } else {
      const list = lists + 1 + i
      keys = todoIds(list).map(todoKey)
      ;({ committedAt } = await writer.call<{ committedAt: number }>('moveIn', { user: shape + 1, list }))
    }
    const until = performance.now() + SETTINGS.trialTimeoutMs
    let at: number | null = null
    while (at === null && performance.now() < until) {
      at = await follower.call<number | null>('arrived', { shape, keys })
      if (at === null) await sleep(2)
    }
    if (at === null) missed++
    else samples.push(at - committedAt)
    await sleep(SETTINGS.trialGapMs)
  }
  const sorted = [...samples].sort((a, b) => a - b)
  return {
    kind: mode === 'equality' ? 'insert' : 'move-in',
    trials: TRIALS,
    p50Ms: quantile(sorted, 0.5),
    p99Ms: quantile(sorted, 0.99),
    maxMs: sorted[sorted.length - 1] ?? Number.NaN,
    missed,
  }
}

async function oneRun(cluster: PostgresCluster, work: string, mode: Mode, shapes: number): Promise<Run> {
  const perUser = mode === 'subquery-wide' ? SETTINGS.widePerUser : SETTINGS.perUser
  const lists = shapes
  for (const sql of schemaSql(lists, perUser, SETTINGS.spare)) await cluster.query(sql)
  const storageDir = join(work, `${mode}-${shapes}`)
  mkdirSync(storageDir)
  const server = await startSluice({
    databaseUrl: cluster.url,
    storageDir,
    flags: ['--log-level', 'warn', '--client-shapes-per-minute', '0', '--max-creating-shapes', '0', '--max-concurrent-initial', '10000'],
  })
  const writer = await CommandChild.spawn('writer', fileURLToPath(new URL('./writer.ts', import.meta.url)))
  const follower = await CommandChild.spawn('follower', fileURLToPath(new URL('./follower.ts', import.meta.url)))
  try {
    await writer.call('connect', { connectionString: cluster.url })
    const base = await settle(server.pid, server.url)
    const createSeconds = await createShapes(server.url, mode, shapes)
    const full = await settle(server.pid, server.url)
    const viewEntries = await metric(server.url, 'sluice_subquery_view_entries')
    log(`  ${mode} ×${shapes}: made in ${createSeconds.toFixed(1)} s; RSS ${(base.rss / 2 ** 20).toFixed(0)} → ${(full.rss / 2 ** 20).toFixed(0)} MiB, heap ${(base.heap / 2 ** 20).toFixed(0)} → ${(full.heap / 2 ** 20).toFixed(0)} MiB, ${viewEntries} view entries`)
    const b = await burst(server.url, server.pid, writer, lists * TODOS_PER_LIST)
    log(`    burst: ${b.changes} changes, ${b.changesPerSecond.toFixed(0)}/s routed (Postgres wrote ${b.writeChangesPerSecond.toFixed(0)}/s), server CPU ${b.serverCpuMsPerKChange?.toFixed(0) ?? '-'} ms per 1k changes`)
    const paths = Array.from({ length: SETTINGS.followed }, (_, i) => shapePath(mode, i + 1))
    await follower.call('follow', { baseUrl: server.url, paths })
    const l = await latency(mode, lists, writer, follower)
    log(`    ${l.kind} latency: p50 ${l.p50Ms.toFixed(1)} ms, p99 ${l.p99Ms.toFixed(1)} ms, max ${l.maxMs.toFixed(1)} ms, ${l.missed} missed`)
    await follower.call('stop', {})
    return {
      mode,
      shapes,
      perUser,
      createSeconds,
      baseRssBytes: base.rss,
      rssBytes: full.rss,
      baseHeapBytes: base.heap,
      heapBytes: full.heap,
      viewEntries: Number.isNaN(viewEntries) ? 0 : viewEntries,
      burst: b,
      latency: l,
      load1: Math.round(loadavg()[0]! * 100) / 100,
    }
  } finally {
    await follower.close()
    await writer.close()
    await server.stop()
    await cluster.dropReplicationSlots().catch(() => {})
    rmSync(storageDir, { recursive: true, force: true })
  }
}

/** view-memory.ts in a process of its own (it needs --expose-gc). */
function viewMemory(): Layout[] {
  const script = fileURLToPath(new URL('./view-memory.ts', import.meta.url))
  const args = ['--expose-gc', '--import', 'tsx', '--conditions=sluice-source', script, QUICK ? '100000' : '1000000']
  const out = spawnSync(process.execPath, args, { encoding: 'utf8', cwd: fileURLToPath(new URL('..', import.meta.url)) })
  if (out.status !== 0) throw new Error(`view-memory.ts failed: ${out.stderr}`)
  const layouts = JSON.parse(out.stdout.trim().split('\n').pop()!) as Layout[]
  for (const l of layouts) log(`per view entry (${l.shapes} views of ${l.perShape}, shared by ${l.sharing}): ${l.viewBytesPerEntry.toFixed(0)} B view + ${l.indexBytesPerEntry.toFixed(0)} B index`)
  return layouts
}

async function main(): Promise<void> {
  const work = mkdtempSync(join(tmpdir(), 'sluice-subquery-'))
  const cluster = await startPostgres({ settings: BENCH_PG_SETTINGS })
  const runs: Run[] = []
  try {
    log(`bench:subquery: Postgres ${cluster.version}; sizes ${SIZES.join(', ')}, ${TRIALS} latency trials`)
    for (const shapes of SIZES) {
      for (const mode of ['subquery', 'equality'] as const) runs.push(await oneRun(cluster, work, mode, shapes))
    }
    runs.push(await oneRun(cluster, work, 'subquery-wide', SIZES[0]!))
  } finally {
    await cluster.stop()
    rmSync(work, { recursive: true, force: true })
  }
  const report: Report = { date: new Date().toISOString(), machine: machineInfo(tmpdir()), quick: QUICK, sizes: SIZES, runs, viewMemory: viewMemory() }
  const stem = QUICK ? 'subquery.quick' : PARTIAL ? 'subquery.partial' : 'subquery'
  mkdirSync(RESULTS_DIR, { recursive: true })
  writeFileSync(join(RESULTS_DIR, `${stem}.json`), `${JSON.stringify(report, null, 2)}\n`)
  writeFileSync(join(RESULTS_DIR, `${stem}.md`), markdown(report))
  process.stdout.write(markdown(report))
  const entry = perEntry(report)
  if (entry !== undefined) log(`per view entry: ${entry.heapBytes.toFixed(0)} B heap, ${entry.rssBytes.toFixed(0)} B RSS; per shape: ${runs.map((r) => `${r.mode}×${r.shapes} ${(rssPerShape(r) / 1024).toFixed(1)} KiB RSS / ${(heapPerShape(r) / 1024).toFixed(1)} KiB heap`).join(', ')}`)
}

main().catch((error: unknown) => {
  console.error(error)
  process.exit(1)
})
