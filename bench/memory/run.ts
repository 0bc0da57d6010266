/**
 * bench:memory: what one huge transaction costs the server's memory, and how
 * long its rows take to reach a live client (issue 30 item 7).
 *
 * Per run: a throwaway Postgres (the pipeline benchmark's settings), the real
 * `sluice start` process with `--memory-budget 64MiB --tail-budget 64MiB`, one
 * shape on the whole table `big` with one client long-polling it, then one
 * INSERT ... SELECT generate_series transaction of BENCH_ROWS rows (3,000,000
 * by default, about 1.2 GB of WAL). The server's resident set (VmRSS from
 * /proc/<pid>/status) is sampled every 100 ms from before the transaction
 * until 60 s after its last row reached the client; its /metrics (V8 heap,
 * external memory) every second, for the breakdown at the peak.
 *
 * Records: RSS before the transaction (the median of the last 2 s), the peak,
 * RSS 60 s after the commit and 60 s after the last row arrived; the time from
 * the commit (the INSERT's reply) until the client had the last row. Beside
 * it, the ceiling for that time: pg_recvlogical receiving the same kind of
 * transaction to /dev/null on the same cluster with the options Sluice asks
 * for (pgoutput protocol 2, streamed), so Postgres's part alone: no storage,
 * no routing, no HTTP.
 *
 * Usage: `pnpm --filter @sluice/bench run bench:memory` (from the root:
 * `npm run bench:memory`). BENCH_REPS (3), BENCH_ROWS, BENCH_AFTER_S (60),
 * BENCH_SLUICE_FLAGS (replaces the two budget flags), BENCH_SMAPS_DIR (keeps the server's
 * /proc/<pid>/smaps and /metrics before the transaction and at the end there), BENCH_NODE_OPTIONS (for
 * the server process, e.g. --heap-prof), BENCH_NODE_ARGS (Node flags NODE_OPTIONS refuses, e.g. --cpu-prof), BENCH_RESULTS_DIR. Runs with any of
 * these changed write results/memory.partial.md. QUICK=1: a smoke run (300,000
 * rows, one run, 10 s after) into results/memory.quick.*. BENCH_TRACE_CLIENT=1 prints
 * every response the client receives.
 */
import { spawn } from 'node:child_process'
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import http from 'node:http'
import { loadavg, tmpdir } from 'node:os'
import { join } from 'node:path'
import { performance } from 'node:perf_hooks'
import { setTimeout as sleep } from 'node:timers/promises'
import { fileURLToPath } from 'node:url'
import { type PostgresCluster, startPostgres } from '@sluice/test-utils'
import { startSluice } from '../http/sluice-process.js'
import { BENCH_PG_SETTINGS } from '../pipeline/pg.js'
import { type Machine, machineInfo } from '../storage/report.js'
import { type MetricsSample, type Report, type Run, TARGET } from './report.js'

const QUICK = process.env.QUICK === '1'
const ROWS = Number(process.env.BENCH_ROWS ?? (QUICK ? 300_000 : 3_000_000))
const REPS = Number(process.env.BENCH_REPS ?? (QUICK ? 1 : 3))
const AFTER_S = Number(process.env.BENCH_AFTER_S ?? (QUICK ? 10 : 60))
const BUDGET_FLAGS = (process.env.BENCH_SLUICE_FLAGS ?? '--memory-budget 64MiB --tail-budget 64MiB').split(' ').filter((a) => a !== '')
const NODE_OPTIONS = process.env.BENCH_NODE_OPTIONS
/** Node flags NODE_OPTIONS refuses, for the server process (e.g. `--cpu-prof --cpu-prof-dir=/tmp/prof`). */
const NODE_ARGS = (process.env.BENCH_NODE_ARGS ?? '').split(' ').filter((a) => a !== '')
const PARTIAL = ['BENCH_ROWS', 'BENCH_REPS', 'BENCH_AFTER_S', 'BENCH_SLUICE_FLAGS', 'BENCH_NODE_OPTIONS', 'BENCH_NODE_ARGS'].some((k) => process.env[k] !== undefined)
const RESULTS_DIR = process.env.BENCH_RESULTS_DIR ?? fileURLToPath(new URL('../results/', import.meta.url))
const FLAGS = ['--log-level', 'warn', ...BUDGET_FLAGS]
const MiB = 1024 * 1024

