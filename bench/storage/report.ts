/**
 * Turning measurements into the three outputs of a run: the console table,
 * `results/storage.json` and `results/storage.md` (machine, method, table,
 * target checks). Pure formatting apart from `machineInfo`.
 */
import { readFileSync } from 'node:fs'
import os from 'node:os'
import type { EngineName } from './engines.js'
import { ENGINES } from './engines.js'

export interface Measurement {
  readonly workload: string
  readonly engine: EngineName
  readonly samples: number
  readonly meanMs: number
  readonly medianMs: number
  readonly p99Ms: number
  readonly rmePercent: number
  /** 1000 / mean latency. */
  readonly opsPerSec: number
  readonly bytesPerOp: number
  /** bytesPerOp * opsPerSec, in 10^6 bytes per second. */
  readonly mbPerSec: number
  /**
   * Share of the workload's wall time during which some task waited for a CPU
   * (Linux PSI, whole machine): high values mean the machine was oversubscribed,
   * by other work or, with 200 async readers, by the benchmark's own threads.
   */
  readonly cpuPressurePercent: number | null
  /** MiB the machine read from disk while this engine's timed tasks ran; null without /proc/vmstat. */
  readonly diskReadMiB: number | null
}

export interface WorkloadInfo {
  readonly id: string
  readonly title: string
  /** What one timed operation is. */
  readonly op: string
}

export interface Machine {
  readonly nproc: number
  readonly cpu: string
  readonly memoryGiB: number
  readonly node: string
  readonly os: string
  readonly dataDir: string
  readonly filesystem: string
  readonly date: string
  /** `machineSpeed()` when the run started (absent from runs made before it was recorded). */
  readonly speed?: MachineSpeed
}

export function machineInfo(dataDir: string): Machine {
  return {
    nproc: os.availableParallelism(),
    cpu: os.cpus()[0]?.model.trim() ?? 'unknown',
    memoryGiB: Math.round(os.totalmem() / 2 ** 30),
    node: process.version,
    os: `${os.type()} ${os.release()} ${os.arch()}`,
    dataDir,
    filesystem: filesystemOf(dataDir),
    date: new Date().toISOString(),
    speed: machineSpeed(),
  }
}

/**
 * One fixed piece of CPU work timed on this machine, recorded with every run:
 * `JSON.parse` of the same 2 MB body of change messages (the client's largest
 * cost, and object-making like a restart's), seven times, the median in 10^6
 * bytes per second. Two (virtual) machines of the same description have
 * differed twofold for this code; an absolute figure (a start in seconds, a
 * download in seconds) is read next to this one.
 */
export interface MachineSpeed {
  readonly jsonParseMBps: number
}

export function machineSpeed(): MachineSpeed {
  const body = speedBody()
  const times: number[] = []
  for (let i = 0; i < 7; i++) {
    const t0 = performance.now()
    const parsed: unknown = JSON.parse(body)
    times.push(performance.now() - t0)
    if (!Array.isArray(parsed)) throw new Error('the speed probe parsed no array')
  }
  times.sort((a, b) => a - b)
  return { jsonParseMBps: Math.round(body.length / 1e6 / (times[3]! / 1000)) }
}

/** About 2 MB: 5,000 messages shaped like the client benchmark's rows (a key, eleven text values, headers). */
function speedBody(): string {
  const lines: string[] = []
  for (let i = 1; i <= 5000; i++) {
    const value = {
      id: String(i),
      title: `Item ${i}`,
      owner: `user${i % 997}`,
      status: String(i % 5),
      score: String((i * 7919) % 100000),
      active: i % 3 === 0 ? 'true' : 'false',
      created_at: '2025-01-01 00:00:00+00',
      updated_at: '2025-01-01 00:00:00.123456+00',
      doc: JSON.stringify({ tags: [`t${i % 10}`, `t${i % 7}`], priority: i % 4 }),
      seq: '0',
      stamp_ns: '0',
    }
    lines.push(JSON.stringify({ key: `"public"."items"/"${i}"`, value, headers: { operation: 'insert', relation: ['public', 'items'] } }))
  }
  return `[${lines.join(',\n')}]`
}

/** The type and device of the mount holding `dir` (Linux; "unknown" elsewhere). */
function filesystemOf(dir: string): string {
  try {
    let best: { point: string; text: string } | undefined
    for (const line of readFileSync('/proc/mounts', 'utf8').split('\n')) {
      const [device, point, type] = line.split(' ')
      if (!device || !point || !type) continue
      if ((dir === point || dir.startsWith(point.endsWith('/') ? point : `${point}/`)) && (!best || point.length > best.point.length)) {
        best = { point, text: `${type} on ${device} (mounted at ${point})` }
      }
    }
    return best?.text ?? 'unknown'
  } catch {
    return 'unknown'
  }
}

export function formatMs(ms: number): string {
  if (!Number.isFinite(ms)) return '-'
  if (ms < 1) return `${(ms * 1000).toFixed(ms < 0.01 ? 2 : 1)} µs`
  if (ms < 1000) return `${ms.toFixed(ms < 10 ? 2 : 1)} ms`
  return `${(ms / 1000).toFixed(2)} s`
}

function formatOps(ops: number): string {
  if (ops >= 10_000) return `${(ops / 1000).toFixed(1)}k`
  if (ops >= 100) return ops.toFixed(0)
  return ops.toFixed(ops >= 10 ? 1 : 2)
}

