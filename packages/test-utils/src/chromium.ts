import { existsSync } from 'node:fs'
import { withFileLock } from './file-lock.js'
import { runCommand, runCommandSync, type RunResult } from './run-command.js'
import { assertServiceAllowed } from './test-scope.js'

export interface ChromiumBinary {
  readonly path: string
  /** As `chromium --version` prints it, e.g. "150.0.7871.100". */
  readonly version: string
  readonly source: 'binary option' | 'SLUICE_CHROMIUM' | 'system' | 'installed'
}

export interface FindChromiumOptions {
  /** Use this executable (wins over SLUICE_CHROMIUM and the search). */
  readonly binary?: string
  /** `apt-get install chromium` (as root) when none is found; default true. */
  readonly provision?: boolean
}

const SYSTEM_PATHS = ['/usr/bin/chromium', '/usr/bin/chromium-browser', '/usr/bin/google-chrome', '/usr/bin/google-chrome-stable']
/** apt waits this long for another apt/dpkg (another test process, another helper) instead of failing. */
const APT_LOCK_TIMEOUT_S = 600
/** One provisioner per machine: two parallel `apt-get install`s would fight over dpkg's lock. */
const PROVISION_LOCK = '/tmp/sluice-chromium-provision.lock'

/**
 * Flags for a headless Chromium in a container or CI box: no sandbox (we run
 * as root), no GPU, no background traffic that would show in request logs,
 * /tmp instead of a small /dev/shm. QUIC is off so every request is plain HTTP
 * that an HTTP cache in the path can see.
 */
export const CHROMIUM_ARGS: readonly string[] = [
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
  '--disable-dev-shm-usage',
]

function versionOf(path: string): string | undefined {
  if (!existsSync(path)) return undefined
  try {
    const out = runCommandSync(path, ['--version'])
    const found = /(\d+\.\d+\.\d+\.\d+)/.exec(out.stdout)
    return out.code === 0 && found?.[1] !== undefined ? found[1] : undefined
  } catch {
    return undefined
  }
}

function describe(step: string, result: RunResult): string {
  return `${step} exited ${result.code ?? result.signal}: ${`${result.stdout}${result.stderr}`.trim().split('\n').slice(-8).join('\n')}`
}

function installed(): ChromiumBinary | undefined {
  for (const path of SYSTEM_PATHS) {
    const version = versionOf(path)
    if (version !== undefined) return { path, version, source: 'system' }
  }
  return undefined
}

async function aptInstall(): Promise<ChromiumBinary> {
  const lock = ['-o', `DPkg::Lock::Timeout=${APT_LOCK_TIMEOUT_S}`]
  const install = () => runCommand('env', ['DEBIAN_FRONTEND=noninteractive', 'apt-get', ...lock, 'install', '-y', '--no-install-recommends', 'chromium'])
  let result = await install()
  // A fresh machine has no package lists, and a stale one names versions the mirror dropped.
  if (result.code !== 0) {
    const update = await runCommand('apt-get', [...lock, 'update'])
    if (update.code !== 0) throw new Error(`findChromium: ${describe('apt-get update', update)}`)
    result = await install()
  }
  if (result.code !== 0) throw new Error(`findChromium: ${describe('apt-get install chromium', result)}`)
  const found = installed()
  if (found === undefined) throw new Error(`findChromium: apt-get installed chromium, but none of ${SYSTEM_PATHS.join(', ')} runs`)
  return { ...found, source: 'installed' }
}

async function locate(options: FindChromiumOptions): Promise<ChromiumBinary> {
  const explicit: [string, ChromiumBinary['source']] | undefined =
    options.binary !== undefined ? [options.binary, 'binary option'] : process.env['SLUICE_CHROMIUM'] ? [process.env['SLUICE_CHROMIUM'], 'SLUICE_CHROMIUM'] : undefined
  if (explicit !== undefined) {
    const [path, source] = explicit
    const version = versionOf(path)
    if (version === undefined) throw new Error(`findChromium: ${source} ${path} is not a working Chromium (\`${path} --version\` failed)`)
    return { path, version, source }
  }
  const found = installed()
  if (found !== undefined) return found
  if (options.provision === false) throw new Error('findChromium: no Chromium found and provisioning is off')
  if (process.getuid?.() !== 0) {
    throw new Error(`findChromium: no Chromium at ${SYSTEM_PATHS.join(', ')}; install it (\`apt-get install chromium\`) or set SLUICE_CHROMIUM`)
  }
  // Another process may have installed it while we waited for the lock.
  return withFileLock(PROVISION_LOCK, async () => installed() ?? (await aptInstall()), { timeoutMs: 15 * 60_000 })
}

const found = new Map<string, Promise<ChromiumBinary>>()

/**
 * Finds a Chromium to drive with playwright-core (never `playwright install`,
 * whose download host is unreachable here): the `binary` option,
 * SLUICE_CHROMIUM, the usual system paths, then, as root and under a file lock
 * so parallel test files install it once, Debian's package via apt-get
 * (about 50 s). Memoised per process.
 */
export function findChromium(options: FindChromiumOptions = {}): Promise<ChromiumBinary> {
  assertServiceAllowed('Chromium')
  const key = JSON.stringify([options.binary, options.provision, process.env['SLUICE_CHROMIUM']])
  let pending = found.get(key)
  if (pending === undefined) {
    pending = locate(options)
    found.set(key, pending)
    pending.catch(() => found.delete(key))
  }
  return pending
}