/** About 400 bytes of WAL a row with the table's index: 1.2 GB for 3M rows. */
const TABLE_SQL = `CREATE TABLE big (id int8 PRIMARY KEY, k int4 NOT NULL, payload text NOT NULL)`
const insertSql = (from: number, to: number) =>
  `INSERT INTO big SELECT i, i % 10, repeat(md5(i::text), 8) FROM generate_series(${from}, ${to}) i`

interface Sample {
  /** ms since the commit (negative before it). */
  readonly t: number
  readonly rssMiB: number
}
/** Resident MiB of the process's malloc heap (the main arena's `[heap]` mapping) and of its other anonymous mappings. */
function residentParts(pid: number): { mallocHeapMiB: number; otherAnonMiB: number } {
  let heap = 0
  let anon = 0
  let current: 'heap' | 'anon' | 'other' = 'other'
  for (const line of readFileSync(`/proc/${pid}/smaps`, 'utf8').split('\n')) {
    const range = /^[0-9a-f]+-[0-9a-f]+ \S+ \S+ \S+ \S+(?:\s+(.*))?$/.exec(line)
    if (range !== null) {
      const name = range[1] ?? ''
      current = name === '[heap]' ? 'heap' : name === '' ? 'anon' : 'other'
    } else if (line.startsWith('Rss:')) {
      const kb = Number(line.split(/\s+/)[1])
      if (current === 'heap') heap += kb
      else if (current === 'anon') anon += kb
    }
  }
  return { mallocHeapMiB: heap / 1024, otherAnonMiB: anon / 1024 }
}

/** BENCH_SMAPS_DIR: keeps the server's /proc/<pid>/smaps and /metrics at a moment, to see which mappings hold the memory. */
function dumpSmaps(pid: number, base: string, rep: number, moment: string): void {
  const dir = process.env.BENCH_SMAPS_DIR
  if (dir === undefined) return
  mkdirSync(dir, { recursive: true })
  writeFileSync(join(dir, `smaps-${rep}-${moment}.txt`), readFileSync(`/proc/${pid}/smaps`, 'utf8'))
  void get(`${base}/metrics`, 5_000).then((r) => writeFileSync(join(dir, `metrics-${rep}-${moment}.txt`), r.body), () => {})
}

function rssMiB(pid: number): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))
  return m === null ? Number.NaN : Number(m[1]) / 1024
}

function get(url: string, timeoutMs = 120_000): Promise<{ status: number; headers: http.IncomingHttpHeaders; body: Buffer }> {
  return new Promise((resolve, reject) => {
    const req = http.get(url, { timeout: timeoutMs }, (res) => {
      const chunks: Buffer[] = []
      res.on('data', (c: Buffer) => chunks.push(c))
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks) }))
      res.on('error', reject)
    })
    req.on('timeout', () => req.destroy(new Error(`GET ${url}: no answer within ${timeoutMs} ms`)))
    req.on('error', reject)
  })
}

function header(h: http.IncomingHttpHeaders, name: string): string | undefined {
  const v = h[name]
  return Array.isArray(v) ? v[0] : v
}

const INSERT_MARK = Buffer.from('"operation":"insert"')
function countInserts(body: Buffer): number {
  let n = 0
  for (let at = body.indexOf(INSERT_MARK); at !== -1; at = body.indexOf(INSERT_MARK, at + INSERT_MARK.length)) n++
  return n
}

