// The `sluice` command as a user runs it: bin/sluice.js in a child process.
import { existsSync } from 'node:fs'
import { chmod } from 'node:fs/promises'
import { type Socket, connect } from 'node:net'
import { join } from 'node:path'
import { usePostgres, useTempDir } from '@sluice/test-utils'
import pg from 'pg'
import { describe, expect, it } from 'vitest'
import { SETTINGS } from '../../src/config.js'
import { REPEAT_WINDOW_MS } from '../../src/shutdown-signals.js'
import { type Run, cleanEnv, sluice } from './sluice-run.js'

const dirs = useTempDir('cli')
const cluster = usePostgres()

async function storageDir(): Promise<string> {
  const dir = await dirs.make('store')
  await chmod(dir, 0o755)
  return dir
}

/** JSON log lines of stdout. */
function logs(run: Run): Array<Record<string, unknown>> {
  return run.stdout
    .split('\n')
    .filter((l) => l.startsWith('{'))
    .map((l) => JSON.parse(l) as Record<string, unknown>)
}

/**
 * A POST whose body never finishes, surely in flight before the test goes on: its headers ask for
 * `100 Continue`, which node:http sends once it has parsed them. (A fixed sleep raced the server's
 * accept on a loaded machine: a connection still in the listen backlog is dropped by close(), and the
 * drain the test holds up ended at once.)
 */
async function unfinishedPost(port: number, partialBody: string): Promise<Socket> {
  const socket = connect(port, '127.0.0.1')
  socket.on('error', () => {})
  let seen = ''
  const continued = new Promise<void>((resolve) => {
    socket.on('data', (chunk: Buffer) => {
      seen += chunk.toString('latin1')
      if (seen.startsWith('HTTP/1.1 100 Continue\r\n\r\n')) resolve()
    })
  })
  socket.write('POST /v1/shape?table=t&offset=-1 HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 1000\r\nexpect: 100-continue\r\n\r\n')
  await continued
  socket.write(partialBody)
  return socket
}