function formatRatio(r: number | undefined): string {
  if (r === undefined || !Number.isFinite(r)) return '-'
  return `${r >= 100 ? r.toFixed(0) : r >= 10 ? r.toFixed(1) : r.toFixed(2)}x`
}

export function find(results: readonly Measurement[], workload: string, engine: EngineName): Measurement | undefined {
  return results.find((m) => m.workload === workload && m.engine === engine)
}

/** Ours' throughput over the engine's: above 1 means ours is faster. */
export function oursOver(results: readonly Measurement[], workload: string, engine: EngineName): number | undefined {
  const ours = find(results, workload, 'ours')
  const other = find(results, workload, engine)
  if (!ours || !other) return undefined
  return ours.opsPerSec / other.opsPerSec
}

export interface Row {
  readonly workload: string
  readonly engine: string
  readonly median: string
  readonly p99: string
  readonly opsPerSec: string
  readonly mbPerSec: string
  readonly oursVs: string
  readonly samples: number
  readonly rme: string
  readonly cpuPressure: string
}

export function tableRows(workloads: readonly WorkloadInfo[], results: readonly Measurement[]): Row[] {
  const rows: Row[] = []
  for (const w of workloads) {
    for (const engine of ENGINES) {
      const m = find(results, w.id, engine)
      if (!m) continue
      rows.push({
        workload: w.title,
        engine,
        median: formatMs(m.medianMs),
        p99: formatMs(m.p99Ms),
        opsPerSec: formatOps(m.opsPerSec),
        mbPerSec: m.mbPerSec.toFixed(m.mbPerSec < 10 ? 2 : 1),
        oursVs: engine === 'ours' ? '' : formatRatio(oursOver(results, w.id, engine)),
        samples: m.samples,
        rme: Number.isFinite(m.rmePercent) ? `±${m.rmePercent.toFixed(m.rmePercent < 10 ? 1 : 0)}%` : '-',
        cpuPressure: m.cpuPressurePercent === null ? '-' : `${m.cpuPressurePercent.toFixed(0)}%`,
      })
    }
  }
  return rows
}

export function markdownTable(rows: readonly Row[]): string {
  const head = '| workload | engine | median | p99 | ops/s | MB/s | ours vs it | samples | mean ±95% | CPU pressure |'
  const rule = '|---|---|--:|--:|--:|--:|--:|--:|--:|--:|'
  const body = rows.map(
    (r) =>
      `| ${r.workload} | ${r.engine} | ${r.median} | ${r.p99} | ${r.opsPerSec} | ${r.mbPerSec} | ${r.oursVs} | ${r.samples} | ${r.rme} | ${r.cpuPressure} |`,
  )
  return [head, rule, ...body].join('\n')
}

export interface TargetCheck {
  readonly target: string
  readonly figure: string
  readonly met: boolean | undefined
}

/** The storage engine's targets (issue items 14-15), each with the figure it was judged on. */
export function targetChecks(results: readonly Measurement[], appendSizes: readonly number[], readChunks: readonly number[]): TargetCheck[] {
  const checks: TargetCheck[] = []
  {
    const s = oursOver(results, 'append-1000', 'sqlite')
    const l = oursOver(results, 'append-1000', 'lmdb')
    checks.push({
      target: '1000-row appends at least 10x faster than SQLite and than LMDB',
      figure: `${formatRatio(s)} SQLite, ${formatRatio(l)} LMDB`,
      met: s === undefined || l === undefined ? undefined : s >= 10 && l >= 10,
    })
  }
  for (const rows of appendSizes) {
    const ours = find(results, `append-${rows}`, 'ours')
    const raw = find(results, `append-${rows}`, 'raw')
    const share = ours && raw ? ours.mbPerSec / raw.mbPerSec : undefined
    checks.push({
      target: `${rows}-row appends at least 70% of raw write MB/s`,
      figure: ours && raw ? `${pct(share)} (${ours.mbPerSec.toFixed(1)} vs ${raw.mbPerSec.toFixed(1)} MB/s)` : '-',
      met: share === undefined ? undefined : share >= 0.7,
    })
  }
  for (const n of readChunks) {
    const ours = find(results, `read-${n}`, 'ours')
    const raw = find(results, `read-${n}`, 'raw')
    const share = ours && raw ? ours.mbPerSec / raw.mbPerSec : undefined
    checks.push({
      target: `${n}-chunk reads at least 80% of raw pread MB/s`,
      figure: ours && raw ? `${pct(share)} (${ours.mbPerSec.toFixed(0)} vs ${raw.mbPerSec.toFixed(0)} MB/s)` : '-',
      met: share === undefined ? undefined : share >= 0.8,
    })
  }
  for (const n of readChunks) {
    const conc = find(results, `fanout-${n}-concurrent`, 'ours')
    const seq = find(results, `fanout-${n}-sequential`, 'ours')
    const ratio = conc && seq ? conc.meanMs / seq.meanMs : undefined
    checks.push({
      target: `200 concurrent readers of ${n} chunks take at most 1.2x the time of the same 200 reads in sequence`,
      figure: conc && seq ? `${formatRatio(ratio)} (${formatMs(conc.meanMs)} vs ${formatMs(seq.meanMs)})` : '-',
      met: ratio === undefined ? undefined : ratio <= 1.2,
    })
  }
  return checks
}

function pct(x: number | undefined): string {
  return x === undefined ? '-' : `${(x * 100).toFixed(0)}%`
}

export function verdict(met: boolean | undefined): string {
  return met === undefined ? 'not measured' : met ? 'met' : 'missed'
}

