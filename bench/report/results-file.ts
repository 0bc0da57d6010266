/**
 * Which results file a section reads. A full run's `<stem>.json` is preferred;
 * without it, a partial run's, then a smoke (QUICK) run's. A QUICK report
 * prefers the smoke run's file, since that is what the run it follows wrote.
 * The report says which file each section used and names the others, with
 * their dates; a partial run newer than the full one is shown too (`newerPartial`).
 */
import { existsSync, readFileSync } from 'node:fs'
import { join } from 'node:path'

export type ResultsKind = 'full' | 'partial' | 'quick'

export const SUFFIX: Record<ResultsKind, string> = { full: '', partial: '.partial', quick: '.quick' }

export interface ResultsFile {
  readonly stem: string
  readonly kind: ResultsKind
  /** File name inside the results directory. */
  readonly file: string
  /** When the run started, from its JSON (`machine.date`), if it says. */
  readonly date: string | undefined
  readonly data: unknown
  /** The other variants present, beside the one chosen. */
  readonly others: readonly Omit<ResultsFile, 'others'>[]
}

/**
 * A partial run newer than the chosen full one: a later re-run of some cases
 * (after a change, say), which the report shows after the full run's figures
 * rather than hiding behind them.
 */
export function newerPartial(file: ResultsFile): Omit<ResultsFile, 'others'> | undefined {
  if (file.kind !== 'full' || file.date === undefined) return undefined
  return file.others.find((o) => o.kind === 'partial' && o.date !== undefined && o.date > file.date!)
}

export function preference(quick: boolean): readonly ResultsKind[] {
  return quick ? ['quick', 'full', 'partial'] : ['full', 'partial', 'quick']
}

/** The run's start from its machine block; else a top-level `date` (the start benchmark's, written at the run's end). */
function dateOf(data: unknown): string | undefined {
  const d = data as { machine?: { date?: unknown }; date?: unknown } | null
  if (typeof d?.machine?.date === 'string') return d.machine.date
  return typeof d?.date === 'string' ? d.date : undefined
}

export function findResults(resultsDir: string, stem: string, quick: boolean): ResultsFile | undefined {
  const present: { kind: ResultsKind; file: string; data: unknown }[] = []
  for (const kind of preference(quick)) {
    const file = `${stem}${SUFFIX[kind]}.json`
    const path = join(resultsDir, file)
    if (existsSync(path)) present.push({ kind, file, data: JSON.parse(readFileSync(path, 'utf8')) })
  }
  const [chosen, ...rest] = present
  if (chosen === undefined) return undefined
  return {
    stem,
    kind: chosen.kind,
    file: chosen.file,
    date: dateOf(chosen.data),
    data: chosen.data,
    others: rest.map((r) => ({ stem, kind: r.kind, file: r.file, date: dateOf(r.data), data: r.data })),
  }
}
