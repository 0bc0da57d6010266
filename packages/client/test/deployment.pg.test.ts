/**
 * A deployment with real parts (issue 32, items 2 and 4): nginx as a
 * round-robin load balancer over a writer, a standby writer and two read
 * replicas (`sluice start --read-only`), each a separate `sluice` process on
 * one storage directory; the official `@electric-sql/client` and
 * `@sluice/client` follow 10 shapes through nginx while a write load runs.
 * A replica is killed with SIGKILL and started again, then the writer; then
 * a standby waits for the writer's lock, the writer is killed, and the
 * standby takes over while the replicas keep serving. Clients see retries
 * only: no 409 (nothing is invalidated here), the handles they started with,
 * and rows equal to Postgres at the end.
 *
 * The second test runs the same with each `sluice` process in a network
 * namespace of its own, reached by nginx over a veth pair, as separate hosts
 * would be (Postgres over its unix socket, the storage directory shared).
 *
 * SOAK=1 runs more rounds of kills.
 */
import { type ChildProcess, execFileSync, spawn } from 'node:child_process'
import { chmod } from 'node:fs/promises'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { Shape as ElectricShape, ShapeStream as ElectricStream, type ShapeStreamInterface } from '@electric-sql/client'
import { type NginxServer, stablePort, startNginx, useTempDir, usePostgres } from '@sluice/test-utils'
import { afterEach, describe, expect, it } from 'vitest'
import { Shape, ShapeStream } from '../src/index.js'

const cluster = usePostgres()
const dirs = useTempDir('deployment')

/** The CLI as a user runs it, from the workspace link of the server package (its sources: SLUICE_FROM_SOURCE). */
const BIN = join(import.meta.dirname, '..', 'node_modules', '@sluice', 'server', 'bin', 'sluice.js')
const SHAPES = 10
const ROUNDS = process.env['SOAK'] === '1' ? 5 : 1
const TABLE = 'deploy_items'
const LONG_POLL = '3s'

/** Where one `sluice` process listens, and in which network namespace. */
interface Host {
  readonly name: string
  readonly address: string
  readonly port: number
  readonly netns?: string
}

interface Proc {
  readonly host: Host
  readonly child: ChildProcess
  stdout: string
  stderr: string
  readonly exited: Promise<void>
}

const procs: Proc[] = []
const namespaces: string[] = []

afterEach(async () => {
  for (const p of procs.splice(0)) {
    if (p.child.exitCode === null && p.child.signalCode === null) p.child.kill('SIGKILL')
    await p.exited
  }
  for (const ns of namespaces.splice(0)) removeNamespace(ns)
})

function startSluice(host: Host, storage: string, databaseUrl: string, extra: readonly string[]): Proc {
  const args = [BIN, 'start', '--host', host.address, '--port', String(host.port), '--storage-dir', storage, '--database-url', databaseUrl]
  args.push('--long-poll-timeout', LONG_POLL, '--chunk-bytes', '8KiB', ...(extra.includes('--log-level') ? [] : ['--log-level', 'info']), ...extra)
  const env: NodeJS.ProcessEnv = { ...process.env, SLUICE_FROM_SOURCE: '1' }
  for (const key of Object.keys(env)) if ((key.startsWith('SLUICE_') && key !== 'SLUICE_FROM_SOURCE') || key === 'DATABASE_URL') delete env[key]
  // `ip netns exec` execs the command in the namespace: the child's pid is the server's, for kill -9.
  const child = host.netns === undefined ? spawn(process.execPath, args, { env, stdio: ['ignore', 'pipe', 'pipe'] }) : spawn('ip', ['netns', 'exec', host.netns, process.execPath, ...args], { env, stdio: ['ignore', 'pipe', 'pipe'] })
  const proc: Proc = { host, child, stdout: '', stderr: '', exited: new Promise((resolve) => child.once('exit', () => resolve())) }
  child.stdout!.on('data', (d: Buffer) => (proc.stdout += d.toString()))
  child.stderr!.on('data', (d: Buffer) => (proc.stderr += d.toString()))
  procs.push(proc)
  return proc
}

