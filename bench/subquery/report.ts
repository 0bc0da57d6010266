/**
 * The subquery benchmark's results file (`results/subquery.json`), as `run.ts`
 * writes it and the combined report reads it, and its markdown.
 */
import type { Machine } from '../storage/report.js'
import type { Mode } from './schema.js'
import type { Layout } from './view-memory.js'

export interface Latency {
  /** `move-in`: insert into members → the user's client has the list's todos; `insert`: insert into todos → the list's client has it. */
  readonly kind: 'move-in' | 'insert'
  readonly trials: number
  readonly p50Ms: number
  readonly p99Ms: number
  readonly maxMs: number
  readonly missed: number
}

export interface Burst {
  readonly transactions: number
  readonly rowsPerTransaction: number
  readonly changes: number
  /** The writer's time for the burst (Postgres's side). */
  readonly writeMs: number
  /** From the burst's start until the server's durable LSN passed its last commit. */
  readonly routedMs: number
  readonly changesPerSecond: number
  readonly writeChangesPerSecond: number
  /** The server process's CPU (user + system) over the burst, per 1,000 changes. */
  readonly serverCpuMsPerKChange: number | null
  /** Share of the burst's time some task waited for a CPU (/proc/pressure/cpu), when the kernel tells. */
  readonly cpuPressurePercent?: number | null
}

export interface Run {
  readonly mode: Mode
  readonly shapes: number
  /** Lists per user (the size of each subquery shape's view). */
  readonly perUser: number
  readonly createSeconds: number
  readonly baseRssBytes: number
  readonly rssBytes: number
  readonly baseHeapBytes: number
  readonly heapBytes: number
  /** `sluice_subquery_view_entries` with every shape made. */
  readonly viewEntries: number
  readonly burst: Burst
  readonly latency: Latency
  readonly load1: number
}

export interface Report {
  readonly date: string
  readonly machine: Machine
  readonly quick: boolean
  readonly sizes: readonly number[]
  readonly runs: readonly Run[]
  /** Memory per view entry of the server's own view and index classes, measured apart (view-memory.ts). */
  readonly viewMemory?: readonly Layout[]
}

export const rssPerShape = (r: Run): number => (r.rssBytes - r.baseRssBytes) / r.shapes
export const heapPerShape = (r: Run): number => (r.heapBytes - r.baseHeapBytes) / r.shapes

export function find(report: Report, mode: Mode, shapes: number): Run | undefined {
  return report.runs.find((r) => r.mode === mode && r.shapes === shapes)
}

/** Bytes per view entry: the wide views' extra memory over their extra entries, at the same shape count. */
export function perEntry(report: Report): { heapBytes: number; rssBytes: number; entries: number } | undefined {
  const wide = report.runs.find((r) => r.mode === 'subquery-wide')
  const narrow = wide === undefined ? undefined : find(report, 'subquery', wide.shapes)
  if (wide === undefined || narrow === undefined || wide.viewEntries <= narrow.viewEntries) return undefined
  const entries = wide.viewEntries - narrow.viewEntries
  return {
    entries,
    heapBytes: (wide.heapBytes - wide.baseHeapBytes - (narrow.heapBytes - narrow.baseHeapBytes)) / entries,
    rssBytes: (wide.rssBytes - wide.baseRssBytes - (narrow.rssBytes - narrow.baseRssBytes)) / entries,
  }
}

const kib = (b: number): string => `${(b / 1024).toFixed(1)} KiB`
const f0 = (x: number): string => Math.round(x).toLocaleString('en-US')

