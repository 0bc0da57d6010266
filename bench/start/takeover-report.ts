/**
 * The takeover benchmark's results file (`results/takeover.json`), as
 * `takeover.ts` writes it and the combined report reads it.
 */
import type { Machine } from '../storage/report.js'
import type { FixtureWhere } from './fixture.js'

/** How the writer goes: a clean stop (a rolling upgrade) or killed (a crash). */
export const WAYS = ['SIGTERM', 'SIGKILL'] as const
export type Way = (typeof WAYS)[number]

/** One takeover. Times are from t0, the signal to the writer, unless they say otherwise. */
export interface TakeoverRun {
  readonly way: Way
  readonly shapes: number
  /** The machine's one-minute load average as the run began (the writer's start). */
  readonly load1: number
  /** The writer's spawn to its first healthy answer (a start on a store left at a clean stop): not part of the takeover. */
  readonly writerHealthyMs: number
  /** The writer's exit (the parent sees it). */
  readonly writerExitMs: number
  /** Postgres acknowledged the probe row's commit (issued right after the signal). */
  readonly commitMs: number
  /** The store's LOCK file names the standby: it holds the writer lock (null: not seen before it was healthy). */
  readonly lockMs: number | null
  /** The standby logged `shapes restored` (its store is open and its shapes are back). */
  readonly restoredMs: number | null
  /** The standby's first 200 of /v1/health. */
  readonly healthyMs: number
  /** The standby served the probe row, through the shape it lives in (handle and offset taken from the writer). */
  readonly rowMs: number
  /** Shape requests the row took, refused connections not counted. */
  readonly rowRequests: number
  /** The standby's CPU time (user + system, every thread) while it waited, at t0. */
  readonly cpuWaitingMs: number
  /** Its CPU time at its first healthy answer. */
  readonly cpuHealthyMs: number
  /** Its resident memory while it waited, and at healthy. */
  readonly rssWaitingKiB: number
  readonly rssHealthyKiB: number
  /** Shapes the standby said it restored. */
  readonly restoredShapes: number
  /** SIGTERM to the standby's exit, after the measurement. */
  readonly standbyStopMs: number
}

export interface TakeoverReport {
  readonly machine: Machine
  readonly where: FixtureWhere
  readonly runsPerWay: number
  readonly sizes: readonly number[]
  readonly ways: readonly Way[]
  /** Rows the bench commits, and the writer routes, just before the signal (the writer's recent work). */
  readonly preCommits: number
  readonly runs: readonly TakeoverRun[]
}
