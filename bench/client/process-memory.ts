/**
 * A measured client process's view of its own memory and CPU: forced GC,
 * process.memoryUsage, the kernel's peak RSS (VmHWM) and its reset, a sampler
 * of heapUsed, and CPU time since a mark. Shared by the client benchmark's
 * worker and the large-shape benchmark's worker (bench/large).
 */
import { readFileSync, writeFileSync } from 'node:fs'

/** How often heapUsed and RSS are sampled (the RSS peak itself comes from the kernel). */
const SAMPLE_EVERY_MS = 20

export interface MemoryNow {
  readonly rss: number
  readonly heapUsed: number
  readonly heapTotal: number
  readonly external: number
  readonly arrayBuffers: number
}

/** Two full collections (run with --expose-gc): what is left is what something holds. */
export function gc(): void {
  const g = (globalThis as { gc?: () => void }).gc
  if (g === undefined) throw new Error('run with --expose-gc')
  g()
  g()
}

export function memory(): MemoryNow {
  const m = process.memoryUsage()
  return { rss: m.rss, heapUsed: m.heapUsed, heapTotal: m.heapTotal, external: m.external, arrayBuffers: m.arrayBuffers }
}

/** The kernel's peak RSS of this process since the last reset, in bytes. */
export function peakRss(): number | null {
  const kb = /^VmHWM:\s+(\d+) kB/m.exec(readFileSync('/proc/self/status', 'utf8'))?.[1]
  return kb === undefined ? null : Number(kb) * 1024
}

/** Resets VmHWM to the current RSS (Linux >= 4.0: writing 5 to clear_refs). */
export function resetPeakRss(): boolean {
  try {
    writeFileSync('/proc/self/clear_refs', '5')
    return true
  } catch {
    return false
  }
}

export class MemorySampler {
  peakHeapUsed = 0
  peakRssSampled = 0
  samples = 0
  private timer: NodeJS.Timeout | undefined

  start(): this {
    this.sample()
    this.timer = setInterval(() => this.sample(), SAMPLE_EVERY_MS)
    return this
  }

  sample(): void {
    const m = process.memoryUsage()
    this.samples++
    if (m.heapUsed > this.peakHeapUsed) this.peakHeapUsed = m.heapUsed
    if (m.rss > this.peakRssSampled) this.peakRssSampled = m.rss
  }

  stop(): void {
    clearInterval(this.timer)
    this.sample()
  }
}

export function cpuMs(since: NodeJS.CpuUsage): { userMs: number; systemMs: number } {
  const u = process.cpuUsage(since)
  return { userMs: u.user / 1000, systemMs: u.system / 1000 }
}
