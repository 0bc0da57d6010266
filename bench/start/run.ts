/**
 * The start benchmark: time from spawning `sluice start` to the first 200 of
 * /v1/health, on a store a previous run left at a clean stop with 10 and with
 * 100,000 shapes, for the compiled CLI (the build in dist/, run as its
 * bundle dist/sluice.mjs, as `sluice start` runs it) side by side with the same CLI run from its TypeScript
 * sources through tsx (SLUICE_FROM_SOURCE=1, the old way), runs interleaved.
 *
 * Environment: START_RUNS (runs per size and mode, default 7), START_SIZES
 * (default 10,100000), START_MODES (default compiled,source), QUICK=1 (a smoke run: 2 runs, 10 and
 * 1,000 shapes, into results/start.quick.*), START_FIXTURE=<dir> keeps the Postgres cluster and the
 * stores there for the next run (making the 100k store takes a few minutes;
 * default: a temp dir, deleted at the end), START_NODE_ARGS (Node flags for
 * the server, e.g. --cpu-prof), START_LOG_DIR=<dir> (each server's output),
 * START_HEAP_SNAPSHOT=<dir> (a heap snapshot of each server once healthy, written there),
 * START_WHERE=literal (shapes `id = <n>`, a clause text each, in place of `id = $1` with a parameter).
 * Writes results/start.{json,md}
 * (results/start.partial.* when START_SIZES or START_RUNS is set; results/start-literal.partial.* with START_WHERE=literal).
 */
import { type ChildProcess, spawn } from 'node:child_process'
import { readdirSync, rmSync, statSync, writeFileSync } from 'node:fs'
import { cpus, loadavg, totalmem } from 'node:os'
import { join } from 'node:path'
import { performance } from 'node:perf_hooks'
import { freePort } from '@sluice/test-utils'
import { median } from '../pipeline/stats.js'
import { machineInfo } from '../storage/report.js'
import { type FixtureWhere, type StartFixture, startFixture } from './fixture.js'
import { BIN, ROOT, buildCompiled, fixtureTempDir, cpuTimeMs, healthy, rssKiB, serverEnv } from './proc.js'
import { MODES, type Mode, type Report, type Run, TARGET_MS } from './report.js'

const QUICK = process.env.QUICK === '1'
const RUNS = Number(process.env.START_RUNS ?? (QUICK ? 2 : 7))
const SIZES = (process.env.START_SIZES ?? (QUICK ? '10,1000' : '10,100000')).split(',').map(Number)
/** START_NODE_ARGS: extra Node flags for the server (e.g. --cpu-prof --cpu-prof-dir=/tmp/p); makes the report partial. */
const NODE_ARGS = (process.env.START_NODE_ARGS ?? '').split(' ').filter((a) => a !== '')
/** START_LOG_DIR: keep each server's output there (with --trace-gc in START_NODE_ARGS, say). */
const LOG_DIR = process.env.START_LOG_DIR
/** START_HEAP_SNAPSHOT: once healthy, each server writes a heap snapshot there (what each restored shape holds); makes the report partial. */
const SNAPSHOT_DIR = process.env.START_HEAP_SNAPSHOT
/** START_WHERE: how the stored shapes differ (fixture.ts); makes the report partial unless it is the default. */
const WHERE: FixtureWhere = process.env.START_WHERE === 'literal' ? 'literal' : 'param'
const PARTIAL = WHERE !== 'param' || SNAPSHOT_DIR !== undefined || process.env.START_RUNS !== undefined || process.env.START_SIZES !== undefined || process.env.START_MODES !== undefined || NODE_ARGS.length > 0
/** START_MODES: which modes to run (compiled alone halves a run at 100k); makes the report partial. */
const RUN_MODES: readonly Mode[] = (process.env.START_MODES ?? MODES.join(',')).split(',').map((m) => {
  if (!(MODES as readonly string[]).includes(m)) throw new Error(`START_MODES: unknown mode ${m}`)
  return m as Mode
})
/** Asks the server for a heap snapshot (it was started with --heapsnapshot-signal) and waits until the file is whole. */
async function heapSnapshot(pid: number, dir: string): Promise<void> {
  const before = new Set(readdirSync(dir))
  process.kill(pid, 'SIGUSR2')
  let size = -1
  for (;;) {
    await new Promise((r) => setTimeout(r, 1000))
    const made = readdirSync(dir).find((f) => f.endsWith('.heapsnapshot') && !before.has(f))
    if (made === undefined) continue
    const now = statSync(join(dir, made)).size
    if (now > 0 && now === size) return
    size = now
  }
}

