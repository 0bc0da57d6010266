/**
 * bench:lifecycle: what idle shapes cost a running server, and whether expiry
 * gives it all back (issue 32 item 6).
 *
 * Measures: the real `sluice start` process (its resident set from
 * /proc/<pid>/status, its V8 heap from /metrics) and its store's disk use,
 * at three points: the baseline before any shape, with BENCH_SHAPES idle
 * shapes (20,000 distinct where clauses, `id = <n>`, one row each), and once
 * `--shape-ttl` expired them all. Reports the resident memory per idle shape
 * ((RSS with the shapes − baseline) / shapes) and the ratios of RSS and disk
 * after expiry to the baseline.
 * Does not measure: shapes with many rows or live clients (their logs and
 * waiters), eviction, a restart, or other machines.
 *
 * The shapes are made over HTTP (one `offset=-1` GET each, BENCH_CONCURRENCY
 * at once, the creation limits off), so the server has done everything a
 * client's first request does; the TTL is set well above the creation time so
 * that no shape expires before the second measurement. Each point is the
 * median RSS over BENCH_SETTLE_S seconds of samples taken after the server
 * went quiet (the C heap is trimmed every 10 s and V8's memory reducer runs on
 * an idle process; nothing can force a GC in the server from outside).
 *
 * Usage: `npm run bench:lifecycle` (from the root). BENCH_SHAPES (20000),
 * BENCH_CONCURRENCY (16), BENCH_TTL_S (480), BENCH_SETTLE_S (30),
 * BENCH_AFTER_S (120, the window after expiry), BENCH_BASELINE_S (the baseline's window, as long as
 * BENCH_AFTER_S), BENCH_RESULTS_DIR, BENCH_SMAPS_DIR (keeps the
 * server's /proc/<pid>/smaps and /metrics at each point there), BENCH_HEAP_SNAPSHOT_DIR (a V8 heap
 * snapshot at each point, after its figures). Any of them set: results/lifecycle.partial.*. QUICK=1:
 * 500 shapes, a 45 s TTL, 10 s windows, into results/lifecycle.quick.*.
 */
import { mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs'
import { loadavg, tmpdir } from 'node:os'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { fileURLToPath } from 'node:url'
import { startPostgres } from '@sluice/test-utils'
import { startSluice } from '../http/sluice-process.js'
import { BENCH_PG_SETTINGS } from '../pipeline/pg.js'
import { log } from '../pipeline/run-log.js'
import { machineInfo } from '../storage/report.js'
import { type Phase, type Report, TARGET, bytesPerIdleShape, phase } from './report.js'

const QUICK = process.env.QUICK === '1'
const SHAPES = Number(process.env.BENCH_SHAPES ?? (QUICK ? 500 : 20_000))
const CONCURRENCY = Number(process.env.BENCH_CONCURRENCY ?? 16)
const TTL_S = Number(process.env.BENCH_TTL_S ?? (QUICK ? 45 : 480))
/** The window after expiry is longer: V8 gives freed heap pages back only after idle-time collections. */
const AFTER_S = Number(process.env.BENCH_AFTER_S ?? (QUICK ? 20 : 120))
const SETTLE_S = Number(process.env.BENCH_SETTLE_S ?? (QUICK ? 10 : 30))
/**
 * The baseline's window is as long as the one after expiry: for its first 20-45 s a server just started
 * holds 10-17 MiB more than it settles to (start-up garbage, until V8's memory reducer and the C heap's
 * trim), and a 30 s window's median fell on either side of that drop from run to run.
 */
const BASELINE_S = Number(process.env.BENCH_BASELINE_S ?? AFTER_S)
const PARTIAL = ['BENCH_SHAPES', 'BENCH_CONCURRENCY', 'BENCH_TTL_S', 'BENCH_SETTLE_S', 'BENCH_AFTER_S', 'BENCH_BASELINE_S'].some((k) => process.env[k] !== undefined)
const RESULTS_DIR = process.env.BENCH_RESULTS_DIR ?? fileURLToPath(new URL('../results/', import.meta.url))
/** BENCH_HEAP_SNAPSHOT_DIR: the server writes a V8 heap snapshot there at each point (after its figures). */
const HEAP_SNAPSHOT_DIR = process.env.BENCH_HEAP_SNAPSHOT_DIR
/** RSS is sampled this often during a settle window. */
const SAMPLE_MS = 500

function rssBytes(pid: number): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))
  if (m === null) throw new Error(`no VmRSS for ${pid}`)
  return Number(m[1]) * 1024
}