/**
 * The live client: catches up on the (empty) shape, then long-polls, counting
 * the inserts it receives; `onRows` hears the running total after each response.
 */
function follow(base: string, onRows: (total: number) => void): { stop: () => void; done: Promise<void> } {
  let stopping = false
  const done = (async () => {
    let handle: string | undefined
    let offset = '-1'
    let cursor = ''
    let live = false
    let total = 0
    while (!stopping) {
      let path = `${base}/v1/shape?table=big&offset=${offset}`
      if (handle !== undefined) path += `&handle=${encodeURIComponent(handle)}`
      if (live) path += `&cursor=${cursor}&live=true`
      const r = await get(path).catch((error: Error) => {
        if (!stopping) console.error(`  client: ${error.message}`)
        return undefined
      })
      if (r === undefined) {
        await sleep(100)
        continue
      }
      if (r.status !== 200) throw new Error(`client: ${r.status} ${r.body.toString('utf8').slice(0, 300)}`)
      handle = header(r.headers, 'electric-handle') ?? handle
      offset = header(r.headers, 'electric-offset') ?? offset
      cursor = header(r.headers, 'electric-cursor') ?? cursor
      total += countInserts(r.body)
      if (process.env.BENCH_TRACE_CLIENT === '1') console.log(`  client ${(performance.now() / 1000).toFixed(2)} s: ${r.body.length} bytes, ${total} rows, live ${live}`)
      onRows(total)
      if (header(r.headers, 'electric-up-to-date') !== undefined) live = true
    }
  })()
  return { stop: () => (stopping = true), done }
}

/** Seconds a new client takes to download the whole shape (offset -1 until up-to-date), with the live client's code. */
async function catchUp(base: string): Promise<number> {
  const t0 = performance.now()
  let handle: string | undefined
  let offset = '-1'
  for (;;) {
    let path = `${base}/v1/shape?table=big&offset=${offset}`
    if (handle !== undefined) path += `&handle=${encodeURIComponent(handle)}`
    const r = await get(path)
    if (r.status !== 200) throw new Error(`catch-up: ${r.status} ${r.body.toString('utf8').slice(0, 300)}`)
    handle = header(r.headers, 'electric-handle') ?? handle
    offset = header(r.headers, 'electric-offset') ?? offset
    countInserts(r.body)
    if (header(r.headers, 'electric-up-to-date') !== undefined) return (performance.now() - t0) / 1000
  }
}

async function counter(base: string, name: string): Promise<number | undefined> {
  const r = await get(`${base}/metrics`, 5_000).catch(() => undefined)
  const m = r === undefined ? null : new RegExp(`^${name} (\\S+)`, 'm').exec(r.body.toString('utf8'))
  return m === null ? undefined : Number(m[1])
}

async function metricsSample(base: string, t: number): Promise<MetricsSample | undefined> {
  const r = await get(`${base}/metrics`, 5_000).catch(() => undefined)
  if (r === undefined || r.status !== 200) return undefined
  const text = r.body.toString('utf8')
  const value = (name: string) => Number(new RegExp(`^${name} (\\S+)`, 'm').exec(text)?.[1] ?? Number.NaN)
  return {
    t,
    rss: value('process_resident_memory_bytes'),
    heapUsed: value('nodejs_heap_size_used_bytes'),
    heapTotal: value('nodejs_heap_size_total_bytes'),
    external: value('nodejs_external_memory_bytes'),
  }
}

async function walLsn(cluster: PostgresCluster): Promise<bigint> {
  const { rows } = await cluster.query<{ b: string }>(`SELECT (pg_current_wal_lsn() - '0/0'::pg_lsn)::text AS b`)
  return BigInt(rows[0]!.b.split('.')[0]!)
}

/**
 * pg_recvlogical to /dev/null, with the options Sluice asks for (pgoutput protocol 2, in-progress
 * transactions streamed), until the slot confirmed the transaction's commit: how long after the commit
 * Postgres itself takes to hand the transaction over.
 */
