/**
 * CPU control groups for the keep-up phase's services variant: Postgres (with
 * its load) in one group, the sync engine in another, each with the default
 * weight, as where both run as services on one machine (systemd units, Docker
 * containers, Kubernetes pods each get a group of their own). Without groups
 * the kernel's autogroup scheduling gives every session an equal share, and
 * Postgres puts each backend in a session of its own (setsid at fork): eight
 * pgbench clients then outweigh the sync engine eight to one, a placement no
 * deployment chooses.
 *
 * Linux only, and only where this process may create groups under a mounted
 * cpu controller (cgroup v1's `cpu` hierarchy, or the root of a v2 hierarchy
 * with the cpu controller available): usually as root.
 */
import { existsSync, mkdirSync, readFileSync, rmdirSync, writeFileSync } from 'node:fs'
import { descendants } from './proc.js'

export interface CpuGroups {
  /** Postgres, every process it forks, pgbench and the orchestrator. */
  readonly db: string
  /** The process that streams the slot: the pipeline, or pg_recvlogical in the control. */
  readonly sync: string
  /** Where this process was, to go back to. */
  readonly home: string
}

const V1_MOUNTS = ['/sys/fs/cgroup/cpu', '/sys/fs/cgroup/cpu,cpuacct']
const V2_ROOT = '/sys/fs/cgroup'

/** Creates the two groups, or says why it cannot. */
export function cpuGroups(): CpuGroups | { readonly reason: string } {
  let own: string
  try {
    own = readFileSync('/proc/self/cgroup', 'utf8')
  } catch {
    return { reason: 'no /proc/self/cgroup (not Linux)' }
  }
  const v1 = V1_MOUNTS.find((m) => existsSync(`${m}/cpu.shares`))
  let base: string
  let home: string
  if (v1 !== undefined) {
    // "4:cpu,cpuacct:/some/path": the line of the hierarchy holding the cpu controller.
    const path = own.split('\n').find((l) => l.split(':')[1]?.split(',').includes('cpu'))?.split(':')[2] ?? '/'
    base = v1
    home = `${v1}${path === '/' ? '' : path}`
  } else if (existsSync(`${V2_ROOT}/cgroup.controllers`) && readFileSync(`${V2_ROOT}/cgroup.controllers`, 'utf8').split(/\s+/).includes('cpu')) {
    // Under the root, which alone may hold processes while its children have controllers.
    base = V2_ROOT
    const path = own.split('\n').find((l) => l.startsWith('0::'))?.slice(3) ?? '/'
    home = `${V2_ROOT}${path === '/' ? '' : path}`
    try {
      writeFileSync(`${V2_ROOT}/cgroup.subtree_control`, '+cpu')
    } catch (err) {
      return { reason: `cannot enable the cpu controller (${(err as Error).message})` }
    }
  } else {
    return { reason: 'no cpu controller mounted (cgroup v1 cpu, or v2 with cpu available)' }
  }
  const groups = { db: `${base}/sluice_bench_db`, sync: `${base}/sluice_bench_sync`, home }
  try {
    for (const g of [groups.db, groups.sync]) mkdirSync(g, { recursive: true })
  } catch (err) {
    return { reason: `cannot create cpu groups under ${base} (${(err as Error).message})` }
  }
  return groups
}

/** Moves a process, every thread of it, into `group`; false when it has gone. */
export function joinGroup(pid: number, group: string): boolean {
  try {
    writeFileSync(`${group}/cgroup.procs`, String(pid))
    return true
  } catch (err) {
    if (!existsSync(`/proc/${pid}`)) return false
    throw new Error(`cannot move process ${pid} into ${group}: ${(err as Error).message}`)
  }
}

/** Moves `root` first (what it forks from then on follows it), then everything below it. */
export function joinGroupTree(root: number, group: string): void {
  if (!joinGroup(root, group)) throw new Error(`process ${root} is gone`)
  for (const pid of descendants(root)) joinGroup(pid, group)
}

/** Every process still in a group goes home, then the groups go; a group that will not go is left (and named). */
export function dropGroups(groups: CpuGroups): string[] {
  const left: string[] = []
  for (const g of [groups.db, groups.sync]) {
    let pids: number[] = []
    try {
      pids = readFileSync(`${g}/cgroup.procs`, 'utf8').split('\n').filter((x) => x !== '').map(Number)
    } catch {
      continue
    }
    for (const pid of pids) joinGroup(pid, groups.home)
    try {
      rmdirSync(g)
    } catch {
      left.push(g)
    }
  }
  return left
}
