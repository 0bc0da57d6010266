import { existsSync, readdirSync } from 'node:fs'
import { mkdir, rm } from 'node:fs/promises'
import { dirname, join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import { ensureDirAtomically } from './atomic-dir.js'
import { withFileLock } from './file-lock.js'
import { runCommand, runCommandSync, type RunResult } from './run-command.js'

export interface NginxBinary {
  readonly path: string
  /** As `nginx -v` prints it, e.g. "1.22.1". */
  readonly version: string
  readonly source: 'binary option' | 'SLUICE_NGINX' | 'system' | 'extracted' | 'installed'
}

export interface FindNginxOptions {
  /** Use this nginx executable (wins over SLUICE_NGINX and the search). */
  readonly binary?: string
  /** Download and unpack (or install) nginx when none is found; default true. */
  readonly provision?: boolean
  /** Where to unpack Debian's nginx; default `nginxCacheDir()`. */
  readonly cacheDir?: string
  /** Skip SLUICE_NGINX, the system paths and PATH (to exercise provisioning on a machine that has nginx). */
  readonly ignoreInstalled?: boolean
}

const SYSTEM_PATHS = ['/usr/sbin/nginx', '/usr/local/sbin/nginx', '/usr/local/nginx/sbin/nginx']
/** Debian's package: one binary with the proxy, cache and upstream modules built in. */
const DEBIAN_PACKAGE = 'nginx'
/** apt waits this long for another apt/dpkg (another helper, unattended-upgrades) instead of failing. */
const APT_LOCK_TIMEOUT_S = 300

/** The repository root (holds pnpm-workspace.yaml), where `.tools/` caches downloaded tools. */
function repoRoot(): string | undefined {
  let dir = dirname(fileURLToPath(import.meta.url))
  for (;;) {
    if (existsSync(join(dir, 'pnpm-workspace.yaml'))) return dir
    const parent = dirname(dir)
    if (parent === dir) return undefined
    dir = parent
  }
}

/** Where an unpacked Debian nginx lives: `<repo>/.tools/nginx/` (git-ignored), else under /tmp. */
export function nginxCacheDir(): string {
  const root = repoRoot()
  return root === undefined ? '/tmp/sluice-nginx-cache' : join(root, '.tools', 'nginx')
}

function versionOf(path: string): string | undefined {
  try {
    const out = runCommandSync(path, ['-v'])
    // nginx prints its version on stderr.
    const found = /nginx\/(\S+)/.exec(`${out.stderr}${out.stdout}`)
    return out.code === 0 && found?.[1] !== undefined ? found[1] : undefined
  } catch {
    return undefined
  }
}

function onPath(): string | undefined {
  for (const dir of (process.env['PATH'] ?? '').split(':')) {
    if (dir === '') continue
    const candidate = join(dir, 'nginx')
    if (existsSync(candidate)) return candidate
  }
  return undefined
}

function unpackedBinary(root: string): string {
  return join(root, 'usr', 'sbin', 'nginx')
}

function describe(step: string, result: RunResult): string {
  return `${step} exited ${result.code ?? result.signal}: ${`${result.stdout}${result.stderr}`.trim().split('\n').slice(-8).join('\n')}`
}

const isRoot = (): boolean => process.getuid?.() === 0

/**
 * `apt-get download` + `dpkg-deb -x`: Debian's own binary, unpacked into the
 * cache dir. Preferred over `apt-get install` because it needs no root, touches
 * nothing in /etc, and starts no system nginx on port 80 (the package's
 * postinst would). Returns the unpacked tree, or why it failed.
 */
async function unpackDebianNginx(cacheDir: string, failures: string[]): Promise<string | undefined> {
  const root = join(cacheDir, 'root')
  try {
    return await ensureDirAtomically(
      root,
      (dir) => versionOf(unpackedBinary(dir)) !== undefined,
      async (tmp) => {
        const lockOption = ['-o', `DPkg::Lock::Timeout=${APT_LOCK_TIMEOUT_S}`]
        let download = await runCommand('apt-get', [...lockOption, 'download', DEBIAN_PACKAGE], { cwd: tmp })
        // A stale package list names a version the mirror no longer has: refresh it once (root only).
        if (download.code !== 0 && isRoot()) {
          const update = await runCommand('apt-get', [...lockOption, 'update'])
          if (update.code !== 0) failures.push(describe('apt-get update', update))
          download = await runCommand('apt-get', [...lockOption, 'download', DEBIAN_PACKAGE], { cwd: tmp })
        }
        if (download.code !== 0) throw new Error(describe('apt-get download nginx', download))
        const deb = readdirSync(tmp).find((name) => name.endsWith('.deb'))
        if (deb === undefined) throw new Error('apt-get download nginx left no .deb')
        const unpack = await runCommand('dpkg-deb', ['-x', join(tmp, deb), tmp])
        if (unpack.code !== 0) throw new Error(describe('dpkg-deb -x', unpack))
        await rm(join(tmp, deb))
        if (versionOf(unpackedBinary(tmp)) === undefined) {
          const run = runCommandSync(unpackedBinary(tmp), ['-v'])
          // Typically a shared library (libssl3, libpcre2) the machine lacks; a real install pulls those in.
          throw new Error(describe('the unpacked nginx -v', run))
        }
      },
    )
  } catch (error) {
    failures.push(`unpacking Debian's nginx into ${root}: ${(error as Error).message}`)
    return undefined
  }
}

async function aptInstall(failures: string[]): Promise<string | undefined> {
  if (!isRoot()) {
    failures.push('apt-get install: not root')
    return undefined
  }
  const result = await runCommand('env', [
    'DEBIAN_FRONTEND=noninteractive',
    'apt-get',
    '-o',
    `DPkg::Lock::Timeout=${APT_LOCK_TIMEOUT_S}`,
    'install',
    '-y',
    '--no-install-recommends',
    DEBIAN_PACKAGE,
  ])
  if (result.code !== 0) {
    failures.push(describe('apt-get install nginx', result))
    return undefined
  }
  return SYSTEM_PATHS.find((path) => versionOf(path) !== undefined)
}

async function locate(options: FindNginxOptions): Promise<NginxBinary> {
  const explicit: [string, NginxBinary['source']] | undefined =
    options.binary !== undefined
      ? [options.binary, 'binary option']
      : process.env['SLUICE_NGINX'] && options.ignoreInstalled !== true
        ? [process.env['SLUICE_NGINX'], 'SLUICE_NGINX']
        : undefined
  if (explicit !== undefined) {
    const [path, source] = explicit
    const version = versionOf(path)
    if (version === undefined) throw new Error(`startNginx: ${source} ${path} is not a working nginx (\`${path} -v\` failed)`)
    return { path, version, source }
  }
  for (const path of options.ignoreInstalled === true ? [] : [...SYSTEM_PATHS, onPath()]) {
    if (path === undefined) continue
    const version = versionOf(path)
    if (version !== undefined) return { path: resolve(path), version, source: 'system' }
  }
  const cacheDir = options.cacheDir ?? nginxCacheDir()
  const cached = unpackedBinary(join(cacheDir, 'root'))
  const cachedVersion = versionOf(cached)
  if (cachedVersion !== undefined) return { path: cached, version: cachedVersion, source: 'extracted' }
  if (options.provision === false) throw new Error('startNginx: no nginx found and provisioning is off')

  await mkdir(cacheDir, { recursive: true })
  // One provisioner at a time: apt fails on a held lock, and parallel downloads are wasted work.
  return withFileLock(join(cacheDir, '.provision.lock'), async () => {
    const failures: string[] = []
    const root = await unpackDebianNginx(cacheDir, failures)
    if (root !== undefined) {
      const path = unpackedBinary(root)
      return { path, version: versionOf(path)!, source: 'extracted' as const }
    }
    const installed = options.ignoreInstalled === true ? undefined : await aptInstall(failures)
    if (installed !== undefined) return { path: installed, version: versionOf(installed)!, source: 'installed' as const }
    throw new Error(
      'startNginx: no nginx binary. Looked at SLUICE_NGINX, ' +
        `${SYSTEM_PATHS.join(', ')}, PATH and ${cached}; then tried to provision one:\n- ${failures.join('\n- ')}\n` +
        'Install it (`apt-get install nginx`) or set SLUICE_NGINX to an nginx executable.',
    )
  })
}

const found = new Map<string, Promise<NginxBinary>>()

/**
 * Finds an nginx executable, provisioning Debian's when the machine has none:
 * the `binary` option, SLUICE_NGINX, the usual system paths and PATH, a copy
 * unpacked earlier into `.tools/nginx/`, then (under a file lock)
 * `apt-get download` + `dpkg-deb -x` into that cache, then `apt-get install`
 * as root. Memoised per process.
 */
export function findNginx(options: FindNginxOptions = {}): Promise<NginxBinary> {
  const key = JSON.stringify([options.binary, options.provision, options.cacheDir, options.ignoreInstalled, process.env['SLUICE_NGINX']])
  let pending = found.get(key)
  if (pending === undefined) {
    pending = locate(options)
    found.set(key, pending)
    pending.catch(() => found.delete(key))
  }
  return pending
}
