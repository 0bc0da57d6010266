/** Number and text formatting shared by the report's sections. Pure. */
import type { LoadNote } from '../pipeline/report.js'
import { median } from '../pipeline/stats.js'
import type { Machine } from '../storage/report.js'

export { median }

export function num(x: number, digits = 0): string {
  return Number.isFinite(x) ? x.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits }) : '-'
}

/** 66,933 -> "66.9k"; below 10,000 the number itself. */
export function compact(x: number): string {
  if (!Number.isFinite(x)) return '-'
  if (Math.abs(x) >= 1e6) return `${(x / 1e6).toFixed(2)}M`
  if (Math.abs(x) >= 1e4) return `${(x / 1e3).toFixed(1)}k`
  return num(x, Math.abs(x) < 10 ? 2 : 0)
}

export function ms(x: number): string {
  if (!Number.isFinite(x)) return '-'
  if (x < 1) return `${(x * 1000).toFixed(x < 0.01 ? 2 : 1)} µs`
  if (x < 10) return `${x.toFixed(2)} ms`
  if (x < 100) return `${x.toFixed(1)} ms`
  if (x < 10_000) return `${num(x)} ms`
  return `${(x / 1000).toFixed(1)} s`
}

export function ratio(x: number): string {
  if (!Number.isFinite(x)) return '-'
  return `${x >= 100 ? x.toFixed(0) : x >= 10 ? x.toFixed(1) : x.toFixed(2)}x`
}

export function percent(x: number | null | undefined, digits = 0): string {
  return x === null || x === undefined || !Number.isFinite(x) ? '-' : `${x.toFixed(digits)}%`
}

export function mib(bytes: number | null | undefined): string {
  return bytes === null || bytes === undefined || !Number.isFinite(bytes) ? '-' : `${num(bytes / 2 ** 20, bytes < 10 * 2 ** 20 ? 1 : 0)} MiB`
}

/** The range of the runs behind a median, "min-max" in the given format; one run has no spread. */
export function spread(values: readonly number[], format: (x: number) => string): string {
  const finite = values.filter((v) => Number.isFinite(v))
  if (finite.length === 0) return '-'
  if (finite.length === 1) return `one run`
  return `${format(Math.min(...finite))} – ${format(Math.max(...finite))}`
}

export function plural(count: number, one: string, many = `${one}s`): string {
  return `${num(count)} ${count === 1 ? one : many}`
}

/** The machine block every benchmark's JSON carries (see `storage/report.ts`). */
export function machineLines(m: Machine, extra: readonly string[] = []): string[] {
  return [
    `${m.nproc} CPUs (${m.cpu}), ${m.memoryGiB} GiB RAM, ${m.os}, Node ${m.node}`,
    ...(m.speed === undefined ? [] : [`speed: \`JSON.parse\` of a fixed 2 MB body at ${num(m.speed.jsonParseMBps)} MB/s (\`machineSpeed\`: read absolute times next to it)`]),
    `data on ${m.filesystem}`,
    `run started ${m.date.replace('T', ' ').replace(/\.\d+Z$/, ' UTC')}`,
    ...extra,
  ]
}

/** Load averages at the moments a run noted, as one line. */
export function loadLine(loads: readonly LoadNote[]): string {
  if (loads.length === 0) return 'load averages: not recorded'
  return `load average (1 min): ${loads.map((l) => `${l.loadavg[0]?.toFixed(1) ?? '-'} (${l.label})`).join(', ')}`
}

/** CPU pressure (Linux PSI: share of wall time some task waited for a CPU) over the timed runs, as one line. */
export function pressureLine(values: readonly (number | null)[]): string {
  const known = values.filter((v): v is number => v !== null && Number.isFinite(v))
  if (known.length === 0) return 'CPU pressure: not recorded'
  return `CPU pressure (share of time some task waited for a CPU) over the timed runs: median ${percent(median(known))}, ${spread(known, (x) => percent(x))}`
}