async function ceiling(cluster: PostgresCluster, from: number, to: number): Promise<number> {
  await cluster.query(`SELECT pg_create_logical_replication_slot('ceiling', 'pgoutput')`)
  await cluster.query(`CREATE PUBLICATION ceiling_pub FOR TABLE big`)
  const child = spawn(
    join(cluster.binDir, 'pg_recvlogical'),
    ['-d', cluster.url, '--slot', 'ceiling', '--start', '-f', '/dev/null', '-o', 'proto_version=2', '-o', 'streaming=on', '-o', 'publication_names=ceiling_pub', '-s', '1', '-F', '0'],
    { stdio: 'ignore' },
  )
  try {
    await sleep(1000)
    await cluster.query(insertSql(from, to))
    const { rows } = await cluster.query<{ l: string }>(`SELECT pg_current_wal_lsn()::text AS l`)
    const commitAt = performance.now()
    const target = rows[0]!.l
    for (;;) {
      const { rows: s } = await cluster.query<{ done: boolean }>(`SELECT confirmed_flush_lsn >= $1::pg_lsn AS done FROM pg_replication_slots WHERE slot_name = 'ceiling'`, [target])
      if (s[0]?.done === true) return (performance.now() - commitAt) / 1000
      await sleep(100)
    }
  } finally {
    child.kill('SIGTERM')
    await new Promise((r) => child.once('exit', r))
    await cluster.query(`SELECT pg_drop_replication_slot('ceiling')`).catch(() => {})
    await cluster.query(`DROP PUBLICATION ceiling_pub`).catch(() => {})
  }
}