async function waitForOutput(proc: Proc, pattern: RegExp, timeoutMs = 90_000): Promise<void> {
  const deadline = Date.now() + timeoutMs
  while (!pattern.test(proc.stdout)) {
    if (proc.child.exitCode !== null || proc.child.signalCode !== null) throw new Error(`${proc.host.name} exited before ${pattern}\n${proc.stdout.slice(-3000)}\n${proc.stderr.slice(-3000)}`)
    if (Date.now() > deadline) throw new Error(`${proc.host.name}: timed out waiting for ${pattern}\n${proc.stdout.slice(-3000)}\n${proc.stderr.slice(-3000)}`)
    await sleep(50)
  }
}

const LISTENING = /HTTP: +http:\/\//
/** Replicas log each request (debug), so the test can tell that they served live requests with data. */
const REPLICA_ARGS = ['--read-only', '--log-level', 'debug']

async function kill9(proc: Proc): Promise<void> {
  proc.child.kill('SIGKILL')
  await proc.exited
}

/** A namespace with a veth pair to this one: 10.201.<n>.1 here, 10.201.<n>.2 there. */
function addNamespace(n: number): Host & { netns: string } {
  const netns = `slr${process.pid}n${n}`
  const outside = `slr${process.pid % 100000}h${n}`
  const inside = `slr${process.pid % 100000}c${n}`
  removeNamespace(netns)
  namespaces.push(netns)
  const ip = (...args: string[]): void => void execFileSync('ip', args, { stdio: 'pipe' })
  ip('netns', 'add', netns)
  ip('link', 'add', outside, 'type', 'veth', 'peer', 'name', inside)
  ip('link', 'set', inside, 'netns', netns)
  ip('addr', 'add', `10.201.${n}.1/30`, 'dev', outside)
  ip('link', 'set', outside, 'up')
  ip('-n', netns, 'addr', 'add', `10.201.${n}.2/30`, 'dev', inside)
  ip('-n', netns, 'link', 'set', inside, 'up')
  ip('-n', netns, 'link', 'set', 'lo', 'up')
  return { name: `ns${n}`, address: `10.201.${n}.2`, port: 3000, netns }
}

/** Namespaces a run killed before its cleanup left behind (their test process is gone). */
function removeOrphanNamespaces(): void {
  const listed = execFileSync('ip', ['netns', 'list'], { encoding: 'utf8' })
  for (const match of listed.matchAll(/^slr(\d+)n\d+/gm)) {
    const pid = Number(match[1])
    let alive = true
    try {
      process.kill(pid, 0)
    } catch {
      alive = false
    }
    if (!alive) removeNamespace(match[0])
  }
}

/** Deleting the namespace deletes its end of the veth pair, and so the pair. */
function removeNamespace(netns: string): void {
  try {
    execFileSync('ip', ['netns', 'del', netns], { stdio: 'pipe' })
  } catch {
    // Not there.
  }
}

function nginxConfig(hosts: readonly Host[]): (context: { port: number }) => string {
  return ({ port }) => `
upstream sluice {
${hosts.map((h) => `  server ${h.address}:${h.port} max_fails=0;`).join('\n')}
  keepalive 16;
}
server {
  listen 127.0.0.1:${port};
  location / {
    proxy_pass http://sluice;
    proxy_http_version 1.1;
    proxy_set_header Connection "";
    proxy_buffering off;
    proxy_connect_timeout 2s;
    proxy_read_timeout 60s;
    # A server that is down, or a replica that has not got the shape yet (503), hands the request to the next.
    proxy_next_upstream error timeout http_502 http_503 http_504;
    proxy_next_upstream_tries 4;
  }
}`
}

/** Inserts, updates (some moving a row to another shape) and deletes, one transaction every few milliseconds. */
function writeLoad(): { stop(): Promise<number> } {
  let stopped = false
  let transactions = 0
  const done = (async () => {
    const client = await cluster.connect()
    let next = 1000
    try {
      while (!stopped) {
        const r = Math.random()
        if (r < 0.45) await client.query(`INSERT INTO ${TABLE} VALUES ($1, $2, $3)`, [next++, Math.floor(Math.random() * SHAPES), 0])
        else if (r < 0.85) await client.query(`UPDATE ${TABLE} SET val = val + 1, grp = CASE WHEN random() < 0.2 THEN (random() * ${SHAPES - 1})::int ELSE grp END WHERE id = (SELECT id FROM ${TABLE} ORDER BY random() LIMIT 1)`)
        else await client.query(`DELETE FROM ${TABLE} WHERE id = (SELECT id FROM ${TABLE} ORDER BY random() LIMIT 1)`)
        transactions++
        await sleep(10)
      }
    } finally {
      await client.end()
    }
  })()
  return {
    stop: async () => {
      stopped = true
      await done
      return transactions
    },
  }
}

