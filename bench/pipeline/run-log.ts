/**
 * What every benchmark run prints and records about itself: progress lines
 * stamped with the seconds since the run started, its length, and the load
 * average at a named moment. The run starts when this module is loaded, with
 * the benchmark's own.
 */
import { loadavg } from 'node:os'
import type { LoadNote } from './report.js'

const runStarted = performance.now()

/** Seconds since the run started. */
export function runSeconds(): number {
  return (performance.now() - runStarted) / 1000
}

/** A progress line, `[   12s] message`. */
export function log(message: string): void {
  console.log(`[${runSeconds().toFixed(0).padStart(5)}s] ${message}`)
}

/** The load average now, under `label`, for the report's load table. */
export function loadNote(label: string): LoadNote {
  return { label, at: new Date().toISOString(), loadavg: loadavg().map((l) => Math.round(l * 100) / 100) }
}