/** Allocated bytes and files under a directory. */
function diskUse(dir: string): { bytes: number; files: number } {
  let bytes = 0
  let files = 0
  const walk = (d: string): void => {
    for (const entry of readdirSync(d, { withFileTypes: true })) {
      const path = join(d, entry.name)
      if (entry.isDirectory()) walk(path)
      else {
        bytes += statSync(path).blocks * 512
        files++
      }
    }
    bytes += statSync(d).blocks * 512
  }
  walk(dir)
  return { bytes, files }
}

async function metric(url: string, name: string): Promise<number> {
  const text = await (await fetch(`${url}/metrics`)).text()
  const line = text.split('\n').find((l) => l.startsWith(`${name} `))
  return line === undefined ? Number.NaN : Number(line.split(' ')[1])
}

const median = (xs: readonly number[]): number => {
  const s = [...xs].sort((a, b) => a - b)
  return s[Math.floor(s.length / 2)]!
}

/** The median RSS over a settle window that starts once the process has been quiet for a moment. */
async function settle(label: Phase['label'], pid: number, url: string, storeDir: string, seconds = SETTLE_S): Promise<Phase> {
  const samples: number[] = []
  const end = Date.now() + seconds * 1000
  while (Date.now() < end) {
    samples.push(rssBytes(pid))
    await sleep(SAMPLE_MS)
  }
  // The second half only: the first is the process getting quiet.
  const rss = median(samples.slice(Math.floor(samples.length / 2)))
  const disk = diskUse(storeDir)
  const shapeFiles = diskUse(join(storeDir, 'shapes')).bytes + diskUse(join(storeDir, 'trash')).bytes
  const shapes = await metric(url, 'sluice_shapes')
  const heap = await metric(url, 'nodejs_heap_size_used_bytes')
  const heapTotal = await metric(url, 'nodejs_heap_size_total_bytes')
  const external = await metric(url, 'nodejs_external_memory_bytes')
  const smapsDir = process.env.BENCH_SMAPS_DIR
  if (smapsDir !== undefined) {
    // Which mappings hold the memory at this point (malloc arenas, V8 pages, thread stacks...).
    mkdirSync(smapsDir, { recursive: true })
    writeFileSync(join(smapsDir, `smaps-${label}.txt`), readFileSync(`/proc/${pid}/smaps`, 'utf8'))
    writeFileSync(join(smapsDir, `metrics-${label}.txt`), await (await fetch(`${url}/metrics`)).text())
    writeFileSync(join(smapsDir, `rss-${label}.txt`), samples.map((b) => (b / 2 ** 20).toFixed(1)).join('\n'))
  }
  if (HEAP_SNAPSHOT_DIR !== undefined) await heapSnapshot(pid, label)
  const point: Phase = { label, shapes, rssBytes: rss, heapUsedBytes: heap, diskBytes: disk.bytes, shapeFileBytes: shapeFiles, files: disk.files, load1: Math.round(loadavg()[0]! * 100) / 100 }
  log(`${label}: ${shapes} shapes, RSS ${(rss / 2 ** 20).toFixed(1)} MiB, heap ${(heap / 2 ** 20).toFixed(1)} MiB (of ${(heapTotal / 2 ** 20).toFixed(1)} MiB; external ${(external / 2 ** 20).toFixed(1)} MiB), disk ${(disk.bytes / 2 ** 20).toFixed(2)} MiB in ${disk.files} files, load ${point.load1}`)
  return point
}