async function oneStart(fixture: StartFixture, mode: Mode, port: number): Promise<Run> {
  const env = serverEnv()
  if (mode === 'source') env['SLUICE_FROM_SOURCE'] = '1'
  const snapshotArgs = SNAPSHOT_DIR === undefined ? [] : ['--heapsnapshot-signal=SIGUSR2', `--diagnostic-dir=${SNAPSHOT_DIR}`]
  const args = [...NODE_ARGS, ...snapshotArgs, BIN, 'start', '--database-url', fixture.cluster.url, '--port', String(port), '--storage-dir', fixture.storageDir, '--slot', fixture.slot]
  const load1 = loadavg()[0]!
  const t0 = performance.now()
  const child: ChildProcess = spawn(process.execPath, args, { cwd: ROOT, env, stdio: ['ignore', 'pipe', 'pipe'] })
  let out = ''
  let err = ''
  child.stdout!.on('data', (d: Buffer) => (out += d.toString()))
  child.stderr!.on('data', (d: Buffer) => (err += d.toString()))
  const exited = new Promise<void>((resolve) => child.on('exit', () => resolve()))
  const url = `http://127.0.0.1:${port}/v1/health`
  let healthyMs: number | undefined
  while (healthyMs === undefined) {
    if (child.exitCode !== null) throw new Error(`sluice exited (${child.exitCode}) before healthy:\n${out}\n${err}`)
    if (await healthy(url)) healthyMs = performance.now() - t0
    else await new Promise((r) => setTimeout(r, 5))
    if (performance.now() - t0 > 300_000) throw new Error(`not healthy within 300 s:\n${out}\n${err}`)
  }
  const cpuMs = cpuTimeMs(child.pid!)
  const rss = rssKiB(child.pid!)
  if (SNAPSHOT_DIR !== undefined) await heapSnapshot(child.pid!, SNAPSHOT_DIR)
  const m = /started in (\d+) ms/.exec(out)
  if (LOG_DIR !== undefined) writeFileSync(join(LOG_DIR, `${fixture.shapes}-${mode}-${Date.now()}.log`), out + err)
  const s0 = performance.now()
  child.kill('SIGTERM')
  await exited
  const stopMs = performance.now() - s0
  if (!/"shapes restored"/.test(out) || !new RegExp(`"shapes":${fixture.shapes}\\b`).test(out)) {
    throw new Error(`sluice did not restore ${fixture.shapes} shapes:\n${out.slice(0, 4000)}\n${err}`)
  }
  return { mode, shapes: fixture.shapes, healthyMs, serverMs: m === null ? Number.NaN : Number(m[1]), cpuMs, rssKiB: rss, stopMs, load1 }
}

function fmt(ms: number): string {
  return ms >= 10_000 ? `${(ms / 1000).toFixed(1)} s` : `${Math.round(ms)} ms`
}

function mib(kib: number): string {
  return Number.isNaN(kib) ? '' : `${(kib / 1024).toFixed(1)} MiB`
}

/** RSS per shape from the smallest and largest sizes run compiled: the difference of their medians over the difference in shapes. */
function rssPerShape(runs: readonly Run[]): { bytes: number; small: number; large: number } | undefined {
  const compiled = runs.filter((r) => r.mode === 'compiled' && r.rssKiB !== undefined && !Number.isNaN(r.rssKiB))
  const sizes = [...new Set(compiled.map((r) => r.shapes))].sort((a, b) => a - b)
  if (sizes.length < 2) return undefined
  const small = sizes[0]!
  const large = sizes[sizes.length - 1]!
  const rss = (n: number): number => median(compiled.filter((r) => r.shapes === n).map((r) => r.rssKiB!))
  return { bytes: ((rss(large) - rss(small)) * 1024) / (large - small), small, large }
}