describe('sluice CLI', () => {
  it('--help prints every setting and exits 0', async () => {
    const run = sluice(['--help'])
    expect(await run.exited).toEqual({ code: 0, signal: null })
    expect(run.stdout).toMatch(/^Usage: sluice start \[options\]/)
    for (const s of SETTINGS) {
      expect(run.stdout).toContain(`--${s.flag}`)
      expect(run.stdout).toContain(s.env)
    }
  })

  it('bad settings exit 2 with one line per problem and start nothing', async () => {
    const dir = await storageDir()
    const run = sluice(['start', '--port', 'http', '--memory-budget', '12 parsecs', '--frobnicate'], {
      cwd: dir,
      env: { SLUICE_LONG_POLL_TIMEOUT: '20' },
    })
    expect(await run.exited).toEqual({ code: 2, signal: null })
    expect(run.stdout).toBe('')
    expect(run.stderr.trimEnd().split('\n')).toEqual([
      'sluice: unknown option --frobnicate (see sluice --help)',
      'sluice: --port: expected an integer from 0 to 65535, got "http"',
      'sluice: SLUICE_LONG_POLL_TIMEOUT (environment): expected a duration from 100ms to 1h, such as 500ms, 20s or 5m, got "20"',
      'sluice: --memory-budget: expected a size from 16MiB to 1TiB, such as 64MiB, 512KiB or 1048576, got "12 parsecs"',
    ])
    expect(existsSync(join(dir, '.sluice'))).toBe(false)
  })

  it('start without a database URL runs an embedded Postgres, serves HTTP, and drains on SIGTERM; the next start reuses it', async () => {
    const dir = await storageDir()
    const t0 = performance.now()
    const first = sluice(['start', '--port', '0', '--log-level', 'debug', '--long-poll-timeout', '30s'], { cwd: dir })
    const [, url] = await first.waitFor(/HTTP: +(http:\/\/127\.0\.0\.1:\d+)/)
    const coldMs = performance.now() - t0
    const [, dbUrl] = await first.waitFor(/Database: +(postgresql:\/\/postgres@127\.0\.0\.1:\d+\/postgres)/)
    expect(first.stdout).toMatch(/Postgres: +embedded PostgreSQL \d+\.\d+ .*new data folder .*\.sluice\/postgres\/data/)
    expect(first.stdout).toContain('no --database-url / DATABASE_URL given')
    // Where the addon built (it does here), large bodies go out by sendfile, and the banner, log and /metrics say so.
    expect(first.stdout).toMatch(/Bodies: +sendfile\(2\) from 256 KiB/)
    expect(logs(first).find((l) => l['bodyPath'] !== undefined)?.['bodyPath']).toBe('sendfile')
    const firstMetrics = await (await fetch(`${url}/metrics`)).text()
    expect(firstMetrics).toContain('sluice_http_body_path{path="sendfile"} 1')
    expect(firstMetrics).toContain('sluice_http_body_path{path="pread"} 0')
    expect(firstMetrics).toContain('# TYPE sluice_sendfile_calls_total counter')

    expect((await fetch(`${url}/v1/health`)).status).toBe(200)
    const db = new pg.Client({ connectionString: dbUrl })
    await db.connect()
    await db.query('CREATE TABLE todos (id int PRIMARY KEY, title text)')
    await db.query("INSERT INTO todos VALUES (1, 'one')")
    const initial = await fetch(`${url}/v1/shape?table=todos&offset=-1`)
    expect(initial.status).toBe(200)
    const handle = initial.headers.get('electric-handle')!
    const offset = initial.headers.get('electric-offset')!
    await initial.arrayBuffer()
    await db.end()
    // The shape's lifecycle is logged at info; requests at debug.
    await first.waitFor(/"msg":"shape ready"/)
    expect(logs(first).some((l) => l['msg'] === 'request' && l['level'] === 20 && l['url'] === '/v1/health')).toBe(true)

    // A long-poll waiting when SIGTERM arrives is answered, then the process exits 0.
    const waiting = fetch(`${url}/v1/shape?table=todos&handle=${handle}&offset=${offset}&live=true`).then(
      async (r) => ({ status: r.status, body: await r.text() }),
      (err: Error) => ({ status: 0, body: err.message }),
    )
    await new Promise((r) => setTimeout(r, 300))
    first.child.kill('SIGTERM')
    expect(await first.exited).toEqual({ code: 0, signal: null })
    const answer = await waiting
    expect(answer.status).toBeGreaterThan(0)
    expect(logs(first).map((l) => l['msg'])).toContain('stopped')
    // The embedded Postgres was stopped with it.
    expect(existsSync(join(dir, '.sluice', 'postgres', 'data', 'postmaster.pid'))).toBe(false)

    const t1 = performance.now()
    const second = sluice(['start', '--port', '0'], { cwd: dir })
    const [, url2] = await second.waitFor(/HTTP: +(http:\/\/127\.0\.0\.1:\d+)/)
    const warmMs = performance.now() - t1
    expect(second.stdout).toMatch(/reusing data folder/)
    const [, startedIn] = /started in (\d+) ms/.exec(second.stdout)!
    // The shape survived the restart.
    const again = await fetch(`${url2}/v1/shape?table=todos&offset=-1`)
    expect(again.status).toBe(200)
    expect(again.headers.get('electric-handle')).toBe(handle)
    await again.arrayBuffer()
    // The start-up log says what the restart did: the store from the heads file the clean stop wrote, one shape.
    const opened = logs(second).find((l) => l['msg'] === 'store opened')
    expect(opened).toMatchObject({ logs: 1, fromHeadsFile: 1, scanned: 0, quarantined: 0 })
    expect(typeof opened!['ms']).toBe('number')
    expect(logs(second).find((l) => l['msg'] === 'shapes restored')).toMatchObject({ shapes: 1, ms: expect.any(Number) })
    console.log(`sluice start: cold (initdb) ${Math.round(coldMs)} ms; warm ${Math.round(warmMs)} ms wall, ${startedIn} ms in createServer`)
    expect(warmMs).toBeLessThan(10_000)
    second.child.kill('SIGINT')
    expect(await second.exited).toEqual({ code: 0, signal: null })
  })

  it('with --database-url it uses that database; a second signal exits at once', async () => {
    const dir = await storageDir()
    const url = cluster.url.replace('postgres://postgres@', 'postgres://postgres:hunter2@')
    const run = sluice(['start', '--port', '0', '--slot', 'cli_test_slot', '--publication', 'cli_test_pub', '--no-sendfile'], { cwd: dir, env: { DATABASE_URL: url } })
    const [, httpUrl] = await run.waitFor(/HTTP: +(http:\/\/127\.0\.0\.1:\d+)/)
    // --no-sendfile: every body by pread, as the banner, the log and /metrics say.
    expect(run.stdout).toMatch(/Bodies: +pread only: turned off \(--no-sendfile\)/)
    expect(logs(run).find((l) => l['bodyPath'] !== undefined)?.['bodyPath']).toBe('pread')
    expect(await (await fetch(`${httpUrl}/metrics`)).text()).toContain('sluice_http_body_path{path="pread"} 1')
    expect(run.stdout).toMatch(/Database: +postgres:\/\/postgres:\*\*\*@127\.0\.0\.1:\d+\/postgres/)
    expect(run.stdout).not.toContain('hunter2')
    expect(existsSync(join(dir, '.sluice', 'postgres'))).toBe(false)
    const { rows } = await cluster.query<{ slot_name: string }>("SELECT slot_name FROM pg_replication_slots WHERE slot_name = 'cli_test_slot'")
    expect(rows).toHaveLength(1)
    // A request whose body never finishes keeps the graceful close waiting.
    const port = Number(/HTTP: +http:\/\/127\.0\.0\.1:(\d+)/.exec(run.stdout)![1])
    const socket = await unfinishedPost(port, '{"where":')
    run.child.kill('SIGTERM')
    // Signals of one kind do not queue: the second is sent once the first has been taken, and after
    // the window in which a repeat counts as the same request (REPEAT_WINDOW_MS).
    await run.waitFor(/shutting down/)
    await new Promise((r) => setTimeout(r, REPEAT_WINDOW_MS + 200))
    expect(run.child.exitCode).toBeNull()
    run.child.kill('SIGTERM')
    expect(await run.exited).toEqual({ code: 130, signal: null })
    expect(run.stderr).toContain('SIGTERM again, exiting at once')
    socket.destroy()
    await cluster.dropReplicationSlots()
  })
  it('one SIGTERM to the whole process group, delivered again by wrappers, drains once; a later one forces the exit; embedded Postgres stops either way', async () => {
    const dir = await storageDir()
    const postmasterPid = join(dir, '.sluice', 'postgres', 'data', 'postmaster.pid')
    const start = (): Run => sluice(['start', '--port', '0', '--log-level', 'debug'], { cwd: dir, detached: true })

    // A supervisor signals the group, and npm and scripts/run.mjs pass the signal on: three within milliseconds.
    const burst = start()
    await burst.waitFor(/HTTP: +http:\/\/127\.0\.0\.1:\d+/)
    expect(existsSync(postmasterPid)).toBe(true)
    for (let i = 0; i < 3; i++) process.kill(-burst.child.pid!, 'SIGTERM')
    expect(await burst.exited).toEqual({ code: 0, signal: null })
    expect(burst.stderr).not.toContain('exiting at once')
    expect(logs(burst).map((l) => l['msg'])).toContain('stopped')
    expect(existsSync(postmasterPid)).toBe(false)

    // A drain held up by a request body that never ends; the user signals again later: exit at once, Postgres stopped all the same.
    const forced = start()
    const port = Number((await forced.waitFor(/HTTP: +http:\/\/127\.0\.0\.1:(\d+)/))[1])
    const socket = await unfinishedPost(port, '{')
    process.kill(-forced.child.pid!, 'SIGTERM')
    await forced.waitFor(/shutting down/)
    await new Promise((r) => setTimeout(r, REPEAT_WINDOW_MS + 200))
    expect(forced.child.exitCode).toBeNull()
    process.kill(-forced.child.pid!, 'SIGTERM')
    expect(await forced.exited).toEqual({ code: 130, signal: null })
    expect(existsSync(postmasterPid)).toBe(false)
    socket.destroy()
  })
  it('neither the secret (right or wrong) nor the database password reaches a log, at any level, across a lost replication connection', async () => {
    const dir = await storageDir()
    const password = 'pw-never-logged-7f3a'
    const secret = 'secret-never-logged-91c2'
    const wrong = 'wrong-guess-never-logged-5d'
    await cluster.query('CREATE TABLE logged_items (id int PRIMARY KEY, title text)')
    const url = cluster.url.replace('postgres://postgres@', `postgres://postgres:${password}@`)
    const run = sluice(['start', '--port', '0', '--log-level', 'trace', '--slot', 'cli_log_slot', '--publication', 'cli_log_pub', '--secret', secret], {
      cwd: dir,
      env: { DATABASE_URL: url },
    })
    const [, base] = await run.waitFor(/HTTP: +(http:\/\/127\.0\.0\.1:\d+)/)
    const shape = (key: string, value: string): Promise<number> =>
      fetch(`${base}/v1/shape?table=logged_items&offset=-1&${key}=${encodeURIComponent(value)}`).then(async (r) => (await r.arrayBuffer(), r.status))
    expect(await shape('secret', secret)).toBe(200)
    expect(await shape('secret', wrong)).toBe(401)
    expect(await shape('api_secret', wrong)).toBe(401)
    expect(await shape('se%63ret', wrong)).toBe(401)
    // The replication connection is cut: the reconnect path logs its errors.
    await cluster.query("SELECT pg_terminate_backend(pid) FROM pg_stat_replication WHERE application_name <> ''")
    await cluster.query('SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = $1 AND active_pid IS NOT NULL', ['cli_log_slot'])
    await new Promise((r) => setTimeout(r, 1500))
    run.child.kill('SIGTERM')
    expect((await run.exited).code).toBe(0)
    const all = run.stdout + run.stderr
    expect(logs(run).filter((l) => l['msg'] === 'request')).toHaveLength(4)
    expect(logs(run).some((l) => l['msg'] === 'replication disconnected')).toBe(true)
    for (const hidden of [password, secret, wrong]) expect(all).not.toContain(hidden)
    await cluster.dropReplicationSlots()
  })
})
