/**
 * Where a pipeline run's CPU time goes: summarises the V8 CPU profiles that
 * BENCH_CPU_PROF=<dir> makes the pipeline processes write (one per timed run,
 * covering exactly its timed window, and one per registration) into
 * `<dir>/summary.md`.
 *
 * Each sample is charged to a stage by the nearest frame on its stack that
 * belongs to a known module (so `writeBuffer (native)` called from the storage
 * engine's `writeSync` counts as storage, a TextEncoder call from the change
 * encoder as encoding): replication (server/{src,dist}/replication:
 * the pipeline runs the built code), pg wire protocol (pg, pg-protocol: the replication
 * stream's and the queries' messages), routing (router, shape index, where evaluation),
 * encoding (change encoder, protocol), shapes (shape manager, snapshots,
 * catalog), storage (@sluice/storage and fs calls), GC, idle, other.
 *
 * Usage: `node --import tsx pipeline/profile-summary.ts <dir>` (run.ts calls it
 * at the end of a profiled run).
 */
import { readFileSync, readdirSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'

interface CallFrame {
  readonly functionName: string
  readonly url: string
  readonly lineNumber: number
}

interface ProfileNode {
  readonly id: number
  readonly callFrame: CallFrame
  readonly children?: readonly number[]
}

interface CpuProfile {
  readonly startTime: number
  /** Added by worker.ts: the timed window, on the samples' clock (µs); samples outside it are ignored. */
  readonly sluiceWindow?: readonly [number, number]
  readonly nodes: readonly ProfileNode[]
  readonly samples: readonly number[]
  readonly timeDeltas: readonly number[]
}

const STAGES: ReadonlyArray<readonly [string, RegExp]> = [
  ['routing', /server\/(src|dist)\/(shapes\/(router|shape-index)\.[jt]s|where\/)/],
  ['encoding', /server\/(src|dist)\/shapes\/(change-encoder|line-scratch)\.[jt]s|packages\/protocol\//],
  ['shapes (manager, snapshots, catalog)', /server\/(src|dist)\/shapes\//],
  ['replication (pgoutput, assembly, client)', /server\/(src|dist)\/replication\//],
  ['pg wire protocol (pg, pg-protocol)', /pg-protocol|\/pg@|pg-cursor|pg-pool/],
  ['storage', /packages\/storage\//],
]

const FS_NATIVES = new Set(['writeBuffer', 'writeBuffers', 'writeString', 'open', 'close', 'fstat', 'fdatasync', 'fsync', 'read', 'mkdir', 'rename', 'unlink', 'readdir', 'lstat', 'stat'])

function classify(nodes: Map<number, ProfileNode>, parents: Map<number, number>, id: number): string {
  const leaf = nodes.get(id)!.callFrame
  if (leaf.functionName === '(garbage collector)') return 'GC'
  if (leaf.functionName === '(idle)') return 'idle'
  if (leaf.functionName === '(program)') return 'other'
  for (let at: number | undefined = id; at !== undefined; at = parents.get(at)) {
    const url = nodes.get(at)!.callFrame.url
    for (const [stage, pattern] of STAGES) if (pattern.test(url)) return stage
  }
  if (leaf.url === '' && FS_NATIVES.has(leaf.functionName)) return 'storage'
  return 'other'
}

function shortUrl(url: string): string {
  return url
    .replace(/.*node_modules\/\.pnpm\/([^/]+)\/.*/, '$1')
    .replace(/.*\/work\/main\//, '')
    .replace(/^file:\/\/.*\/(packages|bench)\//, '$1/')
}

export function summarise(file: string, top = 25): string {
  const profile = JSON.parse(readFileSync(file, 'utf8')) as CpuProfile
  const nodes = new Map(profile.nodes.map((n) => [n.id, n]))
  const parents = new Map<number, number>()
  for (const n of profile.nodes) for (const c of n.children ?? []) parents.set(c, n.id)
  const selfUs = new Map<number, number>()
  const [from, to] = profile.sluiceWindow ?? [Number.NEGATIVE_INFINITY, Number.POSITIVE_INFINITY]
  let at = profile.startTime
  for (let i = 0; i < profile.samples.length; i++) {
    const delta = profile.timeDeltas[i] ?? 0
    at += delta
    if (at < from || at > to) continue
    const id = profile.samples[i]!
    selfUs.set(id, (selfUs.get(id) ?? 0) + delta)
  }
  let total = 0
  const byStage = new Map<string, number>()
  const byFn = new Map<string, number>()
  for (const [id, us] of selfUs) {
    total += us
    const stage = classify(nodes, parents, id)
    byStage.set(stage, (byStage.get(stage) ?? 0) + us)
    const f = nodes.get(id)!.callFrame
    const name = `${f.functionName || '(anonymous)'}${f.url ? ` (${shortUrl(f.url)})` : ''}`
    byFn.set(name, (byFn.get(name) ?? 0) + us)
  }
  const busy = total - (byStage.get('idle') ?? 0)
  const row = ([name, us]: [string, number]): string => `| ${name} | ${(us / 1000).toFixed(0)} ms | ${((100 * us) / total).toFixed(1)}% |`
  return [
    `### ${file.split('/').pop()}`,
    '',
    `${(total / 1000).toFixed(0)} ms of main-thread samples, ${(busy / 1000).toFixed(0)} ms not idle (thread-pool work such as fdatasync is not in a main-thread profile).`,
    '',
    '| stage | self time | share |',
    '|---|--:|--:|',
    ...[...byStage].sort((a, b) => b[1] - a[1]).map(row),
    '',
    '| function (self time) | self time | share |',
    '|---|--:|--:|',
    ...[...byFn].sort((a, b) => b[1] - a[1]).slice(0, top).map(row),
    '',
  ].join('\n')
}

export function summariseDir(dir: string): string {
  const files = readdirSync(dir)
    .filter((f) => f.endsWith('.cpuprofile'))
    .sort()
  const text = [`# CPU profiles in ${dir}`, '', ...files.map((f) => summarise(join(dir, f)))].join('\n')
  writeFileSync(join(dir, 'summary.md'), text)
  return text
}

if (process.argv[1] !== undefined && import.meta.url.endsWith(process.argv[1].split('/').pop()!)) {
  const dir = process.argv[2]
  if (dir === undefined) {
    console.error('usage: profile-summary.ts <dir>')
    process.exit(2)
  }
  summariseDir(dir)
  console.log(`wrote ${join(dir, 'summary.md')}`)
}