export function markdown(report: Report): string {
  const lines = [
    `# Subquery shapes: routing, move-in latency and memory (${report.date}${report.quick ? ', QUICK' : ''})`,
    '',
    `Outer \`todos\`, inner \`members(user_id, list_id)\`; subquery shapes \`list_id IN (SELECT list_id FROM members WHERE user_id = $1)\` (one per user) next to as many \`list_id = $1\` shapes (one per list), each set on a fresh \`sluice start\` process. Throughput: back-to-back transactions updating random todos, from the burst's start until the server's durable LSN passed the last commit. Latency: a member row inserted → a live client of that user's shape has the list's todos (move-in), beside a todo inserted → a live client of its list's shape has it. Memory: median RSS and V8 heap after the shapes were made, minus before.`,
    '',
    '| shapes | mode | view entries | changes/s routed | (Postgres wrote) | server CPU ms / 1k changes | latency p50 | p99 | RSS / shape | heap / shape | load |',
    '|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|',
    ...report.runs.map(
      (r) =>
        `| ${f0(r.shapes)} | ${r.mode}${r.mode === 'equality' ? '' : ` (${r.perUser}/user)`} | ${f0(r.viewEntries)} | ${f0(r.burst.changesPerSecond)} | ${f0(r.burst.writeChangesPerSecond)} | ${r.burst.serverCpuMsPerKChange?.toFixed(0) ?? '-'} | ${r.latency.p50Ms.toFixed(1)} ms (${r.latency.kind}) | ${r.latency.p99Ms.toFixed(1)} ms | ${kib(rssPerShape(r))} | ${kib(heapPerShape(r))} | ${r.load1.toFixed(1)} |`,
    ),
  ]
  const entry = perEntry(report)
  if (entry !== undefined) {
    lines.push('', `Per view entry (the wide views' extra memory over their ${f0(entry.entries)} extra entries): ${entry.heapBytes.toFixed(0)} B of V8 heap, ${entry.rssBytes.toFixed(0)} B of RSS.`)
  }
  for (const l of report.viewMemory ?? []) {
    lines.push('', `Per view entry, measured apart (${f0(l.entries)} entries: ${f0(l.shapes)} views of ${l.perShape}, each value in ${l.sharing} view${l.sharing === 1 ? '' : 's'}): ${l.viewBytesPerEntry.toFixed(0)} B in the view, ${l.indexBytesPerEntry.toFixed(0)} B in the router's index.`)
  }
  for (const size of report.sizes) {
    const sub = find(report, 'subquery', size)
    const eq = find(report, 'equality', size)
    if (sub === undefined || eq === undefined) continue
    lines.push(
      '',
      `${f0(size)} shapes: subquery/equality changes/s ${(sub.burst.changesPerSecond / eq.burst.changesPerSecond).toFixed(2)}x, CPU per change ${sub.burst.serverCpuMsPerKChange !== null && eq.burst.serverCpuMsPerKChange !== null ? (sub.burst.serverCpuMsPerKChange / eq.burst.serverCpuMsPerKChange).toFixed(2) : '-'}x, RSS per shape ${(rssPerShape(sub) / rssPerShape(eq)).toFixed(2)}x.`,
    )
  }
  const [small, large] = [report.sizes[0], report.sizes[report.sizes.length - 1]]
  const a = small === undefined ? undefined : find(report, 'subquery', small)
  const b = large === undefined ? undefined : find(report, 'subquery', large)
  if (a !== undefined && b !== undefined && a !== b && a.burst.serverCpuMsPerKChange !== null && b.burst.serverCpuMsPerKChange !== null) {
    lines.push('', `Subquery shapes, ${f0(b.shapes)} vs ${f0(a.shapes)}: server CPU per change ${(b.burst.serverCpuMsPerKChange / a.burst.serverCpuMsPerKChange).toFixed(2)}x, changes/s ${(b.burst.changesPerSecond / a.burst.changesPerSecond).toFixed(2)}x (flat routing: both near 1x).`)
  }
  lines.push('', `Machine: ${report.machine.nproc} × ${report.machine.cpu}, ${report.machine.memoryGiB} GiB, Node ${report.machine.node}; load averages (1 min) per run in the table.`, '')
  return lines.join('\n')
}
