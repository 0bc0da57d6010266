/**
 * The combined report built from the real results files in `bench/results/`:
 * every section with a results file appears with its text, its tables carry
 * the JSON's medians in the right rows, and every chart is a well-formed SVG
 * naming its series. Partial and missing results are chosen and labelled as
 * the report says.
 */
import { copyFileSync, existsSync, readFileSync, writeFileSync } from 'node:fs'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { describe, expect, it } from 'vitest'
import { useTempDir } from '@sluice/test-utils'
import type { Report as ClientReport } from '../client/report.js'
import type { Report as HttpReport } from '../http/report.js'
import type { Report as LiveReport } from '../live/report.js'
import type { Report as LargeReport } from '../large/report.js'
import { type Report as MemoryReport, TARGET as MEMORY_TARGET } from '../memory/report.js'
import type { Report as PipelineReport } from '../pipeline/report.js'
import { type Report as StartReport, TARGET_MS as START_TARGET_MS } from '../start/report.js'
import { type Measurement, machineInfo, machineSpeed } from '../storage/report.js'
import { writeReport, type BuiltReport } from './build.js'
import { drawable } from './chart.js'
import { compact, machineLines, median, ms, num, ratio } from './format.js'
import { BENCHMARKS } from './registry.js'

const resultsDir = join(dirname(fileURLToPath(import.meta.url)), '..', 'results')
const sections = BENCHMARKS.map((b) => b.section)
const temp = useTempDir('bench-report')

function json<T>(file: string): T {
  return JSON.parse(readFileSync(join(resultsDir, file), 'utf8')) as T
}

/** The table row of the markdown that starts with these cells. */
function row(markdown: string, ...cells: string[]): string {
  const prefix = `| ${cells.join(' | ')} |`
  const found = markdown.split('\n').filter((l) => l.startsWith(prefix))
  expect(found, `one row starting ${prefix}`).toHaveLength(1)
  return found[0]!
}

/** Well-formed XML as far as tags go: every element closed, in order. Returns the root's name. */
function checkTags(svg: string): string {
  const stack: string[] = []
  let root: string | undefined
  for (const m of svg.matchAll(/<(\/?)([A-Za-z][\w:.-]*)(?:\s[^<>]*?)?(\/?)>/g)) {
    const [, closing, name, selfClosing] = m
    if (closing === '/') {
      expect(stack.pop(), `closing </${name}>`).toBe(name)
    } else {
      root ??= name
      if (selfClosing !== '/') stack.push(name!)
    }
  }
  expect(stack).toEqual([])
  return root ?? ''
}

/**
 * Two real results files of one benchmark, older first. Full and partial runs
 * share a schema, so either can stand in for the other: the tests need one
 * older and one newer, whichever the committed results are.
 */
function byDate(a: string, b: string): [string, string] {
  const date = (f: string) => json<{ machine: { date: string } }>(f).machine.date
  expect(date(a)).not.toBe(date(b))
  return date(a) < date(b) ? [a, b] : [b, a]
}

function textOf(svg: string): string[] {
  return [...svg.matchAll(/<text[^>]*>([^<]*)<\/text>/g)].map((m) => m[1]!)
}

async function build(dir: string, quick = false): Promise<BuiltReport> {
  const outDir = await temp.make()
  return writeReport({ sections, resultsDir: dir, outDir, chartsDir: 'charts', quick }).then((r) => {
    expect(readFileSync(join(outDir, 'REPORT.md'), 'utf8')).toBe(r.markdown)
    for (const chart of r.charts) expect(readFileSync(join(outDir, 'charts', chart.file), 'utf8')).toBe(`${chart.svg}\n`)
    return r
  })
}

