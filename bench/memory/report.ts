/**
 * The memory benchmark's results file (`results/memory.json`), as `run.ts`
 * writes it and the combined report reads it, and the targets.
 */
import type { Machine } from '../storage/report.js'

/** The targets: peak RSS, RSS after the transaction relative to before it, commit to the client's last row. */
export const TARGET = { peakMiB: 350, afterRatio: 1.2, lastRowS: 20 } as const

export interface MetricsSample {
  readonly t: number
  readonly rss: number
  readonly heapUsed: number
  readonly heapTotal: number
  readonly external: number
}

export interface Run {
  readonly rep: number
  readonly walBytes: number
  readonly preMiB: number
  readonly peakMiB: number
  readonly peakAtS: number
  readonly afterCommitMiB: number
  readonly afterLastRowMiB: number
  readonly commitS: number
  readonly lastRowS: number
  /** Commit to the client's first row of the transaction: Postgres's delivery, routing, the flush (absent from older files). */
  readonly firstRowS?: number
  /** A fresh client downloading the whole shape once the run is over (offset -1 to up-to-date), alone: the download's share (absent from older files). */
  readonly catchUpS?: number
  /** The server's sluice_transactions_routed_ahead_total at the end: 1 when the transaction was routed while it streamed in (absent from older files). */
  readonly routedAhead?: number | undefined
  readonly rowsReceived: number
  readonly ceilingS: number
  readonly atPeak: MetricsSample | undefined
  /** Before the transaction, and at the end of the run (60 s after the last row). */
  readonly start: { mallocHeapMiB: number; otherAnonMiB: number }
  readonly end: { mallocHeapMiB: number; otherAnonMiB: number }
  /** Load averages (1, 5, 15 min) at the end of the run, "1.7, 8.7, 14.7". */
  readonly load: string
  /** RSS (MiB) once a second from the INSERT on, with the seconds since the commit. */
  readonly timeline: ReadonlyArray<readonly [number, number]>
}

export interface Report {
  /** The machine, with the run's start as its date; absent from files written before it was recorded. */
  readonly machine?: Machine
  readonly rows: number
  /** Seconds after the commit and after the last row at which the "after" RSS is read (BENCH_AFTER_S); absent from files written before it was recorded, all at the default of 60. */
  readonly afterS?: number
  readonly flags: readonly string[]
  readonly nodeOptions: string | undefined
  readonly runs: readonly Run[]
}
