/**
 * The compaction benchmark: a shape of COMPACT_ROWS rows (1,000) whose rows are
 * updated COMPACT_UPDATES times in all (1,000,000: every row, a thousand
 * times over, 1,000 rows per transaction), served by the `sluice start` CLI
 * in its own process. Measured side by side: a new client's initial sync
 * (bytes, time, requests; `offset=-1` to the first up-to-date, median of
 * COMPACT_SYNCS) and the shape's log on disk, before compaction (the server
 * run with --compact-ratio 0) and after (the server restarted with compaction
 * on, which compacts the log on its first check), next to a fresh shape over
 * the same rows (its snapshot: the current rows as the protocol carries them).
 *
 * Environment: COMPACT_ROWS, COMPACT_UPDATES, COMPACT_SYNCS (default 5);
 * QUICK=1: 1,000 rows updated 50,000 times, 3 syncs (results/compaction.quick.*);
 * any of the three set: results/compaction.partial.*; BENCH_RESULTS_DIR: where
 * to write. Writes results/compaction.{json,md}.
 */
import { isBucketName } from '@sluice/storage'
import { mkdirSync, mkdtempSync, readdirSync, rmSync, statSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { performance } from 'node:perf_hooks'
import { setTimeout as sleep } from 'node:timers/promises'
import { fileURLToPath } from 'node:url'
import { startPostgres } from '@sluice/test-utils'
import { startSluice } from '../http/sluice-process.js'
import { BENCH_PG_SETTINGS } from '../pipeline/pg.js'
import type { LoadNote } from '../pipeline/report.js'
import { loadNote, log, runSeconds } from '../pipeline/run-log.js'
import { SystemMeter } from '../storage/measure.js'
import { machineInfo } from '../storage/report.js'
import { type Report, type Side, type Sync, markdown, medianBytes, writeReport } from './report.js'

const QUICK = process.env.QUICK === '1'
const ROWS = Number(process.env.COMPACT_ROWS ?? 1000)
const UPDATES = Number(process.env.COMPACT_UPDATES ?? (QUICK ? 50_000 : 1_000_000))
const SYNCS = Number(process.env.COMPACT_SYNCS ?? (QUICK ? 3 : 5))
const PARTIAL = ['COMPACT_ROWS', 'COMPACT_UPDATES', 'COMPACT_SYNCS'].some((k) => process.env[k] !== undefined)
const TABLE = 'compaction_rows'
const here = fileURLToPath(new URL('.', import.meta.url))

/** `offset=-1` to the first up-to-date, as a new client does; its bytes, time and requests. */
async function newClientSync(base: string, query: string): Promise<Sync & { handle: string; offset: string }> {
  const began = performance.now()
  let offset = '-1'
  let handle: string | undefined
  let bytes = 0
  let requests = 0
  for (;;) {
    const url = `${base}/v1/shape?${query}&offset=${offset}${handle === undefined ? '' : `&handle=${handle}`}`
    const res = await fetch(url)
    const body = Buffer.from(await res.arrayBuffer())
    requests++
    if (res.status !== 200) throw new Error(`${res.status} for ${url}: ${body.toString('utf8').slice(0, 300)}`)
    bytes += body.length
    handle = res.headers.get('electric-handle') ?? handle
    offset = res.headers.get('electric-offset') ?? offset
    if (res.headers.has('electric-up-to-date')) return { bytes, ms: performance.now() - began, requests, handle: handle!, offset }
  }
}

/** Bytes of every file under `dir` whose top-level entry starts with `prefix` (a log's directory, or every generation of it). */
function diskBytes(dir: string, prefix: string): number {
  let total = 0
  const walk = (path: string): void => {
    const st = statSync(path)
    if (st.isDirectory()) for (const name of readdirSync(path)) walk(join(path, name))
    else total += st.size
  }
  // Logs live in bucket directories of shapes/ (storage's shape-dirs.ts).
  for (const bucket of readdirSync(dir)) {
    if (!isBucketName(bucket)) continue
    for (const name of readdirSync(join(dir, bucket))) if (name.startsWith(prefix)) walk(join(dir, bucket, name))
  }
  return total
}

async function metric(base: string, name: string): Promise<number> {
  const text = await (await fetch(`${base}/metrics`)).text()
  const m = new RegExp(`^${name} (\\S+)$`, 'm').exec(text)
  return m === null ? 0 : Number(m[1])
}

async function until(what: string, timeoutMs: number, check: () => Promise<boolean> | boolean): Promise<void> {
  const deadline = Date.now() + timeoutMs
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`)
    await sleep(50)
  }
}

async function main(): Promise<void> {
  const root = mkdtempSync(join(tmpdir(), 'sluice-compaction-bench-'))
  const storageDir = join(root, 'store')
  const machine = machineInfo(root)
  const loads: LoadNote[] = [loadNote('start')]
  const meter = new SystemMeter()
  const cluster = await startPostgres({ settings: BENCH_PG_SETTINGS })
  try {
    await cluster.query(`CREATE TABLE ${TABLE} (id int4 PRIMARY KEY, n int8 NOT NULL, note text NOT NULL)`)
    await cluster.query(`INSERT INTO ${TABLE} SELECT i, 0, 'row ' || i || ' ' || repeat('x', 40) FROM generate_series(1, ${ROWS}) i`)
    const query = `table=${TABLE}`
    const shapesDir = join(storageDir, 'logs', 'shapes')

    // 1. The history, with compaction off.
    let server = await startSluice({ databaseUrl: cluster.url, storageDir, flags: ['--compact-ratio', '0'] })
    const first = await newClientSync(server.url, query)
    const handle = first.handle
    log(`shape ${handle}: ${ROWS} rows; ${UPDATES.toLocaleString('en')} updates`)
    const perTxn = Math.min(ROWS, UPDATES)
    let done = 0
    let round = 0
    while (done < UPDATES) {
      const n = Math.min(perTxn, UPDATES - done)
      await cluster.query(`UPDATE ${TABLE} SET n = n + 1 WHERE id <= ${n}`)
      done += n
      if (++round % 100 === 0) log(`${done.toLocaleString('en')} updates`)
    }
    const committed = performance.now()
    // The shape's head reaches the last update: every row's n is then the count of its updates.
    const want = Math.floor(UPDATES / ROWS)
    const follower = new Follower(server.url, query, handle, first.offset)
    await until('the shape to catch up', 30 * 60_000, async () => (await follower.catchUp()) >= want)
    const catchUpMs = performance.now() - committed
    loads.push(loadNote('after the updates'))
    log(`caught up ${catchUpMs.toFixed(0)} ms after the last commit`)

    const measure = async (q: string, prefix: string | undefined): Promise<Side> => {
      const syncs: Sync[] = []
      for (let i = 0; i < SYNCS; i++) {
        const { bytes, ms, requests } = await newClientSync(server.url, q)
        syncs.push({ bytes, ms, requests })
      }
      return { syncs, diskBytes: prefix === undefined ? 0 : diskBytes(shapesDir, prefix) }
    }
    const before = await measure(query, handle)
    log(`before: ${medianBytes(before)} bytes per new client, ${before.diskBytes} bytes on disk`)
    // A fresh shape over the same rows: its snapshot is the current rows.
    const fresh = `${query}&where=${encodeURIComponent('id > 0')}`
    const freshHandle = (await newClientSync(server.url, fresh)).handle
    const currentRows = await measure(fresh, freshHandle)
    log(`current rows: ${medianBytes(currentRows)} bytes`)
    await server.stop()

    // 2. Compaction on: the first check finds the log due (its snapshot region holds ROWS entries, its log far more).
    const started = performance.now()
    server = await startSluice({ databaseUrl: cluster.url, storageDir, flags: ['--compact-ratio', '4', '--compact-min-entries', String(Math.min(10_000, Math.floor(UPDATES / 2)))] })
    await until('a compaction', 10 * 60_000, async () => (await metric(server.url, 'sluice_compactions_total')) >= 1)
    const startToDoneMs = performance.now() - started
    const compaction = {
      durationMs: (await metric(server.url, 'sluice_compaction_last_duration_seconds')) * 1000,
      reclaimedBytes: await metric(server.url, 'sluice_compaction_reclaimed_bytes_total'),
      peakKeys: await metric(server.url, 'sluice_compaction_peak_keys'),
      startToDoneMs,
    }
    loads.push(loadNote('after the compaction'))
    log(`compacted in ${compaction.durationMs.toFixed(0)} ms`)
    // The old log is deleted once its grace period (60 s) ends; what stays is the compacted generation.
    const after = await measure(query, `${handle}_c1`)
    log(`after: ${medianBytes(after)} bytes per new client, ${after.diskBytes} bytes on disk`)
    await server.stop()

    const report: Report = {
      date: new Date().toISOString(),
      machine,
      quick: QUICK,
      partial: PARTIAL,
      rows: ROWS,
      updates: UPDATES,
      currentRows,
      before,
      after,
      compaction,
      catchUpMs,
      runSeconds: runSeconds(),
      cpuPressurePercent: meter.cpuPressurePercent() ?? null,
      loads: [...loads, loadNote('end')],
    }
    const name = QUICK ? 'compaction.quick' : PARTIAL ? 'compaction.partial' : 'compaction'
    const outDir = process.env.BENCH_RESULTS_DIR ?? join(here, '..', 'results')
    mkdirSync(outDir, { recursive: true })
    writeReport(report, join(outDir, name))
    process.stdout.write(markdown(report))
    log(`wrote ${join(outDir, name)}.md and .json`)
  } finally {
    await cluster.stop()
    rmSync(root, { recursive: true, force: true })
  }
}

/** A client following the shape from where it stands, keeping each row's `n`. */
class Follower {
  private readonly n = new Map<string, number>()
  constructor(
    private readonly base: string,
    private readonly query: string,
    private readonly handle: string,
    private offset: string,
  ) {}

  /** Reads to the head; the smallest `n` among the rows that changed (-1 before every row has). */
  async catchUp(): Promise<number> {
    for (;;) {
      const res = await fetch(`${this.base}/v1/shape?${this.query}&offset=${this.offset}&handle=${this.handle}`)
      const messages = (await res.json()) as Array<{ key?: string; value?: { n?: string } }>
      for (const m of messages) if (m.key !== undefined && m.value?.n !== undefined) this.n.set(m.key, Number(m.value.n))
      this.offset = res.headers.get('electric-offset')!
      if (res.headers.has('electric-up-to-date')) break
    }
    return this.n.size < ROWS ? -1 : Math.min(...this.n.values())
  }
}

await main()
process.exit(0)