function report(runs: readonly Run[], seconds: number, fixtureReused: boolean): string {
  const lines = [
    '# Start benchmark',
    '',
    `Produced by \`npm run bench:start\` (\`pnpm --filter @sluice/bench run bench:start\`, \`bench/start/run.ts\`)${PARTIAL ? ' for a subset (START_SIZES / START_RUNS)' : ''} on ${new Date().toISOString().slice(0, 10)}; the run took ${(seconds / 60).toFixed(1)} minutes${fixtureReused ? ' (stores reused from START_FIXTURE)' : ''}.`,
    `Machine: ${cpus().length} × ${cpus()[0]?.model ?? 'cpu'}, ${Math.round(totalmem() / 1024 ** 3)} GiB, Node ${process.version}.`,
    '',
    WHERE === 'param'
      ? 'Shapes: `id = $1` on one table, one per id, differing by their parameter (one clause text for all).'
      : 'Shapes: `id = <n>` on one table, one per id, each its own clause text (START_WHERE=literal: a restore parses and compiles every clause).',
    '',
    '**Measures:** wall time from spawning `node packages/server/bin/sluice.js start --database-url … --storage-dir …` to the first',
    '200 of `GET /v1/health` (polled every 5 ms), on a store a previous run closed cleanly, with Postgres already running.',
    '`compiled` runs the build in dist/ (the bundle dist/sluice.mjs from 2026-11-30 on, what `sluice start` runs); `source` runs src/ through tsx (`SLUICE_FROM_SOURCE=1`),',
    'the way every start ran before. Runs alternate between the two. "server" is the banner\'s `started in` (createServer() to',
    'listening: opening the store, restoring shapes, publication, slot, replication); the rest of "healthy" is Node starting and',
    'loading the code. "CPU at healthy" is the server process\'s user + system time then (all threads, from /proc): on a machine',
    'shared with other work, wall time includes waiting for a core, CPU time does not. **Does not measure:** an embedded Postgres starting (its own 1-2 s), a start after a crash (the journal',
    'replay and the scan of every log), or building the sources (a no-op when nothing changed).',
    '',
    `| shapes | mode | runs | healthy (median) | min | max | server (median) | CPU at healthy (median) | RSS at healthy (median) | stop (median) | target | |`,
    '|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|',
  ]
  for (const shapes of SIZES) {
    const byMode = new Map<Mode, number>()
    for (const mode of RUN_MODES) {
      const rs = runs.filter((r) => r.shapes === shapes && r.mode === mode)
      if (rs.length === 0) continue
      const h = rs.map((r) => r.healthyMs)
      const med = median(h)
      byMode.set(mode, med)
      const target = TARGET_MS[shapes]
      const verdict = mode !== 'compiled' || target === undefined ? '' : med <= target ? 'met' : 'missed'
      lines.push(
        `| ${shapes.toLocaleString('en-US')} | ${mode} | ${rs.length} | ${fmt(med)} | ${fmt(Math.min(...h))} | ${fmt(Math.max(...h))} | ${fmt(median(rs.map((r) => r.serverMs)))} | ${fmt(median(rs.map((r) => r.cpuMs)))} | ${mib(median(rs.map((r) => r.rssKiB ?? Number.NaN)))} | ${fmt(median(rs.map((r) => r.stopMs)))} | ${mode === 'compiled' && target !== undefined ? `≤ ${fmt(target)}` : ''} | ${verdict} |`,
      )
    }
    const c = byMode.get('compiled')
    const s = byMode.get('source')
    const cpu = (mode: Mode): number => median(runs.filter((r) => r.shapes === shapes && r.mode === mode).map((r) => r.cpuMs))
    if (c !== undefined && s !== undefined) {
      lines.push(`| ${shapes.toLocaleString('en-US')} | source / compiled | | ${(s / c).toFixed(2)}× | | | | ${(cpu('source') / cpu('compiled')).toFixed(2)}× | | | | |`)
    }
  }
  const perShape = rssPerShape(runs)
  if (perShape !== undefined) {
    lines.push(
      '',
      `Resident memory per restored idle shape (compiled): ${Math.round(perShape.bytes).toLocaleString('en-US')} bytes, the median RSS at healthy with ${perShape.large.toLocaleString('en-US')} shapes minus that with ${perShape.small.toLocaleString('en-US')}, over the difference in shapes (target: at most 10 KB).`,
    )
  }
  const loads = runs.map((r) => r.load1)
  lines.push(
    '',
    `Load average (1 min) at the runs' starts: median ${median(loads).toFixed(1)}, ${Math.min(...loads).toFixed(1)} to ${Math.max(...loads).toFixed(1)}, on ${cpus().length} cores: above that, a start waits for a core and wall times grow while CPU times stay.`,
    '',
    'Every run (ms, healthy / server / CPU at healthy / stop; RSS at healthy; load average):',
    '',
  )
  for (const r of runs) lines.push(`- ${r.shapes} ${r.mode}: ${Math.round(r.healthyMs)} / ${r.serverMs} / ${r.cpuMs} / ${Math.round(r.stopMs)}; ${mib(r.rssKiB ?? Number.NaN)}; ${r.load1.toFixed(1)}`)
  return `${lines.join('\n')}\n`
}

