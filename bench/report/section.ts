/**
 * The contract between a benchmark and the combined report (`bench/REPORT.md`).
 *
 * Each benchmark contributes one `ReportSection`: it names the results file its
 * run writes and turns that file's JSON into text, tables and chart specs. The
 * builder knows nothing of any benchmark's schema; a new benchmark adds a
 * section module and one entry in `registry.ts`.
 */
import type { ChartSpec } from './chart.js'
import type { ResultsFile } from './results-file.js'

export interface Table {
  readonly title: string
  readonly headers: readonly string[]
  /** 'r' right-aligns a column of figures; default left. */
  readonly align?: readonly ('l' | 'r')[]
  readonly rows: readonly (readonly string[])[]
  /** A sentence under the table (what a column means). */
  readonly note?: string
}

export interface SectionContent {
  /** What the benchmark measures, one paragraph. */
  readonly measures: string
  /** What it leaves out, one paragraph. */
  readonly doesNotMeasure: string
  /** The method, one bullet each. */
  readonly method: readonly string[]
  /** The machine the run used, one bullet each. */
  readonly machine: readonly string[]
  /** Its load during the run (load averages, CPU pressure), one bullet each. */
  readonly load: readonly string[]
  readonly tables: readonly Table[]
  readonly charts: readonly ChartSpec[]
  /** The figures worth quoting, with their ratios, one sentence each (also gathered at the top of the report). */
  readonly headline: readonly string[]
}

export interface ReportSection {
  /** Stable id: anchors, chart file names. */
  readonly id: string
  readonly title: string
  /** The stem its run writes into `results/`: `<stem>.json`, `<stem>.partial.json`, `<stem>.quick.json`. */
  readonly stem: string
  /** The JSON is the benchmark's own report type; the section casts it. */
  render(file: ResultsFile): SectionContent
}
