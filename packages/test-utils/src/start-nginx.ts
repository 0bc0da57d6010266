import { spawn, type ChildProcess } from 'node:child_process'
import { mkdir, readFile, writeFile } from 'node:fs/promises'
import { connect } from 'node:net'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { onProcessExit } from './exit-hooks.js'
import { freePort } from './free-port.js'
import { findNginx, type NginxBinary } from './nginx-binary.js'
import { tempDir, type TempDir } from './temp-dir.js'
import { assertServiceAllowed } from './test-scope.js'

/** What a configuration is written against: this instance's port and directories. */
export interface NginxConfigContext {
  /** The port the configuration must `listen` on (127.0.0.1). */
  readonly port: number
  readonly upstreamPort: number | undefined
  /** This instance's private directory (removed on stop). */
  readonly dir: string
  /** An empty directory for `proxy_cache_path`. */
  readonly cacheDir: string
}

export interface StartNginxOptions {
  /** Where the default configuration proxies to, and what `config` receives. */
  readonly upstreamPort?: number
  /**
   * The `http { }` body: server blocks, `proxy_cache_path`, upstreams. Without
   * it, a plain (uncached) reverse proxy to `upstreamPort`.
   */
  readonly config?: string | ((context: NginxConfigContext) => string)
  /** An nginx executable to use instead of the search (see `findNginx`). */
  readonly binary?: string
}

/** One line of the access log, written when nginx finished answering a request. */
export interface NginxAccessEntry {
  readonly method: string
  /** The request URI as the client sent it, query string included. */
  readonly uri: string
  readonly status: number
  /** `$upstream_cache_status`: HIT, MISS, EXPIRED, STALE, UPDATING, REVALIDATED, BYPASS, or '' when no cache was involved. */
  readonly cacheStatus: string
  /** `$upstream_status`: '' when the origin was not asked; several comma-separated codes on retries. */
  readonly upstreamStatus: string
  readonly requestTimeS: number
  readonly bytesSent: number
}

export interface NginxServer {
  readonly port: number
  /** The master process (its worker is its child): for CPU accounting over the process tree. */
  readonly pid: number
  /** `http://127.0.0.1:<port>` */
  readonly url: string
  readonly dir: string
  readonly configPath: string
  readonly accessLogPath: string
  readonly errorLogPath: string
  readonly binary: NginxBinary
  readonly stopped: boolean
  /** The access log so far, parsed. */
  accessLog(): Promise<NginxAccessEntry[]>
  errorLog(): Promise<string>
  /** Fast shutdown (open connections are cut), then the directory is removed. Idempotent. */
  stop(): Promise<void>
}

/** A field per NginxAccessEntry member; `escape=json` keeps any URI a valid JSON string. */
const ACCESS_LOG_FORMAT =
  `'{"method":"$request_method","uri":"$request_uri","status":$status,"cacheStatus":"$upstream_cache_status",` +
  `"upstreamStatus":"$upstream_status","requestTimeS":$request_time,"bytesSent":$bytes_sent}'`
const START_ATTEMPTS = 5
const READY_TIMEOUT_MS = 20_000
const STOP_TIMEOUT_MS = 10_000
const PORT_TAKEN = /Address already in use/
/** Each cache-collapsed client and its upstream request hold a connection each; tests run hundreds. */
const WORKER_CONNECTIONS = 4096

/**
 * Watches from outside our process group: if we die without stopping nginx
 * (even by SIGKILL), our end of its stdin closes and it stops nginx and removes
 * the directory; after a normal stop we tell it so and it exits.
 */
const WATCHDOG_SCRIPT = `read -r line
[ "$line" = stopped ] && exit 0
kill -TERM "$SLUICE_NGINX_PID" 2>/dev/null
sleep 2
kill -KILL "$SLUICE_NGINX_PID" 2>/dev/null
rm -rf "$SLUICE_NGINX_DIR"
`

function defaultConfig({ port, upstreamPort }: NginxConfigContext): string {
  if (upstreamPort === undefined) throw new Error('startNginx: give `config` or `upstreamPort`')
  return `server {
  listen 127.0.0.1:${port};
  location / {
    proxy_pass http://127.0.0.1:${upstreamPort};
    proxy_http_version 1.1;
    proxy_set_header Connection "";
  }
}`
}

/**
 * The main file: everything that would otherwise default to a system path
 * (pid, logs, lock, every temp dir) points into `dir`, so nothing outside it is
 * read or written and any number of instances run side by side.
 */
function mainConfig(dir: string, httpBody: string): string {
  const tmp = join(dir, 'tmp')
  // As root the workers would otherwise drop to `nobody`, which cannot enter our 0700 temp dir.
  const user = process.getuid?.() === 0 ? 'user root root;\n' : ''
  return `${user}daemon off;
master_process on;
worker_processes 1;
worker_rlimit_nofile ${WORKER_CONNECTIONS * 2};
pid ${join(dir, 'nginx.pid')};
lock_file ${join(dir, 'nginx.lock')};
error_log ${join(dir, 'error.log')} info;

events {
  worker_connections ${WORKER_CONNECTIONS};
}

http {
  client_body_temp_path ${join(tmp, 'body')};
  proxy_temp_path ${join(tmp, 'proxy')};
  fastcgi_temp_path ${join(tmp, 'fastcgi')};
  uwsgi_temp_path ${join(tmp, 'uwsgi')};
  scgi_temp_path ${join(tmp, 'scgi')};
  log_format sluice_test escape=json ${ACCESS_LOG_FORMAT};
  access_log ${join(dir, 'access.log')} sluice_test;

${httpBody}
}
`
}

