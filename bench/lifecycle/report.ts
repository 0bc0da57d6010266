/**
 * The lifecycle benchmark's results file (`results/lifecycle.json`), as `run.ts`
 * writes it and the combined report reads it, and the targets.
 */
import type { Machine } from '../storage/report.js'

/** Issue 32 item 6: RSS and disk back within 10% of the baseline once the shapes expired; at most 10 KB per idle shape. */
export const TARGET = { returnRatio: 1.1, bytesPerIdleShape: 10 * 1024 } as const

/** One point of the run: the server's resident set (median of the settle window's samples), its heap and the store's disk use. */
export interface Phase {
  readonly label: 'baseline' | 'shapes' | 'expired'
  readonly shapes: number
  readonly rssBytes: number
  /** V8 heap in use (`nodejs_heap_size_used_bytes` of /metrics) at the end of the window. */
  readonly heapUsedBytes: number
  /** Bytes the store's directory (logs/) occupies on disk (allocated blocks). */
  readonly diskBytes: number
  /** Of those, the shapes' own files (logs/shapes and logs/trash); the rest is the journal and the watermark files. */
  readonly shapeFileBytes: number
  /** Files under logs/. */
  readonly files: number
  readonly load1: number
}

export interface Report {
  readonly date: string
  readonly machine: Machine
  readonly shapes: number
  readonly concurrency: number
  readonly ttlSeconds: number
  readonly settleSeconds: number
  /** The window after expiry (longer: V8 returns freed heap pages only after idle-time collections). */
  readonly afterSeconds: number
  /** The baseline's window (as long as the one after expiry: a server just started settles for about 30 s); absent in runs made before it was. */
  readonly baselineSeconds?: number
  /** How the shapes were made: over HTTP, one `offset=-1` GET each, against the `sluice start` process. */
  readonly createdOver: 'http'
  /** Wall time to create them all, and the rate. */
  readonly createSeconds: number
  readonly createPerSecond: number
  /** From the end of creation until /metrics counted every shape expired. */
  readonly expireSeconds: number
  readonly phases: readonly Phase[]
}

export function phase(report: Report, label: Phase['label']): Phase | undefined {
  return report.phases.find((p) => p.label === label)
}

/** Resident bytes per shape kept: the RSS above the baseline with every shape idle, over their number. */
export function bytesPerIdleShape(report: Report): number | undefined {
  const base = phase(report, 'baseline')
  const full = phase(report, 'shapes')
  if (base === undefined || full === undefined || full.shapes === 0) return undefined
  return (full.rssBytes - base.rssBytes) / full.shapes
}
