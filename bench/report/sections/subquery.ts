/** The subquery benchmark's section: `IN (SELECT …)` shapes next to as many `list_id = $1` shapes. */
import { type Report, type Run, find, heapPerShape, perEntry, rssPerShape } from '../../subquery/report.js'
import type { ChartSpec } from '../chart.js'
import { machineLines, ms, num, pressureLine, ratio } from '../format.js'
import type { ReportSection, SectionContent, Table } from '../section.js'

const kib = (bytes: number): string => (Number.isFinite(bytes) ? `${num(bytes / 1024, 1)} KiB` : '-')
const modeText = (r: Run): string => (r.mode === 'equality' ? '`list_id = $1`' : `\`IN (SELECT …)\`, ${r.perUser} lists per user`)

function render(report: Report): SectionContent {
  const runs: Table = {
    title: 'Each kind of shape on a fresh server',
    headers: ['shapes', 'shape', 'view entries', 'changes/s routed', 'Postgres wrote', 'server CPU / 1k changes', 'latency', 'p50', 'p99', 'RSS / shape', 'heap / shape', 'load (1 min)'],
    align: ['r', 'l', 'r', 'r', 'r', 'r', 'l', 'r', 'r', 'r', 'r', 'r'],
    rows: report.runs.map((r) => [
      num(r.shapes),
      modeText(r),
      num(r.viewEntries),
      num(r.burst.changesPerSecond),
      num(r.burst.writeChangesPerSecond),
      r.burst.serverCpuMsPerKChange === null ? '-' : ms(r.burst.serverCpuMsPerKChange),
      r.latency.kind === 'move-in' ? 'member inserted → client has the moved-in todos' : 'todo inserted → client has it',
      ms(r.latency.p50Ms),
      ms(r.latency.p99Ms),
      kib(rssPerShape(r)),
      kib(heapPerShape(r)),
      num(r.load1, 1),
    ]),
    note: '*changes/s routed*: outer-table changes (updates of random todos, 50 per transaction) from the burst\'s start until the server\'s durable LSN passed the last one; *Postgres wrote*: the writer\'s own rate, a ceiling on the first. *RSS / heap per shape*: after the shapes were made minus before, over their number.',
  }
  const ratios: Table = {
    title: 'Subquery shapes over equality shapes, same count, same run',
    headers: ['shapes', 'changes/s', 'CPU per change', 'RSS per shape'],
    align: ['r', 'r', 'r', 'r'],
    rows: report.sizes.flatMap((size) => {
      const sub = find(report, 'subquery', size)
      const eq = find(report, 'equality', size)
      if (sub === undefined || eq === undefined) return []
      const cpu = sub.burst.serverCpuMsPerKChange !== null && eq.burst.serverCpuMsPerKChange !== null ? sub.burst.serverCpuMsPerKChange / eq.burst.serverCpuMsPerKChange : Number.NaN
      return [[num(size), ratio(sub.burst.changesPerSecond / eq.burst.changesPerSecond), ratio(cpu), ratio(rssPerShape(sub) / rssPerShape(eq))]]
    }),
  }
  const memory: Table = {
    title: 'Memory per view entry, measured apart (the server\'s own classes, V8 heap after a full collection)',
    headers: ['entries', 'views × values', 'each value in', 'in the view', 'in the router\'s index', 'total'],
    align: ['r', 'l', 'r', 'r', 'r', 'r'],
    rows: (report.viewMemory ?? []).map((l) => [
      num(l.entries),
      `${num(l.shapes)} × ${num(l.perShape)}`,
      `${num(l.sharing)} view${l.sharing === 1 ? '' : 's'}`,
      `${num(l.viewBytesPerEntry)} B`,
      `${num(l.indexBytesPerEntry)} B`,
      `${num(l.viewBytesPerEntry + l.indexBytesPerEntry)} B`,
    ]),
  }
  const chart: ChartSpec = {
    id: 'subquery-cpu',
    title: 'Server CPU per 1,000 outer-table changes',
    x: { title: 'shapes', log: true },
    y: { title: 'ms' },
    series: [{ name: 'IN (SELECT …)' }, { name: 'list_id = $1', dashed: true }],
    points: report.runs
      .filter((r) => r.mode !== 'subquery-wide' && r.burst.serverCpuMsPerKChange !== null)
      .map((r) => ({ series: r.mode === 'equality' ? 'list_id = $1' : 'IN (SELECT …)', x: r.shapes, y: r.burst.serverCpuMsPerKChange! })),
  }
  const entry = perEntry(report)
  const headline: string[] = []
  const [small, large] = [report.sizes[0], report.sizes[report.sizes.length - 1]]
  const a = small === undefined ? undefined : find(report, 'subquery', small)
  const b = large === undefined ? undefined : find(report, 'subquery', large)
  const eqB = large === undefined ? undefined : find(report, 'equality', large)
  if (a !== undefined && b !== undefined && eqB !== undefined) {
    headline.push(
      `${num(b.shapes)} \`IN (SELECT …)\` shapes: ${num(b.burst.changesPerSecond)} outer changes/s routed (${ratio(b.burst.changesPerSecond / eqB.burst.changesPerSecond)} as many \`list_id = $1\` shapes), server CPU per change ${ratio((b.burst.serverCpuMsPerKChange ?? Number.NaN) / (a.burst.serverCpuMsPerKChange ?? Number.NaN))} that at ${num(a.shapes)} shapes; move-in p50 ${ms(b.latency.p50Ms)}, p99 ${ms(b.latency.p99Ms)}; ${kib(rssPerShape(b))} RSS per shape${entry === undefined ? '' : `, ${num(entry.heapBytes)} B of heap per view entry`} (load ${num(b.load1, 1)}).`,
    )
  }
  return {
    measures:
      'Subquery shapes (`list_id IN (SELECT list_id FROM members WHERE user_id = $1)`, one per user) next to as many `list_id = $1` shapes, each set on a fresh `sluice start` process: how fast outer-table changes are routed, the server CPU they cost, the time from a member row inserted until a live client of that user\'s shape has the moved-in rows, and the memory per shape and per view entry.',
    doesNotMeasure: 'NOT IN, OR and nested subqueries, inner-table change throughput, a client library\'s own cost, an HTTP cache in front, other machines.',
    method: [
      'Each user is a member of 3 lists (each list in 3 users\' views), 2 todos per list; the shapes are made over HTTP, 16 requests at once.',
      'Throughput: one writer process commits transactions of 50 updates of random todos back to back; the server\'s CPU from /proc over the burst.',
      'Latency: 10 shapes followed live by a client process; each trial inserts a member row (a list with 2 todos and no member) and polls the client until both todos arrived; the equality row inserts a todo into a followed list.',
      `Memory: median RSS over the second half of a settle window and the least V8 heap in use seen in it, before and after the shapes were made; per view entry from a third run with ${report.runs.find((r) => r.mode === 'subquery-wide')?.perUser ?? '-'} lists per user.`,
    ],
    machine: machineLines(report.machine),
    load: [
      `load average (1 min) after each run: ${report.runs.map((r) => `${num(r.load1, 1)} (${r.mode} ×${num(r.shapes)})`).join(', ')}`,
      pressureLine(report.runs.map((r) => r.burst.cpuPressurePercent ?? null)),
    ],
    tables: [runs, ratios, memory].filter((t) => t.rows.length > 0),
    charts: chart.points.length === 0 ? [] : [chart],
    headline,
  }
}

export const subquerySection: ReportSection = {
  id: 'subquery',
  title: 'Subquery shapes: routing, move-in and memory',
  stem: 'subquery',
  render: (file) => render(file.data as Report),
}
