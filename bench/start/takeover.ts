/**
 * The takeover benchmark: how long a standby writer (`sluice start --standby`)
 * takes to replace a writer that stops (SIGTERM, a rolling upgrade) or dies
 * (SIGKILL, a crash), on a store of 10 and of 100,000 shapes.
 *
 * Each run starts a writer on the store and waits until it is healthy, starts
 * a standby on another port (same storage directory and slot) and waits until
 * it logs that it waits for the writer lock, commits a few rows the writer
 * routes, then signals the writer (t0) and at once commits a probe row. From
 * t0 it times the writer's exit, the standby taking the lock (the store's LOCK
 * file names it), its `shapes restored` log line, its first 200 of
 * /v1/health, and the probe row served by the standby through its shape (the
 * handle and offset a client of the writer had), with the standby's CPU time
 * and RSS. The standby is then stopped with SIGTERM, so the store ends clean
 * for the next run.
 *
 * The runs use a copy of the start benchmark's store (`cp -a`, one per size)
 * and a copy of its slot (pg_copy_logical_replication_slot), both removed at
 * the end: the start fixture is left as it was, however a run ends.
 *
 * Environment: TAKEOVER_SIZES (default 10,100000), TAKEOVER_RUNS (runs per
 * size and way, default 3), TAKEOVER_WAYS (default SIGTERM,SIGKILL),
 * TAKEOVER_WHERE (param or literal, the start fixture's kinds of shapes;
 * default literal: each shape its own clause text, which a restore parses and
 * compiles), START_FIXTURE=<dir> (the start benchmark's fixture directory,
 * reused; default a temp dir, deleted at the end), TAKEOVER_LOG_DIR=<dir>
 * (every server's output), QUICK=1 (a smoke run: 10 and 1,000 shapes, one run
 * each, into results/takeover.quick.*). Writes results/takeover.{json,md}
 * (results/takeover.partial.* when a TAKEOVER_ variable narrows the run).
 */