async function main(): Promise<void> {
  const t0 = performance.now()
  buildCompiled()
  const fixtureDir = process.env.START_FIXTURE ?? fixtureTempDir('sluice-start-')
  const machine = machineInfo(fixtureDir)
  const runs: Run[] = []
  let cluster: StartFixture['cluster'] | undefined
  let reused = false
  try {
    for (const shapes of SIZES) {
      const made = performance.now()
      const fixture = await startFixture(fixtureDir, shapes, cluster, WHERE)
      cluster = fixture.cluster
      const madeMs = performance.now() - made
      if (madeMs > 5_000) process.stderr.write(`fixture of ${shapes} shapes made in ${fmt(madeMs)}\n`)
      else reused ||= shapes > 1000
      // One start of each mode first, not counted: the first after the fixture was made reads cold files.
      for (const mode of RUN_MODES) {
        const run = await oneStart(fixture, mode, await freePort())
        process.stderr.write(`${shapes} shapes, ${mode} (warm-up, not counted): healthy in ${Math.round(run.healthyMs)} ms (server ${run.serverMs} ms, CPU ${run.cpuMs} ms)\n`)
      }
      for (let i = 0; i < RUNS; i++) {
        for (const mode of i % 2 === 0 ? RUN_MODES : [...RUN_MODES].reverse()) {
          const run = await oneStart(fixture, mode, await freePort())
          runs.push(run)
          process.stderr.write(`${shapes} shapes, ${mode}: healthy in ${Math.round(run.healthyMs)} ms (server ${run.serverMs} ms, CPU ${run.cpuMs} ms, RSS ${mib(run.rssKiB ?? Number.NaN)}, stop ${Math.round(run.stopMs)} ms, load ${run.load1.toFixed(1)})\n`)
        }
      }
    }
  } finally {
    await cluster?.stop()
    if (process.env.START_FIXTURE === undefined) rmSync(fixtureDir, { recursive: true, force: true })
  }
  const seconds = (performance.now() - t0) / 1000
  // Literal clauses go to a file of their own, beside (not over) the usual partial run.
  const base = join(ROOT, 'bench/results', QUICK ? 'start.quick' : WHERE === 'literal' ? 'start-literal.partial' : PARTIAL ? 'start.partial' : 'start')
  const results: Report = { date: new Date().toISOString(), machine, runsPerMode: RUNS, sizes: SIZES, runs }
  writeFileSync(`${base}.json`, `${JSON.stringify(results, null, 2)}\n`)
  writeFileSync(`${base}.md`, report(runs, seconds, reused))
  process.stdout.write(report(runs, seconds, reused))
}

await main()