/**
 * Has the server write a heap snapshot (after the point's figures were taken:
 * writing one collects the heap and grows RSS) and waits for it.
 */
async function heapSnapshot(pid: number, label: string): Promise<void> {
  const dir = HEAP_SNAPSHOT_DIR!
  mkdirSync(dir, { recursive: true })
  const before = new Set(readdirSync(dir))
  process.kill(pid, 'SIGUSR2')
  for (;;) {
    await sleep(1000)
    const made = readdirSync(dir).find((f) => !before.has(f) && f.endsWith('.heapsnapshot'))
    if (made === undefined) continue
    // The file is complete once its size stops changing.
    const size = statSync(join(dir, made)).size
    await sleep(2000)
    if (statSync(join(dir, made)).size !== size) continue
    log(`heap snapshot at ${label}: ${join(dir, made)}`)
    return
  }
}

async function createShapes(url: string): Promise<number> {
  let next = 0
  let done = 0
  const started = performance.now()
  const worker = async (): Promise<void> => {
    for (let i = next++; i < SHAPES; i = next++) {
      for (;;) {
        const r = await fetch(`${url}/v1/shape?table=items&offset=-1&where=${encodeURIComponent(`id = ${i + 1}`)}`)
        await r.arrayBuffer()
        if (r.status === 200) break
        if (r.status !== 503 && r.status !== 429) throw new Error(`shape ${i + 1}: ${r.status}`)
        await sleep(1000 * Number(r.headers.get('retry-after') ?? 1))
      }
      if (++done % 1000 === 0) log(`  ${done} shapes, ${(done / ((performance.now() - started) / 1000)).toFixed(1)}/s`)
    }
  }
  await Promise.all(Array.from({ length: CONCURRENCY }, worker))
  return (performance.now() - started) / 1000
}

async function main(): Promise<void> {
  const work = mkdtempSync(join(tmpdir(), 'sluice-lifecycle-'))
  const cluster = await startPostgres({ settings: BENCH_PG_SETTINGS })
  const storageDir = join(work, 'store')
  mkdirSync(storageDir)
  try {
    await cluster.query(`CREATE TABLE items (id int4 PRIMARY KEY, n int4 NOT NULL); INSERT INTO items SELECT i, i FROM generate_series(1, ${SHAPES}) i`)
    const server = await startSluice({
      databaseUrl: cluster.url,
      storageDir,
      flags: ['--log-level', 'warn', '--shape-ttl', `${TTL_S}s`, '--client-shapes-per-minute', '0', '--max-creating-shapes', '0'],
      nodeArgs: HEAP_SNAPSHOT_DIR === undefined ? [] : ['--heapsnapshot-signal=SIGUSR2', `--diagnostic-dir=${HEAP_SNAPSHOT_DIR}`],
    })
    try {
      const storeDir = join(storageDir, 'logs')
      const baseline = await settle('baseline', server.pid, server.url, storeDir, BASELINE_S)
      log(`creating ${SHAPES} shapes over HTTP, ${CONCURRENCY} at once, TTL ${TTL_S} s`)
      const createSeconds = await createShapes(server.url)
      const created = performance.now()
      log(`created in ${createSeconds.toFixed(1)} s (${(SHAPES / createSeconds).toFixed(1)}/s)`)
      if (createSeconds > TTL_S * 0.8) log(`warning: creation took ${createSeconds.toFixed(0)} s of a ${TTL_S} s TTL; shapes may expire before they are measured`)
      const full = await settle('shapes', server.pid, server.url, storeDir)
      while ((await metric(server.url, 'sluice_shapes')) > 0) await sleep(1000)
      const expireSeconds = (performance.now() - created) / 1000
      log(`every shape expired ${expireSeconds.toFixed(0)} s after creation ended`)
      const expired = await settle('expired', server.pid, server.url, storeDir, AFTER_S)
      const report: Report = {
        date: new Date().toISOString(),
        machine: machineInfo(work),
        shapes: SHAPES,
        concurrency: CONCURRENCY,
        ttlSeconds: TTL_S,
        settleSeconds: SETTLE_S,
        afterSeconds: AFTER_S,
        baselineSeconds: BASELINE_S,
        createdOver: 'http',
        createSeconds,
        createPerSecond: SHAPES / createSeconds,
        expireSeconds,
        phases: [baseline, full, expired],
      }
      const stem = QUICK ? 'lifecycle.quick' : PARTIAL ? 'lifecycle.partial' : 'lifecycle'
      mkdirSync(RESULTS_DIR, { recursive: true })
      writeFileSync(join(RESULTS_DIR, `${stem}.json`), `${JSON.stringify(report, null, 2)}\n`)
      writeFileSync(join(RESULTS_DIR, `${stem}.md`), markdown(report))
      process.stdout.write(markdown(report))
    } finally {
      await server.stop()
    }
  } finally {
    await cluster.dropReplicationSlots().catch(() => {})
    await cluster.stop()
    rmSync(work, { recursive: true, force: true })
  }
}

