/** Small statistics for the pipeline benchmark. */

export function quantile(values: readonly number[], q: number): number {
  if (values.length === 0) return Number.NaN
  const sorted = [...values].sort((a, b) => a - b)
  const at = (sorted.length - 1) * q
  const lo = Math.floor(at)
  const hi = Math.ceil(at)
  return sorted[lo]! + (sorted[hi]! - sorted[lo]!) * (at - lo)
}

export function median(values: readonly number[]): number {
  return quantile(values, 0.5)
}

export function mean(values: readonly number[]): number {
  return values.length === 0 ? Number.NaN : values.reduce((a, b) => a + b, 0) / values.length
}

/** Samples a process's CPU time while it runs, so the last reading survives its exit. */
export class CpuWatch {
  private timer: NodeJS.Timeout | undefined
  private last: number | undefined
  private first: number | undefined

  constructor(private readonly read: () => number | undefined, private readonly everyMs = 50) {}

  start(): this {
    const tick = (): void => {
      const v = this.read()
      if (v !== undefined) {
        this.first ??= v
        this.last = v
      }
    }
    tick()
    this.timer = setInterval(tick, this.everyMs)
    return this
  }

  /** CPU ms between the first and the last reading (or the total if `fromZero`). */
  stop(fromZero = false): number | undefined {
    clearInterval(this.timer)
    const v = this.read()
    if (v !== undefined) this.last = v
    if (this.last === undefined) return undefined
    return fromZero ? this.last : this.last - (this.first ?? 0)
  }
}