async function oneRun(rep: number): Promise<Run> {
  const cluster = await startPostgres({ settings: BENCH_PG_SETTINGS })
  const storageDir = mkdtempSync(join(process.env.BENCH_DIR ?? tmpdir(), 'sluice-memory-bench-'))
  const env = NODE_OPTIONS === undefined ? process.env : { ...process.env, NODE_OPTIONS }
  try {
    await cluster.query(TABLE_SQL)
    const sluice = await startSluice({ databaseUrl: cluster.url, storageDir, flags: FLAGS, env, nodeArgs: NODE_ARGS })
    try {
      let rows = 0
      let lastRowAt = Number.NaN
      let firstRowAt = Number.NaN
      let answered!: () => void
      const firstAnswer = new Promise<void>((resolve) => (answered = resolve))
      const client = follow(sluice.url, (total) => {
        answered()
        rows = total
        if (total > 0 && Number.isNaN(firstRowAt)) firstRowAt = performance.now()
        if (total >= ROWS && Number.isNaN(lastRowAt)) lastRowAt = performance.now()
      })
      // The shape exists (the first request made it) and the client long-polls from here on.
      await firstAnswer
      const samples: Sample[] = []
      const metrics: MetricsSample[] = []
      const rssTimer = setInterval(() => samples.push({ t: performance.now(), rssMiB: rssMiB(sluice.pid) }), 100)
      let metricsBusy = false
      const metricsTimer = setInterval(() => {
        if (metricsBusy) return
        metricsBusy = true
        const t = performance.now()
        void metricsSample(sluice.url, t).then((m) => {
          metricsBusy = false
          if (m !== undefined) metrics.push(m)
        })
      }, 1000)
      await sleep(5_000)
      const pre = samples.filter((s) => s.t >= performance.now() - 2_000).map((s) => s.rssMiB)
      const preMiB = median(pre)
      const start = residentParts(sluice.pid)
      dumpSmaps(sluice.pid, sluice.url, rep, 'before')
      const lsn0 = await walLsn(cluster)
      const sent = performance.now()
      console.log(`  rep ${rep}: inserting ${ROWS.toLocaleString('en')} rows (server RSS ${preMiB.toFixed(0)} MiB)`)
      await cluster.query(insertSql(1, ROWS))
      const commitAt = performance.now()
      if (process.env.BENCH_TRACE_CLIENT === '1') console.log(`  commit at ${(commitAt / 1000).toFixed(2)} s`)
      const walBytes = Number((await walLsn(cluster)) - lsn0)
      const deadline = commitAt + 15 * 60_000
      while (Number.isNaN(lastRowAt) && performance.now() < deadline) await sleep(50)
      const lastRowS = (lastRowAt - commitAt) / 1000
      console.log(`  rep ${rep}: commit after ${((commitAt - sent) / 1000).toFixed(1)} s, first row ${((firstRowAt - commitAt) / 1000).toFixed(1)} s and last row ${lastRowS.toFixed(1)} s after the commit (${rows} rows)`)
      const waitUntil = Math.max(commitAt, Number.isNaN(lastRowAt) ? commitAt : lastRowAt) + AFTER_S * 1000 + 200
      while (performance.now() < waitUntil) await sleep(100)
      clearInterval(rssTimer)
      clearInterval(metricsTimer)
      client.stop()
      const during = samples.filter((s) => s.t >= sent)
      const peak = during.reduce((a, b) => (b.rssMiB > a.rssMiB ? b : a), during[0]!)
      const at = (t: number) => samples.reduce((a, b) => (Math.abs(b.t - t) < Math.abs(a.t - t) ? b : a)).rssMiB
      const atPeak = metrics.length === 0 ? undefined : metrics.reduce((a, b) => (Math.abs(b.t - peak.t) < Math.abs(a.t - peak.t) ? b : a))
      const load = loadavg().map((l) => l.toFixed(1)).join(', ')
      const end = residentParts(sluice.pid)
      dumpSmaps(sluice.pid, sluice.url, rep, 'end')
      const catchUpS = await catchUp(sluice.url)
      const routedAhead = await counter(sluice.url, 'sluice_transactions_routed_ahead_total')
      const timeline: Array<[number, number]> = []
      for (const x of during) if (timeline.length === 0 || x.t - commitAt >= (timeline.at(-1)![0] + 1) * 1000) timeline.push([Math.round((x.t - commitAt) / 1000), Math.round(x.rssMiB)])
      await sluice.stop()
      await Promise.race([client.done.catch(() => {}), sleep(1000)])
      // The ceiling on a fresh table, after the server (and its slot) are gone.
      await cluster.dropReplicationSlots()
      await cluster.query('TRUNCATE big')
      const ceilingS = await ceiling(cluster, 1, ROWS)
      return {
        rep,
        walBytes,
        preMiB,
        peakMiB: peak.rssMiB,
        peakAtS: (peak.t - commitAt) / 1000,
        afterCommitMiB: at(commitAt + AFTER_S * 1000),
        afterLastRowMiB: at(lastRowAt + AFTER_S * 1000),
        commitS: (commitAt - sent) / 1000,
        lastRowS,
        firstRowS: (firstRowAt - commitAt) / 1000,
        catchUpS,
        routedAhead,
        rowsReceived: rows,
        ceilingS,
        atPeak,
        start,
        end,
        load,
        timeline,
      }
    } finally {
      await sluice.stop()
    }
  } finally {
    await cluster.stop()
    rmSync(storageDir, { recursive: true, force: true })
  }
}

function median(xs: readonly number[]): number {
  const s = [...xs].sort((a, b) => a - b)
  if (s.length === 0) return Number.NaN
  const m = s.length >> 1
  return s.length % 2 === 1 ? s[m]! : (s[m - 1]! + s[m]!) / 2
}

const f0 = (x: number) => (Number.isFinite(x) ? x.toFixed(0) : 'n/a')
const f1 = (x: number) => (Number.isFinite(x) ? x.toFixed(1) : 'n/a')
const mib = (x: number | undefined) => (x === undefined || !Number.isFinite(x) ? 'n/a' : (x / MiB).toFixed(0))