import { type ChildProcess, spawn, spawnSync } from 'node:child_process'
import { existsSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { loadavg } from 'node:os'
import { join } from 'node:path'
import { performance } from 'node:perf_hooks'
import { setTimeout as sleep } from 'node:timers/promises'
import pg from 'pg'
import { stablePort } from '@sluice/test-utils'
import { markdownTable } from '../report/markdown.js'
import { takeoverSection } from '../report/sections/takeover.js'
import { machineInfo } from '../storage/report.js'
import { type FixtureWhere, type StartFixture, TABLE, startFixture } from './fixture.js'
import { BIN, ROOT, buildCompiled, fixtureTempDir, cpuTimeMs, healthy, rssKiB, serverEnv } from './proc.js'
import { type TakeoverReport, type TakeoverRun, WAYS, type Way } from './takeover-report.js'

const QUICK = process.env.QUICK === '1'
const RUNS = Number(process.env.TAKEOVER_RUNS ?? (QUICK ? 1 : 3))
const SIZES = (process.env.TAKEOVER_SIZES ?? (QUICK ? '10,1000' : '10,100000')).split(',').map(Number)
const RUN_WAYS: readonly Way[] = (process.env.TAKEOVER_WAYS ?? WAYS.join(',')).split(',').map((w) => {
  if (!(WAYS as readonly string[]).includes(w)) throw new Error(`TAKEOVER_WAYS: unknown way ${w}`)
  return w as Way
})
const WHERE: FixtureWhere = process.env.TAKEOVER_WHERE === 'param' ? 'param' : 'literal'
const PARTIAL = ['TAKEOVER_SIZES', 'TAKEOVER_RUNS', 'TAKEOVER_WAYS', 'TAKEOVER_WHERE'].some((k) => process.env[k] !== undefined)
const LOG_DIR = process.env.TAKEOVER_LOG_DIR
/** Rows committed (one transaction each) and routed by the writer just before it is signalled. */
const PRE_COMMITS = 5
/** Polling period for health, the LOCK file and refused shape requests (as the start benchmark's). */
const POLL_MS = 5
/** A takeover (or a writer's start) that takes longer than this fails the run. */
const LIMIT_MS = 300_000

/** A spawned server and what it printed. */
class Server {
  out = ''
  readonly exited: Promise<void>
  private readonly child: ChildProcess

  constructor(args: readonly string[]) {
    this.child = spawn(process.execPath, [BIN, 'start', ...args], { cwd: ROOT, env: serverEnv(), stdio: ['ignore', 'pipe', 'pipe'] })
    this.child.stdout!.on('data', (d: Buffer) => (this.out += d.toString()))
    this.child.stderr!.on('data', (d: Buffer) => (this.out += d.toString()))
    this.exited = new Promise((resolve) => this.child.on('exit', () => resolve()))
  }

  get pid(): number {
    return this.child.pid!
  }

  get running(): boolean {
    return this.child.exitCode === null && this.child.signalCode === null
  }

  kill(signal: NodeJS.Signals): void {
    this.child.kill(signal)
  }

  /** Resolves when the output contains `text` (checked on each poll: the logs are JSON lines). */
  async printed(text: string, what: string): Promise<void> {
    const from = performance.now()
    while (!this.out.includes(text)) {
      if (!this.running) throw new Error(`${what}: the server exited first:\n${this.out.slice(-4000)}`)
      if (performance.now() - from > LIMIT_MS) throw new Error(`${what}: not within ${LIMIT_MS / 1000} s:\n${this.out.slice(-4000)}`)
      await sleep(POLL_MS)
    }
  }

  /** SIGTERM, and the time to the exit; a process already gone takes none. */
  async stop(): Promise<number> {
    const s0 = performance.now()
    if (this.running) this.kill('SIGTERM')
    await this.exited
    return performance.now() - s0
  }
}

/** The query naming the fixture's shape of row `id` (as fixture.ts made it). */
function shapeQuery(id: number): string {
  const where = WHERE === 'param' ? `where=${encodeURIComponent('id = $1')}&params%5B1%5D=${id}` : `where=${encodeURIComponent(`id = ${id}`)}`
  return `table=${TABLE}&${where}`
}

interface Position {
  handle: string
  offset: string
  cursor: string | undefined
  upToDate: boolean
}

/** One shape request from `at`; undefined while nothing listens there. */
async function shapeRequest(base: string, id: number, at: Position | undefined, live: boolean): Promise<{ status: number; body: string; next: Position } | undefined> {
  const position = at === undefined ? 'offset=-1' : `handle=${at.handle}&offset=${at.offset}${live ? `&live=true${at.cursor === undefined ? '' : `&cursor=${at.cursor}`}` : ''}`
  let response: Response
  try {
    response = await fetch(`${base}/v1/shape?${shapeQuery(id)}&${position}`)
  } catch {
    return undefined
  }
  const body = await response.text()
  const next: Position = {
    handle: response.headers.get('electric-handle') ?? at?.handle ?? '',
    offset: response.headers.get('electric-offset') ?? at?.offset ?? '-1',
    cursor: response.headers.get('electric-cursor') ?? at?.cursor,
    upToDate: response.headers.has('electric-up-to-date'),
  }
  return { status: response.status, body, next }
}

/** Follows shape `id` on `base` from `at` (or from the start) until its body carries `text` (or, with none, until up to date). */
async function follow(base: string, id: number, at: Position | undefined, text: string | undefined, alive: () => void): Promise<{ at: Position; requests: number }> {
  let position = at
  let requests = 0
  for (;;) {
    alive()
    const r = await shapeRequest(base, id, position, position?.upToDate === true)
    if (r === undefined) {
      await sleep(POLL_MS)
      continue
    }
    requests++
    if (r.status !== 200) throw new Error(`shape id = ${id}: ${r.status} ${r.body.slice(0, 500)}`)
    position = r.next
    if (text === undefined ? position.upToDate : r.body.includes(text)) return { at: position, requests }
  }
}

function mustBeRunning(server: Server, what: string, t0: number): () => void {
  return () => {
    if (!server.running) throw new Error(`${what}: the standby exited:\n${server.out.slice(-4000)}`)
    if (performance.now() - t0 > LIMIT_MS) throw new Error(`${what}: not within ${LIMIT_MS / 1000} s:\n${server.out.slice(-4000)}`)
  }
}

async function oneTakeover(fixture: StartFixture, storageDir: string, slot: string, way: Way, db: pg.Client): Promise<TakeoverRun> {
  const load1 = loadavg()[0]!
  // Outside the ephemeral range: the standby's port stays unbound until it takes over.
  const [writerPort, standbyPort] = [await stablePort(), await stablePort()]
  const args = (port: number) => ['--database-url', fixture.cluster.url, '--port', String(port), '--storage-dir', storageDir, '--slot', slot]
  const writerUrl = `http://127.0.0.1:${writerPort}`
  const standbyUrl = `http://127.0.0.1:${standbyPort}`
  const w0 = performance.now()
  const writer = new Server(args(writerPort))
  let standby: Server | undefined
  const probeId = fixture.shapes
  const preIds = Array.from({ length: Math.min(PRE_COMMITS, fixture.shapes - 1) }, (_, i) => i + 1)
  const tag = `takeover ${way} ${Date.now()}`
  try {
    while (!(await healthy(`${writerUrl}/v1/health`))) {
      if (!writer.running || performance.now() - w0 > LIMIT_MS) throw new Error(`the writer did not get healthy:\n${writer.out.slice(-4000)}`)
      await sleep(POLL_MS)
    }
    const writerHealthyMs = performance.now() - w0
    standby = new Server([...args(standbyPort), '--standby'])
    await standby.printed('standby: waiting for the writer lock', 'the standby waiting')
    // What a client of the writer holds: the probe's shape, up to date.
    const probe = (await follow(writerUrl, probeId, undefined, undefined, () => {})).at
    // The writer's recent work: rows it has routed (the last followed until it shows) when it is signalled.
    const watched = (await follow(writerUrl, preIds[0]!, undefined, undefined, () => {})).at
    for (const id of [...preIds].reverse()) await db.query(`UPDATE ${TABLE} SET title = $1 WHERE id = $2`, [`${tag} pre ${id}`, id])
    await follow(writerUrl, preIds[0]!, watched, `${tag} pre ${preIds[0]}`, () => {})
    const cpuWaitingMs = cpuTimeMs(standby.pid)
    const rssWaitingKiB = rssKiB(standby.pid)

    const t0 = performance.now()
    writer.kill(way)
    const since = () => performance.now() - t0
    const s = standby
    const alive = mustBeRunning(s, 'takeover', t0)
    await db.query(`UPDATE ${TABLE} SET title = $1 WHERE id = $2`, [`${tag} probe`, probeId])
    const commitMs = since()
    let healthyAt: number | undefined
    const lockFile = join(storageDir, 'logs', 'LOCK')
    const [writerExitMs, lockMs, restoredMs, health, row] = await Promise.all([
      writer.exited.then(since),
      (async () => {
        for (;;) {
          alive()
          if (existsSync(lockFile) && readFileSync(lockFile, 'utf8').trim() === String(s.pid)) return since()
          if (healthyAt !== undefined) return null
          await sleep(POLL_MS)
        }
      })(),
      s.printed('"shapes restored"', 'shapes restored').then(since),
      (async () => {
        while (!(await healthy(`${standbyUrl}/v1/health`))) {
          alive()
          await sleep(POLL_MS)
        }
        healthyAt = since()
        return { ms: healthyAt, cpuMs: cpuTimeMs(s.pid), rssKiB: rssKiB(s.pid) }
      })(),
      follow(standbyUrl, probeId, probe, `${tag} probe`, alive).then((r) => ({ ms: since(), requests: r.requests })),
    ])
    const standbyStopMs = await standby.stop()
    const restored = /"shapes":(\d+)[^\n]*"shapes restored"/.exec(standby.out)
    return {
      way,
      shapes: fixture.shapes,
      load1,
      writerHealthyMs,
      writerExitMs,
      commitMs,
      lockMs,
      restoredMs,
      healthyMs: health.ms,
      rowMs: row.ms,
      rowRequests: row.requests,
      cpuWaitingMs,
      cpuHealthyMs: health.cpuMs,
      rssWaitingKiB,
      rssHealthyKiB: health.rssKiB,
      restoredShapes: restored === null ? Number.NaN : Number(restored[1]),
      standbyStopMs,
    }
  } finally {
    // The rows as the start fixture's store has them, however the run ended (the standby routes it, if it runs).
    await db.query(`UPDATE ${TABLE} SET title = 'item ' || id WHERE id = ANY($1::int[])`, [[...preIds, probeId]])
    // Both processes go, the standby (the writer then) with a clean stop.
    if (writer.running) await writer.stop()
    if (standby?.running) await standby.stop()
    if (LOG_DIR !== undefined) {
      writeFileSync(join(LOG_DIR, `takeover-${fixture.shapes}-${way}-${Date.now()}-writer.log`), writer.out)
      if (standby !== undefined) writeFileSync(join(LOG_DIR, `takeover-${fixture.shapes}-${way}-${Date.now()}-standby.log`), standby.out)
    }
  }
}

function fmt(ms: number | null): string {
  if (ms === null) return '-'
  return ms >= 10_000 ? `${(ms / 1000).toFixed(1)} s` : `${Math.round(ms)} ms`
}

/** The section the combined report shows, with every run listed after it. */
function markdown(report: TakeoverReport, minutes: number): string {
  const content = takeoverSection.render({ stem: 'takeover', kind: PARTIAL ? 'partial' : QUICK ? 'quick' : 'full', file: '', date: report.machine.date, data: report, others: [] })
  const lines = [
    '# Takeover benchmark',
    '',
    `Produced by \`npm run bench:takeover\` (\`pnpm --filter @sluice/bench run bench:takeover\`, \`bench/start/takeover.ts\`)${PARTIAL ? ' for a subset (TAKEOVER_ variables)' : ''} on ${report.machine.date.slice(0, 10)}; the run took ${minutes.toFixed(1)} minutes.`,
    '',
    `**Measures:** ${content.measures}`,
    '',
    `**Does not measure:** ${content.doesNotMeasure}`,
    '',
    ...content.method.map((m) => `- ${m}`),
    ...[...content.machine, ...content.load].map((m) => `- ${m}`),
    '',
    ...content.headline.map((h) => `- **${h}**`),
    '',
  ]
  for (const table of content.tables) lines.push(`## ${table.title}`, '', ...markdownTable(table), '', ...(table.note === undefined ? [] : [table.note, '']))
  lines.push('Every run (from the signal: writer exit / lock / restored / healthy / row; standby CPU while waiting → at healthy; RSS at healthy; the writer\'s own start; load average):', '')
  for (const r of report.runs) {
    lines.push(
      `- ${r.shapes} ${r.way}: ${fmt(r.writerExitMs)} / ${fmt(r.lockMs)} / ${fmt(r.restoredMs)} / ${fmt(r.healthyMs)} / ${fmt(r.rowMs)}; CPU ${fmt(r.cpuWaitingMs)} → ${fmt(r.cpuHealthyMs)}; ${(r.rssHealthyKiB / 1024).toFixed(0)} MiB; writer start ${fmt(r.writerHealthyMs)}; load ${r.load1.toFixed(1)}`,
    )
  }
  return `${lines.join('\n')}\n`
}

async function main(): Promise<void> {
  const started = performance.now()
  buildCompiled()
  const fixtureDir = process.env.START_FIXTURE ?? fixtureTempDir('sluice-takeover-')
  const machine = machineInfo(fixtureDir)
  const runs: TakeoverRun[] = []
  let cluster: StartFixture['cluster'] | undefined
  try {
    for (const shapes of SIZES) {
      const fixture = await startFixture(fixtureDir, shapes, cluster, WHERE)
      cluster = fixture.cluster
      const scratch = join(fixtureDir, `takeover-${shapes}-${WHERE}`)
      const slot = `takeover_${shapes}_${WHERE}`
      // Left by a run that did not finish: gone before the copy.
      rmSync(scratch, { recursive: true, force: true })
      await cluster.query('SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1', [slot])
      const c0 = performance.now()
      const cp = spawnSync('cp', ['-a', fixture.storageDir, scratch], { stdio: 'inherit' })
      if (cp.status !== 0) throw new Error(`cp -a ${fixture.storageDir} ${scratch} failed (${cp.status})`)
      // Where the fixture's store is, so the copy follows the slot from where its store left it.
      await cluster.query('SELECT pg_copy_logical_replication_slot($1, $2)', [fixture.slot, slot])
      process.stderr.write(`${shapes} shapes: store copied in ${fmt(performance.now() - c0)}\n`)
      const db = new pg.Client({ connectionString: cluster.url })
      await db.connect()
      try {
        for (let i = 0; i < RUNS; i++) {
          for (const way of i % 2 === 0 ? RUN_WAYS : [...RUN_WAYS].reverse()) {
            const r = await oneTakeover(fixture, scratch, slot, way, db)
            runs.push(r)
            process.stderr.write(
              `${shapes} shapes, ${way}: writer gone ${fmt(r.writerExitMs)}, lock ${fmt(r.lockMs)}, restored ${fmt(r.restoredMs)}, healthy ${fmt(r.healthyMs)}, row ${fmt(r.rowMs)} (${r.rowRequests} requests); standby CPU ${fmt(r.cpuHealthyMs - r.cpuWaitingMs)}, RSS ${(r.rssHealthyKiB / 1024).toFixed(0)} MiB; writer start ${fmt(r.writerHealthyMs)}; load ${r.load1.toFixed(1)}\n`,
            )
          }
        }
      } finally {
        await db.end()
        await cluster.query('SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1', [slot])
        rmSync(scratch, { recursive: true, force: true })
      }
    }
  } finally {
    await cluster?.stop()
    if (process.env.START_FIXTURE === undefined) rmSync(fixtureDir, { recursive: true, force: true })
  }
  const report: TakeoverReport = { machine, where: WHERE, runsPerWay: RUNS, sizes: SIZES, ways: RUN_WAYS, preCommits: PRE_COMMITS, runs }
  const base = join(ROOT, 'bench/results', QUICK ? 'takeover.quick' : PARTIAL ? 'takeover.partial' : 'takeover')
  const text = markdown(report, (performance.now() - started) / 60_000)
  writeFileSync(`${base}.json`, `${JSON.stringify(report, null, 2)}\n`)
  writeFileSync(`${base}.md`, text)
  process.stdout.write(text)
}

await main()