describe('the benchmark report from bench/results', () => {
  it('has a section for every benchmark with a full results file, with what it measures, method, machine and load', async () => {
    const report = await build(resultsDir)
    const withResults = sections.filter((s) => existsSync(join(resultsDir, `${s.stem}.json`)))
    expect(withResults.map((s) => s.id)).toEqual(expect.arrayContaining(['storage', 'pipeline', 'http', 'client', 'large', 'start', 'memory']))
    for (const s of withResults) {
      const start = report.markdown.indexOf(`\n## ${s.title}\n`)
      expect(start, s.title).toBeGreaterThan(0)
      const next = report.markdown.indexOf('\n## ', start + 1)
      const body = report.markdown.slice(start, next === -1 ? undefined : next)
      expect(body).toContain(`[\`${s.stem}.json\`](`)
      expect(body).toContain('a full run')
      for (const part of ['**Measures:**', '**Does not measure:**', '**Method**', '**Machine and load**', 'load average', 'CPU pressure']) expect(body, `${s.id}: ${part}`).toContain(part)
    }
    expect(report.missing.filter((s) => withResults.includes(s))).toEqual([])
  })

  it('puts the JSON medians and the runs\' ranges in the tables', async () => {
    const { markdown } = await build(resultsDir)

    const http = json<HttpReport>('http.json')
    for (const r of http.initial) {
      const line = row(markdown, num(r.clients), 'Sluice', num(r.sluice.median.requestsPerSec))
      const reqs = r.sluice.runs.map((x) => x.requestsPerSec)
      expect(line).toContain(`${num(Math.min(...reqs))} – ${num(Math.max(...reqs))}`)
      row(markdown, num(r.clients), 'ceiling (bare fastify)', num(r.ceiling.median.requestsPerSec))
    }

    const pipeline = json<PipelineReport>('pipeline.json')
    for (const phase of pipeline.throughput) {
      for (const set of phase.sets) row(markdown, phase.label, set.title, compact(set.medianChangesPerSec))
    }

    const client = json<ClientReport>('client.json')
    for (const r of client.sync) {
      row(markdown, num(r.rows), 'Sluice client', ms(r.median.ours.ms))
      row(markdown, num(r.rows), 'official client (@electric-sql/client 1.5.28)', ms(r.median.official.ms))
    }

    const large = json<LargeReport>('large.json')
    for (const r of large.results) {
      row(markdown, num(r.rows), r.temperature, 'Sluice client', ms(r.median.ours.ms))
      row(markdown, num(r.rows), r.temperature, 'raw HTTP download (no parsing)', ms(r.median.raw.ms))
    }

    const storage = json<{ results: Measurement[] }>('storage.json')
    const big = storage.results.find((m) => m.workload === 'append-1000' && m.engine === 'ours')!
    row(markdown, 'append 1000 rows/tx', 'Sluice storage', ms(big.medianMs), ms(big.p99Ms))

    const start = json<StartReport>('start.json')
    for (const shapes of start.sizes) {
      for (const [mode, label] of [['compiled', 'compiled (dist/)'], ['source', 'from source (tsx)']] as const) {
        const runs = start.runs.filter((r) => r.shapes === shapes && r.mode === mode)
        const healthy = runs.map((r) => r.healthyMs)
        const line = row(markdown, num(shapes), label, num(runs.length), ms(median(healthy)), `${ms(Math.min(...healthy))} – ${ms(Math.max(...healthy))}`)
        const target = START_TARGET_MS[shapes]
        if (mode === 'compiled' && target !== undefined) expect(line).toMatch(median(healthy) <= target ? /\| met \|$/ : /\| \*\*missed\*\* \|$/)
      }
    }

    const memory = json<MemoryReport>('memory.json')
    const mid = (pick: (r: MemoryReport['runs'][number]) => number) => median(memory.runs.map(pick))
    const range = (pick: (r: MemoryReport['runs'][number]) => number, unit: string, digits = 0) => {
      const xs = memory.runs.map(pick)
      return `${num(Math.min(...xs), digits)} ${unit} – ${num(Math.max(...xs), digits)} ${unit}`
    }
    const peak = row(markdown, 'peak RSS')
    expect(peak).toContain(`| ${num(mid((r) => r.peakMiB))} MiB (`)
    expect(peak).toContain(range((r) => r.peakMiB, 'MiB'))
    expect(peak).toMatch(mid((r) => r.peakMiB) < MEMORY_TARGET.peakMiB ? /\| met \|$/ : /\| \*\*missed\*\* \|$/)
    const lastRow = row(markdown, 'commit to the last row at the client', `${num(mid((r) => r.lastRowS), 1)} s`, range((r) => r.lastRowS, 's', 1))
    expect(lastRow).toMatch(mid((r) => r.lastRowS) < MEMORY_TARGET.lastRowS ? /\| met \|$/ : /\| \*\*missed\*\* \|$/)
    row(markdown, 'RSS before the transaction', `${num(mid((r) => r.preMiB))} MiB`, range((r) => r.preMiB, 'MiB'))
    expect(row(markdown, 'ceiling: pg_recvlogical receives it')).toContain(`| ${num(mid((r) => r.ceilingS), 1)} s (Sluice ${ratio(mid((r) => r.lastRowS) / mid((r) => r.ceilingS))}) |`)
    for (const r of memory.runs) row(markdown, num(r.rep), `${num(r.walBytes / 1e9, 2)} GB`)
  })

  it('dates the start benchmark\'s results by its top-level date, which it writes without a machine block', async () => {
    const report = await build(resultsDir)
    const start = json<StartReport>('start.json')
    const section = report.sections.find((s) => s.section.id === 'start')!
    expect(section.file.date).toBe(start.machine?.date ?? start.date)
    expect(report.markdown).toMatch(new RegExp(`\\| \\[\`start\\.json\`\\]\\([^)]*\\) \\| full run \\| ${(start.machine?.date ?? start.date).slice(0, 10)} \\|`))
  })

  it('writes one well-formed SVG chart per spec, naming every series, and links each from the markdown', async () => {
    const report = await build(resultsDir)
    expect(report.charts.map((c) => c.spec.id)).toEqual(
      expect.arrayContaining(['storage-append', 'pipeline-throughput', 'http-initial-throughput', 'http-initial-latency', 'live-latency', 'client-sync-time', 'large-time', 'large-memory', 'start-healthy', 'start-cpu', 'memory-rss']),
    )
    for (const chart of report.charts) {
      expect(checkTags(chart.svg), chart.file).toBe('svg')
      const texts = textOf(chart.svg)
      expect(texts, chart.file).toContain(chart.spec.title)
      for (const series of chart.spec.series) expect(texts, `${chart.file}: ${series.name}`).toContain(series.name)
      // Every point is drawn, with its series and value (Vega labels each point mark for screen readers).
      const points = drawable(chart.spec)
      expect(points.length, chart.file).toBeGreaterThan(0)
      expect(chart.svg.match(/aria-roledescription="point"/g)?.length, chart.file).toBe(points.length)
      // Vega writes negative numbers with a minus sign (U+2212), not a hyphen.
      const text = (x: number) => String(x).replace('-', '\u2212')
      for (const p of points) expect(chart.svg, chart.file).toContain(`series: ${p.series}; x: ${text(p.x)}; y: ${text(p.y)}"`)
      expect(report.markdown).toContain(`![${chart.spec.title}](charts/${chart.file})`)
    }
    const pipeline = report.charts.find((c) => c.spec.id === 'pipeline-throughput')!
    expect(pipeline.spec.series.map((s) => s.name)).toEqual(['Sluice, 1-row transactions', 'Sluice, 100-row transactions', 'ceiling (pg_recvlogical), 1-row', 'ceiling (pg_recvlogical), 100-row'])
    // Start: one point per shape count and CLI, and the target at each shape count that has one.
    const start = json<StartReport>('start.json')
    const healthy = report.charts.find((c) => c.spec.id === 'start-healthy')!
    expect(healthy.spec.series.map((s) => s.name)).toEqual(['compiled (dist/)', 'from source (tsx)', 'issue target (compiled)'])
    expect(healthy.spec.points.filter((p) => p.series === 'issue target (compiled)').map((p) => [p.x, p.y])).toEqual(
      start.sizes.filter((n) => START_TARGET_MS[n] !== undefined).map((n) => [n, START_TARGET_MS[n]! / 1000]),
    )
    expect(healthy.spec.points).toContainEqual({ series: 'compiled (dist/)', x: 10, y: median(start.runs.filter((r) => r.shapes === 10 && r.mode === 'compiled').map((r) => r.healthyMs)) / 1000 })
    // Memory: every run's RSS time line, and the 350 MiB target across it.
    const memory = json<MemoryReport>('memory.json')
    const rss = report.charts.find((c) => c.spec.id === 'memory-rss')!
    for (const r of memory.runs) {
      expect(rss.spec.points.filter((p) => p.series === `run ${r.rep}`).map((p) => [p.x, p.y])).toEqual(r.timeline.map(([t, mib]) => [t, mib]))
    }
    expect(rss.spec.points.filter((p) => p.series === `target: peak below ${MEMORY_TARGET.peakMiB} MiB`).map((p) => p.y)).toEqual([MEMORY_TARGET.peakMiB, MEMORY_TARGET.peakMiB])
  })

  it('falls back to a partial results file, says so, and lists the benchmarks without results', async () => {
    const dir = await temp.make()
    copyFileSync(join(resultsDir, 'live.partial.json'), join(dir, 'live.partial.json'))
    const report = await build(dir)
    expect(report.sections.map((s) => [s.section.id, s.file.kind])).toEqual([['live', 'partial']])
    expect(report.markdown).toContain('a partial run')
    const partial = json<LiveReport>('live.partial.json')
    for (const r of partial.rows) {
      row(report.markdown, num(r.shapes), num(r.followed), 'Sluice', ms(r.sluice.median.p50Ms))
      row(report.markdown, num(r.shapes), num(r.followed), 'ceiling (LISTEN/NOTIFY, in memory)', ms(r.ceiling.median.p50Ms))
    }
    expect(report.charts.map((c) => c.spec.id)).toEqual(['live-latency'])
    expect(report.missing.map((s) => s.id)).toEqual(sections.filter((s) => s.id !== 'live').map((s) => s.id))
    expect(report.markdown).toContain('## Not in this report')
  })

  it('prefers the full file and names an older partial one; a QUICK build prefers the smoke run', async () => {
    const dir = await temp.make()
    const [older, newer] = byDate('pipeline.json', 'pipeline.partial.json')
    copyFileSync(join(resultsDir, older), join(dir, 'pipeline.partial.json'))
    copyFileSync(join(resultsDir, newer), join(dir, 'pipeline.json'))
    const full = await build(dir)
    expect(full.sections[0]!.file.kind).toBe('full')
    expect(full.sections[0]!.newer).toBeUndefined()
    expect(full.markdown).toMatch(/Also present, not shown here: \[`pipeline\.partial\.json`\]\([^)]*\) \(partial, 2026-/)
    expect(full.markdown).not.toContain('a newer partial run')

    copyFileSync(join(resultsDir, newer), join(dir, 'pipeline.quick.json'))
    const quick = await build(dir, true)
    expect(quick.sections[0]!.file.kind).toBe('quick')
    expect(quick.markdown).toContain('QUICK smoke run')
  })

  it('shows a partial run newer than the full one after it, tables and charts included', async () => {
    const dir = await temp.make()
    copyFileSync(join(resultsDir, 'http.json'), join(dir, 'http.json'))
    // A later partial run of the same benchmark: the full run's figures, dated a day later, one client count.
    const full = json<HttpReport>('http.json')
    const date = new Date(Date.parse(full.machine.date) + 86_400_000).toISOString()
    const partial: HttpReport = { ...full, partial: true, machine: { ...full.machine, date }, initial: full.initial.slice(0, 1) }
    writeFileSync(join(dir, 'http.partial.json'), JSON.stringify(partial))
    const report = await build(dir)
    expect(report.sections[0]!.file.kind).toBe('full')
    expect(report.sections[0]!.newer?.file.file).toBe('http.partial.json')
    expect(report.markdown).toContain(`### HTTP: a newer partial run (${date.slice(0, 10)})`)
    const after = report.markdown.slice(report.markdown.indexOf('a newer partial run'))
    for (const r of partial.initial) row(after, num(r.clients), 'Sluice', num(r.sluice.median.requestsPerSec))
    expect(report.charts.map((c) => c.spec.id)).toContain('http-initial-throughput-partial')
    expect(report.markdown).toContain(`newer partial run of ${date.slice(0, 10)}`)
  })
})

describe('the machine block', () => {
  it("records the machine's speed with each run, and the report shows it only for runs that have it", () => {
    const speed = machineSpeed()
    expect(Number.isInteger(speed.jsonParseMBps)).toBe(true)
    expect(speed.jsonParseMBps).toBeGreaterThan(0)
    const machine = machineInfo(resultsDir)
    expect(machine.speed?.jsonParseMBps).toBeGreaterThan(0)
    expect(machineLines(machine).join('\n')).toContain(`at ${num(machine.speed!.jsonParseMBps)} MB/s`)
    const { speed: _, ...earlier } = machine
    expect(machineLines(earlier).join('\n')).not.toContain('MB/s')
  })
})

describe('report formatting', () => {
  it('formats figures the way the tables show them', () => {
    expect(num(5702.4)).toBe('5,702')
    expect(compact(66_933.4)).toBe('66.9k')
    expect(compact(162_343.6)).toBe('162.3k')
    expect(ms(0.0028)).toBe('2.80 µs')
    expect(ms(4.028)).toBe('4.03 ms')
    expect(ms(36.84)).toBe('36.8 ms')
    expect(ms(4030.5)).toBe('4,031 ms')
    expect(ms(25_800)).toBe('25.8 s')
  })
})
