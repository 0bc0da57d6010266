/**
 * Every benchmark the combined run (`npm run bench`) runs and the report
 * (`bench/REPORT.md`) shows, in the order of both. A new benchmark adds one
 * entry: its package script, the environment of its quick variant, and its
 * report section (`sections/<name>.ts`).
 */
import type { ReportSection } from './section.js'
import { chunksSection } from './sections/chunks.js'
import { compactionSection } from './sections/compaction.js'
import { cdnSection } from './sections/cdn.js'
import { clientSection } from './sections/client.js'
import { fanoutSection } from './sections/fanout.js'
import { httpSection } from './sections/http.js'
import { liveSection } from './sections/live.js'
import { largeSection } from './sections/large.js'
import { lifecycleSection } from './sections/lifecycle.js'
import { memorySection } from './sections/memory.js'
import { overlapSection } from './sections/overlap.js'
import { pipelineSection } from './sections/pipeline.js'
import { startSection } from './sections/start.js'
import { storageSection } from './sections/storage.js'
import { subquerySection } from './sections/subquery.js'
import { takeoverSection } from './sections/takeover.js'

export interface Benchmark {
  readonly name: string
  /** The `@sluice/bench` script that runs it and writes `results/<stem>.*`. */
  readonly script: string
  /**
   * Added to the environment under QUICK=1: a smoke-sized run. Each one is cut
   * so that the whole QUICK suite takes a few minutes on a 2-core machine; a
   * quick run writes `results/<stem>.quick.*`, which git ignores.
   */
  readonly quickEnv: Readonly<Record<string, string>>
  readonly section: ReportSection
}

export const BENCHMARKS: readonly Benchmark[] = [
  { name: 'storage', script: 'bench:storage', quickEnv: { QUICK: '1' }, section: storageSection },
  // The pipeline's own QUICK run registers 3k shapes and runs every phase (8-15 min); the suite's smoke run keeps the throughput phases of up to 2k shapes.
  { name: 'pipeline', script: 'bench:pipeline', quickEnv: { QUICK: '1', ONLY: 'throughput', SETS: 'eq1,eq1k,eq10k' }, section: pipelineSection },
  { name: 'http', script: 'bench:http', quickEnv: { QUICK: '1' }, section: httpSection },
  // QUICK: 1 and 100 shapes, one repetition of 4 s each, and a 3 s burst.
  { name: 'live', script: 'bench:live', quickEnv: { QUICK: '1' }, section: liveSection },
  // QUICK: 100 and 1,000 long-polls and 500 SSE streams of one shape, 3 writes of 1 and 100 rows (about a minute).
  { name: 'fanout', script: 'bench:fanout', quickEnv: { QUICK: '1' }, section: fanoutSection },
  { name: 'client', script: 'bench:client', quickEnv: { QUICK: '1' }, section: clientSection },
  // QUICK: 2k and 10k rows, one warm and one cold run per client.
  { name: 'large', script: 'bench:large', quickEnv: { QUICK: '1' }, section: largeSection },
  // QUICK: 2 runs each at 10 and 1,000 shapes (making the 100k store alone takes a few minutes).
  { name: 'start', script: 'bench:start', quickEnv: { QUICK: '1' }, section: startSection },
  // QUICK: one takeover of each way at 10 and 1,000 shapes (about a minute).
  { name: 'takeover', script: 'bench:takeover', quickEnv: { QUICK: '1' }, section: takeoverSection },
  // QUICK: one 300,000-row transaction, RSS followed for 10 s after.
  { name: 'memory', script: 'bench:memory', quickEnv: { QUICK: '1' }, section: memorySection },
  // QUICK: 1 and 10 clients, one 2 s run each (about a minute).
  { name: 'chunks', script: 'bench:chunks', quickEnv: { QUICK: '1' }, section: chunksSection },
  // QUICK: 100 and 500 clients, 10 writes each, no idle window (about a minute).
  { name: 'cdn', script: 'bench:cdn', quickEnv: { QUICK: '1' }, section: cdnSection },
  // QUICK: 1, 100 and 300 overlapping shapes, 10 writes each; 100 and 400 shapes created at once (the 400 meet the admission limit).
  { name: 'overlap', script: 'bench:overlap', quickEnv: { QUICK: '1' }, section: overlapSection },
  // QUICK: 500 shapes made, measured idle, expired after 45 s (about two minutes).
  { name: 'lifecycle', script: 'bench:lifecycle', quickEnv: { QUICK: '1' }, section: lifecycleSection },
  // QUICK: 100 and 300 shapes of each kind, 8 move-in trials (about three minutes).
  { name: 'subquery', script: 'bench:subquery', quickEnv: { QUICK: '1' }, section: subquerySection },
  // QUICK: 1,000 rows updated 50,000 times, 3 syncs per log (about two minutes: the old log's grace period is one).
  { name: 'compaction', script: 'bench:compaction', quickEnv: { QUICK: '1' }, section: compactionSection },
]