function canConnect(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect({ host: '127.0.0.1', port })
    socket.once('connect', () => {
      socket.destroy()
      resolve(true)
    })
    socket.once('error', () => resolve(false))
  })
}

function startWatchdog(pid: number, dir: string): ChildProcess {
  const child = spawn('/bin/sh', ['-c', WATCHDOG_SCRIPT], {
    cwd: '/',
    detached: true,
    stdio: ['pipe', 'ignore', 'ignore'],
    env: { PATH: process.env['PATH'] ?? '/usr/bin:/bin', SLUICE_NGINX_PID: String(pid), SLUICE_NGINX_DIR: dir },
  })
  child.on('error', () => {})
  child.stdin?.on('error', () => {})
  child.unref()
  ;(child.stdin as unknown as { unref?: () => void } | null)?.unref?.()
  return child
}

interface Launched {
  readonly child: ChildProcess
  readonly exited: Promise<void>
}

async function launch(binary: string, dir: string, configPath: string, errorLogPath: string, port: number): Promise<Launched | string> {
  // -e: the log for errors before the config is read (Debian's compiled-in default is stderr, others use /var/log).
  const child = spawn(binary, ['-p', `${dir}/`, '-c', configPath, '-e', errorLogPath], {
    cwd: dir,
    stdio: ['ignore', 'ignore', 'pipe'],
  })
  let stderr = ''
  child.stderr?.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk))
  let gone = false
  const exited = new Promise<void>((resolve) => {
    child.once('exit', () => {
      gone = true
      resolve()
    })
    child.once('error', (error) => {
      stderr += String(error)
      gone = true
      resolve()
    })
  })
  const deadline = Date.now() + READY_TIMEOUT_MS
  while (!gone && Date.now() < deadline) {
    if (await canConnect(port)) return { child, exited }
    await sleep(25)
  }
  if (!gone) child.kill('SIGKILL')
  await exited
  const log = await readFile(errorLogPath, 'utf8').catch(() => '')
  return `${stderr}${log}`.trim() || `nginx did not listen on ${port} within ${READY_TIMEOUT_MS} ms`
}

class Nginx implements NginxServer {
  stopped = false
  private stopping: Promise<void> | undefined

  constructor(
    readonly binary: NginxBinary,
    readonly port: number,
    private readonly temp: TempDir,
    readonly configPath: string,
    private readonly launched: Launched,
    private readonly watchdog: ChildProcess,
    private readonly unregister: () => void,
  ) {}

  get url(): string {
    return `http://127.0.0.1:${this.port}`
  }

  get pid(): number {
    return this.launched.child.pid!
  }

  get dir(): string {
    return this.temp.path
  }

  get accessLogPath(): string {
    return join(this.dir, 'access.log')
  }

  get errorLogPath(): string {
    return join(this.dir, 'error.log')
  }

  async accessLog(): Promise<NginxAccessEntry[]> {
    const text = await readFile(this.accessLogPath, 'utf8').catch(() => '')
    return text
      .split('\n')
      .filter((line) => line !== '')
      .map((line) => JSON.parse(line) as NginxAccessEntry)
  }

  errorLog(): Promise<string> {
    return readFile(this.errorLogPath, 'utf8').catch(() => '')
  }

  stop(): Promise<void> {
    this.stopping ??= this.shutDown()
    return this.stopping
  }

  private async shutDown(): Promise<void> {
    const { child, exited } = this.launched
    // SIGTERM is nginx's fast shutdown; SIGQUIT would wait for held long-polls.
    child.kill('SIGTERM')
    const timedOut = await Promise.race([exited.then(() => false), sleep(STOP_TIMEOUT_MS, true, { ref: false })])
    if (timedOut) {
      child.kill('SIGKILL')
      await exited
    }
    this.stopped = true
    this.watchdog.stdin?.end('stopped\n')
    this.unregister()
    await this.temp.remove()
  }
}

/**
 * Starts a private nginx on a free 127.0.0.1 port: the configuration goes into
 * a temp dir, nginx runs in the foreground (`daemon off`) with `-p`/`-c` so no
 * system configuration is read, and the call returns once it accepts
 * connections. Stopped by `stop()`, at process exit, or by a watchdog if the
 * test process is killed.
 */
export async function startNginx(options: StartNginxOptions): Promise<NginxServer> {
  assertServiceAllowed('nginx')
  const binary = await findNginx(options.binary === undefined ? {} : { binary: options.binary })
  let failure = ''
  for (let attempt = 0; attempt < START_ATTEMPTS; attempt++) {
    const temp = await tempDir('nginx')
    const dir = temp.path
    const cacheDir = join(dir, 'cache')
    await mkdir(cacheDir)
    await mkdir(join(dir, 'tmp'))
    const port = await freePort()
    const context: NginxConfigContext = { port, upstreamPort: options.upstreamPort, dir, cacheDir }
    const config = options.config ?? defaultConfig
    const configPath = join(dir, 'nginx.conf')
    await writeFile(configPath, mainConfig(dir, typeof config === 'function' ? config(context) : config))
    const errorLogPath = join(dir, 'error.log')
    const launched = await launch(binary.path, dir, configPath, errorLogPath, port)
    if (typeof launched !== 'string') {
      const pid = launched.child.pid!
      const watchdog = startWatchdog(pid, dir)
      const unregister = onProcessExit(() => {
        try {
          process.kill(pid, 'SIGTERM')
        } catch {
          // Already gone.
        }
      })
      return new Nginx(binary, port, temp, configPath, launched, watchdog, unregister)
    }
    await temp.remove()
    failure = launched
    // Someone took the port between our probe and nginx's bind: try another.
    if (!PORT_TAKEN.test(launched)) break
  }
  throw new Error(`startNginx: nginx (${binary.path}) did not start:\n${failure}`)
}
