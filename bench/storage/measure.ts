/**
 * Timing with tinybench, in interleaved rounds. The contenders of a workload
 * (its engines, or engine x variant) do not run as one long block each: every
 * contender runs a short tinybench task per round, in an order that rotates
 * from round to round, and the samples of all rounds are pooled. On a shared
 * machine a burst of outside load then lands on every contender alike instead
 * of on whichever one happened to be running.
 */
import { readFileSync } from 'node:fs'
import { setTimeout as sleep } from 'node:timers/promises'
import { Bench } from 'tinybench'
import type { EngineName } from './engines.js'
import type { Measurement } from './report.js'
import { formatMs } from './report.js'

/** Bytes handled by timed iterations only (warm-up iterations are not counted). */
export class ByteCounter {
  bytes = 0
  ops = 0
  counting = false

  add(bytes: number): void {
    if (!this.counting) return
    this.bytes += bytes
    this.ops++
  }
}

export interface Contender {
  /** The workload this contender's measurement belongs to. */
  readonly workload: string
  readonly engine: EngineName
  /** One timed op. Reports its bytes to `counter`, here or in `beforeEach`. */
  readonly fn: () => unknown
  /** Untimed preparation of the next op. */
  readonly beforeEach?: () => void
  /**
   * Untimed, once, after the wait for a quiet machine and before the first
   * round: touches what the timed ops will read, so that every engine starts
   * from a warm page cache (a machine that pages out idle memory may have
   * evicted some of it during the wait).
   */
  readonly prime?: () => unknown
  readonly counter: ByteCounter
}

export interface Budget {
  readonly rounds: number
  /** Timed milliseconds per engine, over all rounds. */
  readonly time: number
  /** Minimum timed ops per engine and round. */
  readonly iterations: number
  /** Warm-up, in the first round only. */
  readonly warmupTime: number
  readonly warmupIterations: number
}

/**
 * Linux pressure stall information for the CPU: microseconds during which some
 * runnable task waited for a CPU, since boot (undefined where PSI is missing).
 */
function cpuStallMicros(): number | undefined {
  try {
    const line = readFileSync('/proc/pressure/cpu', 'utf8').split('\n')[0] ?? ''
    const total = /total=(\d+)/.exec(line)?.[1]
    return total === undefined ? undefined : Number(total)
  } catch {
    return undefined
  }
}

function cpuStallAvg10(): number | undefined {
  try {
    const line = readFileSync('/proc/pressure/cpu', 'utf8').split('\n')[0] ?? ''
    const avg = /avg10=([\d.]+)/.exec(line)?.[1]
    return avg === undefined ? undefined : Number(avg)
  } catch {
    return undefined
  }
}

/** KiB the kernel has read from block devices since boot (`pgpgin`), machine-wide. */
function diskReadKiB(): number | undefined {
  try {
    const v = /^pgpgin (\d+)$/m.exec(readFileSync('/proc/vmstat', 'utf8'))?.[1]
    return v === undefined ? undefined : Number(v)
  } catch {
    return undefined
  }
}

/** What the machine did over a stretch of the run: CPU pressure and disk reads. */
export class SystemMeter {
  private readonly stall0 = cpuStallMicros()
  private readonly disk0 = diskReadKiB()
  private readonly t0 = performance.now()

  /** Share of wall time some task waited for a CPU, in percent (undefined without PSI). */
  cpuPressurePercent(): number | undefined {
    const stall = cpuStallMicros()
    if (stall === undefined || this.stall0 === undefined) return undefined
    return ((stall - this.stall0) / 1000 / (performance.now() - this.t0)) * 100
  }

  /** MiB read from disk meanwhile: 0 shows the reads were served by the page cache. */
  diskReadMiB(): number | undefined {
    const disk = diskReadKiB()
    if (disk === undefined || this.disk0 === undefined) return undefined
    return (disk - this.disk0) / 1024
  }
}

/**
 * On a shared machine, waits (at most `maxMs`) until the CPU pressure of the last
 * 10 s drops below `percent`, so a workload does not start in someone else's
 * burst. Returns the milliseconds waited.
 */
export async function waitForQuiet(maxMs: number, percent = 10): Promise<number> {
  const started = performance.now()
  while (performance.now() - started < maxMs) {
    const avg = cpuStallAvg10()
    if (avg === undefined || avg < percent) break
    await sleep(1000)
  }
  return performance.now() - started
}

function gc(): void {
  ;(globalThis as { gc?: () => void }).gc?.()
}