function report(runs: readonly Run[], machine: Machine, seconds: number): string {
  const m = (k: keyof Run) => median(runs.map((r) => r[k] as number))
  const pre = m('preMiB')
  const peak = m('peakMiB')
  const afterCommit = m('afterCommitMiB')
  const afterLast = m('afterLastRowMiB')
  const lastRow = m('lastRowS')
  const ceilingS = m('ceilingS')
  const met = (ok: boolean) => (ok ? 'met' : 'missed')
  const lines = [
    '# Memory benchmark',
    '',
    `One ${ROWS.toLocaleString('en')}-row transaction (${(m('walBytes') / 1e9).toFixed(2)} GB of WAL) through the \`sluice start\` process with \`${BUDGET_FLAGS.join(' ')}\`, one shape on the table and one live client long-polling it: the server's resident memory before, at the peak and after, and the time from the commit until the client has the last row. Issue 30 item 7.`,
    '',
    '**Measures:** the resident set of the server process (VmRSS, every 100 ms) and the commit-to-last-row time as one long-polling HTTP client sees it. **Does not measure:** many shapes, many clients, transactions spread over time, other machines.',
    '',
    '## Machine',
    '',
    `- ${machine.nproc} CPUs (${machine.cpu}), ${machine.memoryGiB} GiB RAM, Node ${machine.node}`,
    `- run on ${machine.date}, ${seconds.toFixed(0)} s; **the machine is shared** with other engineers' builds and tests (load average at the end of each run in the table)`,
    '',
    '## Method',
    '',
    `- Per run: a throwaway Postgres (\`@sluice/test-utils\`, the pipeline benchmark's settings: fsync off, \`logical_decoding_work_mem\` 64MB), \`sluice start ${FLAGS.join(' ')}\` (bin/sluice.js${NODE_OPTIONS === undefined ? '' : `, NODE_OPTIONS=${NODE_OPTIONS}`}) in its own process with its storage in a fresh directory, the table \`${TABLE_SQL}\`, one shape \`table=big\` and one client in the benchmark process that catches up and then long-polls it, counting inserts.`,
    `- After 5 s idle (pre-transaction RSS: median of the last 2 s), one transaction \`${insertSql(1, ROWS)}\`. The commit is the moment the INSERT returns. The last row is the moment the client's count reaches ${ROWS.toLocaleString('en')}.`,
    '- First row: the moment the client has any row of the transaction (it was published whole: routing and the flush are done). Download alone: after the run, a new client reads the whole shape from offset -1 until up-to-date with the same code, with nothing else going on.',
    `- RSS is read from /proc/<pid>/status every 100 ms until ${AFTER_S} s after the last row; V8's heap and external memory from the server's /metrics every second (the sample nearest the peak is shown).`,
    '- Ceiling for the time: after the server stopped, `pg_recvlogical` (pgoutput protocol 2 with streaming on, as Sluice asks for it, to /dev/null, status every second) on a new slot receives the same transaction on the emptied table; its time is from the commit until the slot confirmed the commit\'s LSN (so up to a second late). It has no storage, no routing, no HTTP.',
    `- ${runs.length} runs; the figures are medians of the runs.`,
    '',
    '## Results',
    '',
    `| figure | median | target | |`,
    '|---|---|---|---|',
    `| RSS before the transaction | ${f0(pre)} MiB | | |`,
    `| peak RSS | ${f0(peak)} MiB | < ${TARGET.peakMiB} MiB | ${met(peak < TARGET.peakMiB)} |`,
    `| RSS ${AFTER_S} s after the commit | ${f0(afterCommit)} MiB (${f1((afterCommit / pre - 1) * 100)}% over before) | within 20% of before | ${met(afterCommit <= pre * TARGET.afterRatio)} |`,
    `| RSS ${AFTER_S} s after the last row | ${f0(afterLast)} MiB (${f1((afterLast / pre - 1) * 100)}% over before) | | |`,
    `| commit to last row at the client | ${f1(lastRow)} s | < ${TARGET.lastRowS} s | ${met(lastRow < TARGET.lastRowS)} |`,
    `| of which commit to first row (delivery, routing, flush) | ${f1(m('firstRowS'))} s | | |`,
    `| a new client downloading the whole shape alone, afterwards | ${f1(m('catchUpS'))} s | | |`,
    `| ceiling: pg_recvlogical decodes it | ${f1(ceilingS)} s (Sluice ${f1(lastRow / ceilingS)}x) | | |`,
    '',
    '### Every run',
    '',
    '| run | WAL | INSERT took | before | peak (at s after commit) | heap used / external at peak | +60 s after commit | +60 s after last row | malloc heap / other anonymous, before → end | first row | last row | download alone | routed ahead | rows | ceiling | load (1, 5, 15 min) |',
    '|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|',
    ...runs.map(
      (r) =>
        `| ${r.rep} | ${(r.walBytes / 1e9).toFixed(2)} GB | ${f1(r.commitS)} s | ${f0(r.preMiB)} MiB | ${f0(r.peakMiB)} MiB (${f1(r.peakAtS)}) | ${mib(r.atPeak?.heapUsed)} / ${mib(r.atPeak?.external)} MiB | ${f0(r.afterCommitMiB)} MiB | ${f0(r.afterLastRowMiB)} MiB | ${f0(r.start.mallocHeapMiB)} / ${f0(r.start.otherAnonMiB)} → ${f0(r.end.mallocHeapMiB)} / ${f0(r.end.otherAnonMiB)} MiB | ${f1(r.firstRowS ?? Number.NaN)} s | ${f1(r.lastRowS)} s | ${f1(r.catchUpS ?? Number.NaN)} s | ${r.routedAhead === undefined ? 'n/a' : r.routedAhead >= 1 ? 'yes' : 'no'} | ${r.rowsReceived.toLocaleString('en')} | ${f1(r.ceilingS)} s | ${r.load} |`,
    ),
    '',
    `Reproduce: \`npm run bench:memory\` (or \`pnpm --filter @sluice/bench run bench:memory\`).`,
    '',
  ]
  return lines.join('\n')
}

