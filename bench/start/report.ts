/**
 * The start benchmark's results file (`results/start.json`), as `run.ts`
 * writes it and the combined report reads it, and the targets.
 */
import type { Machine } from '../storage/report.js'

export const MODES = ['compiled', 'source'] as const
export type Mode = (typeof MODES)[number]

/** The targets of the issue: wall time to healthy of the compiled CLI, by shape count. */
export const TARGET_MS: Readonly<Record<number, number>> = { 10: 1000, 100000: 5000 }

export interface Run {
  readonly mode: Mode
  readonly shapes: number
  /** Spawn to the first 200 of /v1/health. */
  readonly healthyMs: number
  /** What the banner says: createServer() to listening (so the rest of healthyMs is loading the code). */
  readonly serverMs: number
  /** CPU time (user + system, every thread) the server had used when it answered healthy: steadier than wall time on a busy machine. */
  readonly cpuMs: number
  /** Resident memory (VmRSS) when it answered healthy; absent in files written before it was recorded. */
  readonly rssKiB?: number
  /** SIGTERM to exit. */
  readonly stopMs: number
  /** The machine's one-minute load average at the start of the run (2 cores here: above 2, runs wait for a core). */
  readonly load1: number
}

export interface Report {
  /** When the file was written (the end of the run). */
  readonly date: string
  /** Absent from files written before it was recorded. */
  readonly machine?: Machine
  readonly runsPerMode: number
  readonly sizes: readonly number[]
  readonly runs: readonly Run[]
}
