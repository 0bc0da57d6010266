/**
 * Varnish for the CDN benchmark: Debian's package (installed with apt-get the
 * way bench/http/wrk.ts installs wrk), and a private varnishd in the
 * foreground on a free port, its working directory and VCL in a temp dir, no
 * system configuration read, no privilege separation (`-j none`), stopped by
 * `stop()` or when this process exits.
 */
import { type ChildProcess, spawn, spawnSync } from 'node:child_process'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { connect } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { freePort } from '@sluice/test-utils'

const APT_LOCK_TIMEOUT_S = 300
const READY_TIMEOUT_MS = 30_000

function varnishVersion(): string | undefined {
  const r = spawnSync('varnishd', ['-V'], { encoding: 'utf8' })
  if (r.error !== undefined) return undefined
  return /varnish-(\S+)/.exec(`${r.stdout}${r.stderr}`)?.[1]
}

/** varnishd's version, installing Debian's package first when it is missing (root only). */
export function ensureVarnish(): string {
  const found = varnishVersion()
  if (found !== undefined) return found
  if (process.getuid?.() !== 0) throw new Error('varnish is not installed and this is not root: install it with `apt-get install varnish`')
  console.log('installing varnish (apt-get install varnish)')
  const env = { ...process.env, DEBIAN_FRONTEND: 'noninteractive' }
  const apt = ['-o', `DPkg::Lock::Timeout=${APT_LOCK_TIMEOUT_S}`]
  // The package's own service is not started in a container without systemd; the benchmark runs its own varnishd.
  let r = spawnSync('apt-get', [...apt, 'install', '-y', '--no-install-recommends', 'varnish'], { env, stdio: 'inherit' })
  if (r.status !== 0) {
    spawnSync('apt-get', [...apt, 'update'], { env, stdio: 'inherit' })
    r = spawnSync('apt-get', [...apt, 'install', '-y', '--no-install-recommends', 'varnish'], { env, stdio: 'inherit' })
  }
  const version = varnishVersion()
  if (version === undefined) throw new Error('apt-get install varnish failed')
  return version
}

export interface VarnishOptions {
  /** The whole VCL text. */
  readonly vcl: string
  /** `-p name=value` run-time parameters. */
  readonly params: Readonly<Record<string, string>>
  /** Object storage, e.g. `malloc,256m`. */
  readonly storage: string
  /** Where the working directory (with the shared-memory log varnishd writes for every request) is made; the system's temp dir by default. */
  readonly workBase?: string
}

export interface VarnishServer {
  readonly port: number
  readonly url: string
  readonly pid: number
  /** varnishstat's counters (MAIN.*), e.g. `MAIN.backend_req`. */
  stats(): Record<string, number>
  stop(): Promise<void>
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

export async function startVarnish(options: VarnishOptions): Promise<VarnishServer> {
  const dir = mkdtempSync(join(options.workBase ?? tmpdir(), 'sluice-varnish-'))
  const vclPath = join(dir, 'sluice.vcl')
  writeFileSync(vclPath, options.vcl)
  const port = await freePort()
  const workDir = join(dir, 'work')
  const params = Object.entries(options.params).flatMap(([k, v]) => ['-p', `${k}=${v}`])
  const child: ChildProcess = spawn(
    'varnishd',
    ['-F', '-j', 'none', '-n', workDir, '-a', `127.0.0.1:${port}`, '-f', vclPath, '-s', options.storage, '-T', 'none', ...params],
    { stdio: ['ignore', 'pipe', 'pipe'] },
  )
  let output = ''
  const keep = (c: Buffer): void => {
    output = (output + c.toString('utf8')).slice(-8000)
  }
  child.stdout!.on('data', keep)
  child.stderr!.on('data', keep)
  let gone = false
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()))
  void exited.then(() => (gone = true))
  const onExit = (): void => {
    child.kill('SIGKILL')
  }
  process.once('exit', onExit)
  const deadline = Date.now() + READY_TIMEOUT_MS
  while (!gone && Date.now() < deadline && !(await canConnect(port))) await sleep(50)
  if (gone || Date.now() >= deadline) {
    child.kill('SIGKILL')
    await exited
    rmSync(dir, { recursive: true, force: true })
    throw new Error(`varnishd did not start on ${port}: ${output}`)
  }
  return {
    port,
    url: `http://127.0.0.1:${port}`,
    pid: child.pid!,
    stats() {
      const r = spawnSync('varnishstat', ['-n', workDir, '-1', '-j'], { encoding: 'utf8' })
      const out: Record<string, number> = {}
      if (r.status !== 0) return out
      const parsed = JSON.parse(r.stdout) as { counters?: Record<string, { value: number }> } & Record<string, { value?: number }>
      const counters = parsed.counters ?? parsed
      for (const [name, c] of Object.entries(counters)) if (typeof c === 'object' && c !== null && typeof c.value === 'number') out[name] = c.value
      return out
    },
    async stop() {
      process.off('exit', onExit)
      if (!gone) {
        child.kill('SIGTERM')
        const timer = setTimeout(() => child.kill('SIGKILL'), 10_000)
        await exited
        clearTimeout(timer)
      }
      rmSync(dir, { recursive: true, force: true })
    },
  }
}