type Row = { id: number | string; grp: number | string; val: number | string }

interface Follower {
  readonly name: string
  readonly handle: () => string | undefined
  readonly rows: () => readonly Row[]
  readonly upToDate: () => boolean
  /** Where it is and what went wrong last, for a failure message. */
  readonly describe: () => string
  stop(): void
}

function followElectric(url: string, grp: number): Follower {
  const abort = new AbortController()
  const stream = new ElectricStream<Row>({
    url,
    params: { table: TABLE, where: `grp = ${grp}` },
    signal: abort.signal,
    backoffOptions: { initialDelay: 100, maxDelay: 1000, multiplier: 1.5 },
  })
  const shape = new ElectricShape<Row>(stream as unknown as ShapeStreamInterface<Row>)
  const describe = (): string => `handle ${stream.shapeHandle} offset ${stream.lastOffset} connected ${stream.isConnected()} error ${String(stream.error)}`
  return { name: `electric ${grp}`, handle: () => stream.shapeHandle, rows: () => shape.currentRows, upToDate: () => stream.isUpToDate, describe, stop: () => abort.abort() }
}

function followSluice(url: string, grp: number): Follower {
  const stream = new ShapeStream<Row>({
    url,
    params: { table: TABLE, where: `grp = ${grp}` },
    backoff: { initialDelayMs: 100, maxDelayMs: 1000, multiplier: 1.5, maxRetries: Number.POSITIVE_INFINITY },
  })
  const shape = new Shape<Row>(stream)
  const describe = (): string => `handle ${stream.shapeHandle} offset ${stream.lastOffset} state ${stream.state.kind} requests ${stream.requestCount} error ${String(stream.error)}`
  return { name: `sluice ${grp}`, handle: () => stream.shapeHandle, rows: () => shape.rows, upToDate: () => stream.isUpToDate, describe, stop: () => stream.stop() }
}

function canonical(rows: readonly Row[]): string[] {
  return rows.map((r) => `${r.id}:${r.grp}:${r.val}`).sort()
}