function markdown(report: Report): string {
  const base = phase(report, 'baseline')!
  const after = phase(report, 'expired')!
  const perShape = bytesPerIdleShape(report)
  const mib = (b: number): string => `${(b / 2 ** 20).toFixed(1)} MiB`
  const rssRatio = after.rssBytes / base.rssBytes
  const diskRatio = after.diskBytes / base.diskBytes
  const lines = [
    `# Lifecycle: ${report.shapes.toLocaleString('en-US')} idle shapes, then expired (${report.date})`,
    '',
    `Shapes made over HTTP against \`sluice start\` (one \`offset=-1\` GET each, ${report.concurrency} at once): ${report.createSeconds.toFixed(0)} s, ${report.createPerSecond.toFixed(1)} shapes/s; \`--shape-ttl ${report.ttlSeconds}s\`; every shape expired ${report.expireSeconds.toFixed(0)} s after the last was made. Each figure is the median RSS of the second half of a window of samples (${report.settleSeconds} s; after expiry ${report.afterSeconds} s; the baseline ${report.baselineSeconds ?? report.settleSeconds} s). Disk: everything under logs/; shape files: logs/shapes and logs/trash alone (the rest is the journal and the watermarks).`,
    '',
    '| point | shapes | RSS | V8 heap used | disk (logs/) | shape files | files | load (1 min) |',
    '|---|---:|---:|---:|---:|---:|---:|---:|',
    ...report.phases.map((p) => `| ${p.label} | ${p.shapes} | ${mib(p.rssBytes)} | ${mib(p.heapUsedBytes)} | ${(p.diskBytes / 1024).toFixed(0)} KiB | ${(p.shapeFileBytes / 1024).toFixed(0)} KiB | ${p.files} | ${p.load1} |`),
    '',
    '| target | figure | verdict |',
    '|---|---|---|',
    `| RSS after expiry within 10% of the baseline | ${mib(after.rssBytes)} / ${mib(base.rssBytes)} = ${rssRatio.toFixed(3)}× | ${rssRatio <= TARGET.returnRatio ? 'met' : 'missed'} |`,
    `| disk after expiry within 10% of the baseline | ${(after.diskBytes / 1024).toFixed(0)} / ${(base.diskBytes / 1024).toFixed(0)} KiB = ${diskRatio.toFixed(3)}× (shape files ${(after.shapeFileBytes / 1024).toFixed(0)} KiB) | ${diskRatio <= TARGET.returnRatio ? 'met' : 'missed'} |`,
    `| resident memory per idle shape ≤ 10 KB | ${perShape === undefined ? 'n/a' : `${(perShape / 1024).toFixed(1)} KiB`} | ${perShape !== undefined && perShape <= TARGET.bytesPerIdleShape ? 'met' : 'missed'} |`,
    '',
  ]
  return `${lines.join('\n')}\n`
}

await main()