function quantile(sorted: readonly number[], q: number): number {
  if (sorted.length === 0) return Number.NaN
  const at = (sorted.length - 1) * q
  const lo = Math.floor(at)
  const hi = Math.ceil(at)
  return sorted[lo]! + (sorted[hi]! - sorted[lo]!) * (at - lo)
}

/**
 * Runs the contenders in interleaved rounds. `quietWaitMs`: how long to wait, at
 * most, for outside CPU load to settle before starting.
 */
export async function runRounds(contenders: readonly Contender[], budget: Budget, quietWaitMs: number): Promise<Measurement[]> {
  const waited = quietWaitMs > 0 ? await waitForQuiet(quietWaitMs) : 0
  if (waited >= 1000) console.log(`  (waited ${(waited / 1000).toFixed(0)} s for the CPU to settle)`)
  for (const c of contenders) await c.prime?.()
  const meter = new SystemMeter()
  const samples = new Map<Contender, number[]>(contenders.map((c) => [c, []]))
  // Disk reads while each contender's tasks ran (machine-wide, but one task runs at a time).
  const diskMiB = new Map<Contender, number | undefined>(contenders.map((c) => [c, 0]))
  for (let round = 0; round < budget.rounds; round++) {
    for (let i = 0; i < contenders.length; i++) {
      const c = contenders[(i + round) % contenders.length]!
      gc()
      const warm = round === 0 && budget.warmupIterations > 0
      const bench = new Bench({
        name: c.workload,
        time: budget.time / budget.rounds,
        iterations: budget.iterations,
        warmup: warm,
        warmupTime: budget.warmupTime,
        warmupIterations: budget.warmupIterations,
        timestampProvider: 'hrtimeNow',
        retainSamples: true,
        throws: true,
      })
      bench.add(`${c.workload}/${c.engine}`, c.fn, {
        beforeAll(mode) {
          c.counter.counting = mode === 'run'
        },
        afterAll() {
          c.counter.counting = false
        },
        ...(c.beforeEach ? { beforeEach: c.beforeEach } : {}),
      })
      const disk = new SystemMeter()
      await bench.run()
      const read = disk.diskReadMiB()
      const sum = diskMiB.get(c)
      diskMiB.set(c, read === undefined || sum === undefined ? undefined : sum + read)
      const result = bench.tasks[0]!.result
      if (result.state !== 'completed') {
        throw new Error(`${c.workload}/${c.engine}: ${result.state === 'errored' ? result.error.message : result.state}`)
      }
      // A loop, not push(...spread): raw 1-row appends retain hundreds of thousands of samples.
      const pooled = samples.get(c)!
      for (const x of result.latency.samples ?? []) pooled.push(x)
    }
  }
  const pressure = meter.cpuPressurePercent()
  return contenders.map((c) => {
    const s = samples.get(c)!.sort((a, b) => a - b)
    const n = s.length
    const mean = s.reduce((a, b) => a + b, 0) / n
    const sd = n > 1 ? Math.sqrt(s.reduce((a, b) => a + (b - mean) ** 2, 0) / (n - 1)) : 0
    const bytesPerOp = c.counter.ops > 0 ? c.counter.bytes / c.counter.ops : 0
    const opsPerSec = 1000 / mean
    const m: Measurement = {
      workload: c.workload,
      engine: c.engine,
      samples: n,
      meanMs: mean,
      medianMs: quantile(s, 0.5),
      p99Ms: quantile(s, 0.99),
      // Normal approximation of the 95% interval of the mean, relative to it.
      rmePercent: n > 1 ? (196 * sd) / Math.sqrt(n) / mean : Number.NaN,
      opsPerSec,
      bytesPerOp,
      mbPerSec: (bytesPerOp * opsPerSec) / 1e6,
      cpuPressurePercent: pressure === undefined ? null : Math.round(pressure * 10) / 10,
      diskReadMiB: (() => {
        const d = diskMiB.get(c)
        return d === undefined ? null : Math.round(d * 10) / 10
      })(),
    }
    console.log(
      `  ${`${c.engine}${c.workload.endsWith('concurrent') ? ' conc' : c.workload.endsWith('sequential') ? ' seq' : ''}`.padEnd(11)} median ${formatMs(m.medianMs).padStart(9)}  p99 ${formatMs(m.p99Ms).padStart(9)}  ` +
        `${m.opsPerSec.toFixed(1).padStart(10)} ops/s  ${m.mbPerSec.toFixed(1).padStart(8)} MB/s  (${n} samples, ±${m.rmePercent.toFixed(1)}%)`,
    )
    return m
  })
}