async function main(): Promise<void> {
  // Once, as the run starts: the machine's speed is measured then, not after the server's work.
  const machine = machineInfo(process.env.BENCH_DIR ?? tmpdir())
  const t0 = performance.now()
  const runs: Run[] = []
  for (let rep = 1; rep <= REPS; rep++) {
    const run = await oneRun(rep)
    runs.push(run)
    console.log(`  rep ${rep}: malloc heap ${f0(run.start.mallocHeapMiB)} → ${f0(run.end.mallocHeapMiB)} MiB, other anonymous ${f0(run.start.otherAnonMiB)} → ${f0(run.end.otherAnonMiB)} MiB`)
    console.log(`  rep ${rep}: before ${f0(run.preMiB)} MiB, peak ${f0(run.peakMiB)} MiB, +${AFTER_S} s after commit ${f0(run.afterCommitMiB)} MiB, after last row ${f0(run.afterLastRowMiB)} MiB; last row ${f1(run.lastRowS)} s; ceiling ${f1(run.ceilingS)} s`)
  }
  const text = report(runs, machine, (performance.now() - t0) / 1000)
  mkdirSync(RESULTS_DIR, { recursive: true })
  const file = join(RESULTS_DIR, QUICK ? 'memory.quick.md' : PARTIAL ? 'memory.partial.md' : 'memory.md')
  writeFileSync(file, text)
  const results: Report = { machine, rows: ROWS, afterS: AFTER_S, flags: FLAGS, nodeOptions: NODE_OPTIONS, runs }
  writeFileSync(file.replace(/\.md$/, '.json'), JSON.stringify(results, null, 2))
  console.log(text)
  console.log(`wrote ${file}`)
}

await main()
