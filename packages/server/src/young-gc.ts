import { availableParallelism } from 'node:os'
import { setFlagsFromString } from 'node:v8'

/** What `configureYoungGc` did, for the start-up log. */
export interface YoungGcSetting {
  readonly parallelScavenge: boolean
  /** `auto`: chosen from the core count; `flag`: Node was started with --[no-]parallel-scavenge, which stands. */
  readonly source: 'auto' | 'flag'
}

/**
 * Runs young-generation collections on the main thread alone on machines of
 * two cores or fewer (V8's `--no-parallel-scavenge`), unless Node was started
 * with either form of the flag. (Only the command line can give it: Node
 * refuses V8 flags like this one in NODE_OPTIONS.)
 *
 * Why: a parallel scavenge hands part of each collection to helper threads,
 * and the main thread waits for them. With Postgres on the same two cores the
 * helpers wait for a CPU, and the split itself costs: a collection done by
 * one thread took less CPU in all than the same collection shared. In
 * `bench:pipeline` at 100k shapes (alternating runs, two each way, 2 cores):
 * 1-row transactions 23.8k and 24.2k changes/s (pipeline CPU 9.9 and 10.2 s)
 * with V8's default, 29.8k and 38.5k (7.7 and 6.1 s) without parallel
 * scavenges. (With 100-row transactions the walsender leaves the second core
 * idler, and V8's default did better in five noisy runs each way: see the
 * README.) A collection pauses the pipeline a little longer (it is one
 * thread's work), which a sync engine that batches for 10 ms does not notice.
 *
 * V8 reads this flag at every scavenge, so setting it after start-up takes
 * effect (unlike the heap-size flags). It is process-wide: the `sluice` command
 * calls this at start-up; an application embedding the pipeline decides for
 * its own process.
 */
export function configureYoungGc(cores: number = availableParallelism()): YoungGcSetting {
  const setting = youngGcSetting(process.execArgv, cores)
  if (setting.source === 'auto' && !setting.parallelScavenge) setFlagsFromString('--no-parallel-scavenge')
  return setting
}

/** Every spelling V8 takes: one or two dashes, `-` or `_` between words, `no` joined by either or by nothing. */
const FLAG = /^--?(no[-_]?)?parallel[-_]scavenge$/

/** The decision alone: a flag Node was started with stands (the last one, as V8 reads them); else parallel above two cores. */
export function youngGcSetting(execArgv: readonly string[], cores: number): YoungGcSetting {
  let given: boolean | undefined
  for (const arg of execArgv) {
    const m = FLAG.exec(arg)
    if (m !== null) given = m[1] === undefined
  }
  if (given !== undefined) return { parallelScavenge: given, source: 'flag' }
  return { parallelScavenge: cores > 2, source: 'auto' }
}
