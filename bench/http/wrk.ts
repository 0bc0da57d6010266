/**
 * The initial-sync load generator: wrk (a C HTTP benchmarking tool, epoll,
 * keep-alive connections, each connection a closed loop: send, read the whole
 * response, send again), in a process of its own. Node's own HTTP client would
 * spend more CPU per 100 KB response than the server under test on this 2-core
 * machine; wrk leaves the server most of a core.
 *
 * A small Lua `done` hook prints the summary as one JSON line; no per-response
 * Lua runs (a `response` hook would make wrk copy every body into Lua).
 */
import { spawnSync } from 'node:child_process'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { runTimed } from '../pipeline/proc.js'

/** apt waits this long for another apt/dpkg (another helper) instead of failing. */
const APT_LOCK_TIMEOUT_S = 300
const MARK = 'WRKJSON '

const DONE_LUA = `done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format('${MARK}{"requests":%d,"bytes":%d,"durationUs":%d,"connectErrors":%d,"readErrors":%d,"writeErrors":%d,"statusErrors":%d,"timeouts":%d,"p50Us":%d,"p95Us":%d,"p99Us":%d,"maxUs":%d,"meanUs":%f}\\n',
    summary.requests, summary.bytes, summary.duration, e.connect, e.read, e.write, e.status, e.timeout,
    latency:percentile(50), latency:percentile(95), latency:percentile(99), latency.max, latency.mean))
end
`

export interface WrkResult {
  readonly requests: number
  readonly bytes: number
  readonly durationUs: number
  readonly connectErrors: number
  readonly readErrors: number
  readonly writeErrors: number
  /** Responses with a status >= 400. */
  readonly statusErrors: number
  readonly timeouts: number
  readonly p50Us: number
  readonly p95Us: number
  readonly p99Us: number
  readonly maxUs: number
  readonly meanUs: number
}

function wrkVersion(): string | undefined {
  const r = spawnSync('wrk', ['--version'], { encoding: 'utf8' })
  if (r.error !== undefined) return undefined
  return /wrk (\S+)/.exec(`${r.stdout}${r.stderr}`)?.[1]
}

/** wrk's version, installing Debian's package first when it is missing (root only). */
export function ensureWrk(): string {
  const found = wrkVersion()
  if (found !== undefined) return found
  if (process.getuid?.() !== 0) throw new Error('wrk is not installed and this is not root: install it with `apt-get install wrk`')
  console.log('installing wrk (apt-get install wrk)')
  const env = { ...process.env, DEBIAN_FRONTEND: 'noninteractive' }
  const apt = ['-o', `DPkg::Lock::Timeout=${APT_LOCK_TIMEOUT_S}`]
  let r = spawnSync('apt-get', [...apt, 'install', '-y', '--no-install-recommends', 'wrk'], { env, stdio: 'inherit' })
  if (r.status !== 0) {
    spawnSync('apt-get', [...apt, 'update'], { env, stdio: 'inherit' })
    r = spawnSync('apt-get', [...apt, 'install', '-y', '--no-install-recommends', 'wrk'], { env, stdio: 'inherit' })
  }
  const version = wrkVersion()
  if (version === undefined) throw new Error('apt-get install wrk failed')
  return version
}

export interface WrkOptions {
  readonly url: string
  readonly connections: number
  readonly threads: number
  readonly seconds: number
  /** A request slower than this counts as a timeout (wrk's default of 2 s is short for 2,000 clients). */
  readonly timeoutSeconds: number
}

export async function runWrk(options: WrkOptions): Promise<WrkResult> {
  const dir = mkdtempSync(join(tmpdir(), 'sluice-wrk-'))
  try {
    const script = join(dir, 'done.lua')
    writeFileSync(script, DONE_LUA)
    const args = [
      '-c',
      String(options.connections),
      '-t',
      String(Math.min(options.threads, options.connections)),
      '-d',
      `${options.seconds}s`,
      '--timeout',
      `${options.timeoutSeconds}s`,
      '-s',
      script,
      options.url,
    ]
    const r = await runTimed('wrk', args)
    const line = r.stdout.split('\n').find((l) => l.startsWith(MARK))
    if (r.code !== 0 || line === undefined) throw new Error(`wrk ${args.join(' ')} failed (${r.code}): ${r.stdout}${r.stderr}`)
    return JSON.parse(line.slice(MARK.length)) as WrkResult
  } finally {
    rmSync(dir, { recursive: true, force: true })
  }
}