async function until(what: string, check: () => boolean | Promise<boolean>, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out: ${what}`)
    await sleep(100)
  }
}

/** Writer, standby slot, two replicas; the run of kills; the checks. */
async function deployment(hosts: { writer: Host; standby: Host; replicas: readonly [Host, Host] }, databaseUrl: string): Promise<void> {
  const storage = await dirs.make('store')
  await chmod(storage, 0o755)
  await cluster.query(`DROP TABLE IF EXISTS ${TABLE}`)
  await cluster.query(`CREATE TABLE ${TABLE} (id int PRIMARY KEY, grp int NOT NULL, val int NOT NULL)`)
  await cluster.query(`INSERT INTO ${TABLE} SELECT g, g % ${SHAPES}, 0 FROM generate_series(1, 200) g`)

  let writer = startSluice(hosts.writer, storage, databaseUrl, [])
  await waitForOutput(writer, LISTENING)
  const replicas = hosts.replicas.map((h) => startSluice(h, storage, databaseUrl, REPLICA_ARGS))
  for (const r of replicas) await waitForOutput(r, LISTENING)
  const nginx: NginxServer = await startNginx({ config: nginxConfig([hosts.writer, hosts.standby, ...hosts.replicas]) })
  const followers: Follower[] = []
  const load = writeLoad()
  try {
    const url = `${nginx.url}/v1/shape`
    for (let g = 0; g < SHAPES; g++) followers.push(followElectric(url, g), followSluice(url, g))
    await until('every client up to date', () => followers.every((f) => f.upToDate()), 60_000).catch(async (error: unknown) => {
      const lagging = followers.filter((f) => !f.upToDate()).map((f) => `${f.name}: ${f.describe()}`)
      const log = await nginx.accessLog()
      throw new Error(`${String(error)}\n${lagging.join('\n')}\nthe last of nginx's log:\n${log.slice(-40).map((e) => JSON.stringify(e)).join('\n')}`)
    })
    const handles = new Map(followers.map((f) => [f.name, f.handle()]))
    let standbyHost = hosts.standby
    let writerHost = hosts.writer

    for (let round = 0; round < ROUNDS; round++) {
      // A replica dies and comes back.
      const victim = round % 2
      await sleep(500)
      await kill9(replicas[victim]!)
      await sleep(500)
      replicas[victim] = startSluice(hosts.replicas[victim]!, storage, databaseUrl, REPLICA_ARGS)
      await waitForOutput(replicas[victim]!, LISTENING)

      // The writer dies and is started again.
      await sleep(500)
      await kill9(writer)
      await sleep(300)
      writer = startSluice(writerHost, storage, databaseUrl, [])
      await waitForOutput(writer, LISTENING)

      // A standby waits for the lock; the writer dies; the standby takes over while the replicas serve.
      await sleep(500)
      const standby = startSluice(standbyHost, storage, databaseUrl, ['--standby'])
      await waitForOutput(standby, /standby: waiting for the writer lock/)
      await kill9(writer)
      await waitForOutput(standby, LISTENING)
      writer = standby
      ;[writerHost, standbyHost] = [standbyHost, writerHost]
    }

    const transactions = await load.stop()
    expect(transactions).toBeGreaterThan(50)
    const expected = new Map<number, string[]>()
    for (let g = 0; g < SHAPES; g++) {
      const { rows } = await cluster.query(`SELECT id, grp, val FROM ${TABLE} WHERE grp = $1`, [g])
      expected.set(g, canonical(rows as Row[]))
    }
    await until(
      'every client equal to Postgres',
      () => followers.every((f) => JSON.stringify(canonical(f.rows())) === JSON.stringify(expected.get(Number(f.name.split(' ')[1])))),
      60_000,
    ).catch((error: unknown) => {
      const lagging = followers.filter((f) => JSON.stringify(canonical(f.rows())) !== JSON.stringify(expected.get(Number(f.name.split(' ')[1]))))
      throw new Error(`${String(error)}:\n${lagging.map((f) => `${f.name}: ${f.describe()}`).join('\n')}`)
    })
    // The handles they started with: nothing was invalidated, so no client had to start over.
    for (const f of followers) expect(f.handle(), f.name).toBe(handles.get(f.name))
    const log = await nginx.accessLog()
    expect(log.filter((e) => e.status === 409)).toEqual([])
    // Both replicas served live requests (round robin), over all their lives.
    for (const host of hosts.replicas) {
      const lines = procs.filter((p) => p.host === host).flatMap((p) => p.stdout.split('\n'))
      const served = lines.filter((line) => line.includes('"msg":"request"') && line.includes('"status":200') && line.includes('live=true'))
      expect(served.length, host.name).toBeGreaterThan(0)
    }
  } finally {
    for (const f of followers) f.stop()
    await load.stop().catch(() => 0)
    await nginx.stop()
  }
}

describe('deployment: nginx over a writer, a standby and two read replicas', () => {
  it('keeps clients syncing through kill -9 of a replica, of the writer, and a standby takeover', { timeout: 100_000 + ROUNDS * 60_000 }, async () => {
    // Ports outside the ephemeral range: the standby's stays unbound until it takes over, and a killed process's
    // until it is started again; in the meantime a server of a test file running alongside, listening on port 0,
    // could be given a port from freePort, and nginx would send it this test's clients (a 400 for a table it
    // does not have, which stops the official client for good).
    const local = async (name: string): Promise<Host> => ({ name, address: '127.0.0.1', port: await stablePort() })
    await deployment(
      { writer: await local('writer'), standby: await local('standby'), replicas: [await local('replica 1'), await local('replica 2')] },
      cluster.url,
    )
  })

  it('does the same with each process in its own network namespace', { timeout: 100_000 + ROUNDS * 60_000 }, async () => {
    removeOrphanNamespaces()
    const base = process.pid % 200
    const [writer, standby, r1, r2] = [0, 1, 2, 3].map((i) => addNamespace(base + i)) as [Host, Host, Host, Host]
    await deployment({ writer, standby, replicas: [r1, r2] }, cluster.socketUrl)
  })
})
