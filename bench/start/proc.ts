/**
 * What the start and takeover benchmarks need of the server processes they
 * spawn: the compiled CLI built, a clean environment for it, its health, and
 * its CPU time and resident memory from /proc (Linux).
 */
import { spawnSync } from 'node:child_process'
import { chmodSync, mkdtempSync, readFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'

export const ROOT = fileURLToPath(new URL('../..', import.meta.url))
/** The `sluice` command, as `npm start` runs it. */
export const BIN = join(ROOT, 'packages/server/bin/sluice.js')

/** User + system CPU time of a live process, every thread, from /proc (clock ticks of 10 ms). */
export function cpuTimeMs(pid: number): number {
  try {
    const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').replace(/^.*\) /s, '').split(' ')
    return (Number(fields[11]) + Number(fields[12])) * 10
  } catch {
    return Number.NaN
  }
}

/** Resident memory of a live process, from /proc. */
export function rssKiB(pid: number): number {
  try {
    const m = /^VmRSS:\s+(\d+) kB$/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))
    return m === null ? Number.NaN : Number(m[1])
  } catch {
    return Number.NaN
  }
}

/** The same cached build `npm start` runs: a no-op when nothing changed. */
export function buildCompiled(): void {
  const turbo = join(ROOT, 'node_modules/.bin/turbo')
  const r = spawnSync(turbo, ['run', 'build', '--filter=@sluice/server...', '--output-logs=errors-only'], {
    cwd: ROOT,
    stdio: 'inherit',
    env: { ...process.env, TURBO_TELEMETRY_DISABLED: '1' },
  })
  if (r.status !== 0) throw new Error(`build failed (exit ${r.status})`)
}

/** This process's environment without the server's own settings, which would change what is measured. */
export function serverEnv(): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...process.env }
  for (const k of Object.keys(env)) if (k.startsWith('SLUICE_') || k === 'NODE_OPTIONS') delete env[k]
  return env
}

/** Whether `url` answers 200 (false while nothing listens there). */
export async function healthy(url: string): Promise<boolean> {
  try {
    const response = await fetch(url)
    await response.arrayBuffer()
    return response.status === 200
  } catch {
    return false
  }
}

/**
 * A temp directory for a fixture's cluster and stores, open to others: run as
 * root, the cluster runs as `postgres`, which must reach its data directory
 * inside (mkdtemp makes it 0700).
 */
export function fixtureTempDir(prefix: string): string {
  const dir = mkdtempSync(join(tmpdir(), prefix))
  chmodSync(dir, 0o755)
  return dir
}
