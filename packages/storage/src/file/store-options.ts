/** The file store's settings and what it reports about itself (public types). */
import type { StorageError } from '../errors.js'
import type { FsPort } from '../fs-port.js'
import type { StatFiles } from './stat-files.js'
import type { StoreLockOptions } from './store-lock.js'

/** The checkpoint running now, or else the last one (all zero before the first). */
export interface CheckpointStats {
  running: boolean
  /** Logs named in the checkpoint's segments. */
  logs: number
  /** Of those, how many are done (written back; and synced, file by file, without syncfs). */
  writtenBack: number
  /** With syncfs: from the start until every log was written back (zero file by file). */
  writeBackMs: number
  /** The syncfs (file by file: the whole checkpoint). */
  syncMs: number
  totalMs: number
  /** How: one syncfs for the store, or an fdatasync per file. */
  syncfs: boolean
}

/** What `FileLogStore.stats()` reports: for metrics and diagnosis. */
export interface FileStoreStats {
  readonly logs: number
  /** Journal segments on disk, the current one included (at most one when no checkpoint is due). */
  readonly journalSegments: number
  /** Memory held for building journal groups (grown by a huge flush, kept up to 16 MiB, given back by `shedMemory`). */
  readonly journalBufferBytes: number
  /** Bytes of write-behind tails and staged index records in memory (what `tailBudgetBytes` bounds). */
  readonly tailBytes: number
  /** Memory held for them (the tail arena's slabs, resident once touched). */
  readonly tailMemoryBytes: number
  /** The writer is asked to hold back (`onPressure`), and how many times it was since open. */
  readonly underPressure: boolean
  readonly pressures: number
  readonly checkpoint: Readonly<CheckpointStats>
}

/** Tuning knobs of the file engine. Every one has a production default. */
export interface FileStoreOptions {
  readonly dir: string
  /** A chunk closes after the entry that makes it reach this many bytes. */
  readonly chunkBytes?: number
  /** Longest time appended data waits for a flush. */
  readonly flushIntervalMs?: number
  /**
   * An advance that finds the store idle (no advance within the interval,
   * no flush running) flushes at once instead of waiting out the interval, so
   * a lone change costs one fdatasync of latency, not the interval too; under
   * load changes still share one flush per interval. Default true; false
   * leaves flushing to the interval, the byte threshold and `flush()`.
   */
  readonly flushWhenIdle?: boolean
  /**
   * Such an idle flush runs its journal's fdatasync on the calling thread
   * while those run there lately took at most this many milliseconds (the
   * median of the last eight: inline-sync-policy.ts): the thread pool's hop
   * there and back (and the wake of the event loop that ends it) costs a
   * lone change about as much as a fast disk's sync itself, and an idle store
   * has nothing else to do meanwhile. Slower syncs send the next ones back to
   * the thread pool, with one tried on the thread again after a second (then
   * two, four, ... up to a minute while they stay slow), so the event loop is
   * never held for long. Default 1 with the real file system; 0 (the default
   * with any other port, whose own `fdatasync` is what tests and fault
   * injection watch) never syncs inline.
   */
  readonly idleSyncInlineMaxMs?: number
  /** Dirty bytes that trigger a flush before the interval ends. */
  readonly flushBytes?: number
  /** Bound of the file-descriptor LRU (three files per log in use). */
  readonly maxOpenFiles?: number
  /**
   * Group commit through the store-wide journal (one fdatasync per flush);
   * false syncs every dirty log's files on every flush instead.
   */
  readonly journal?: boolean
  /**
   * A journal segment is checkpointed (its logs synced, then it is deleted)
   * past this size, or later while it names many logs (up to 4x; journal.ts
   * `closeDue`)...
   */
  readonly journalSegmentBytes?: number
  /** ... or this age (with the same allowance, up to 10x). */
  readonly journalSegmentAgeMs?: number
  /**
   * How often the running writer rewrites the heads file (heads-file.ts) when
   * something was appended since: an open after a crash then scans only the
   * logs appended to after it, not all. 0: only at close. Default
   * DEFAULT_HEADS_INTERVAL_MS.
   */
  readonly headsIntervalMs?: number
  /**
   * Memory reserved at open for write-behind tails and staged index records
   * (tail-arena.ts): address space, resident only as it is used; more is
   * added in 4 MiB slabs when it runs out. Default: the tail budget (at least
   * 64 MiB, at most 1 GiB), so that tails within the budget never grow the
   * arena (each growth counts as V8 external memory, and enough of it starts
   * a full collection of the whole heap). The price: a page of the reserve
   * stays resident once a burst has touched it (slabs past the reserve go
   * back after the next checkpoint, the reserve never), and under strict
   * overcommit (vm.overcommit_memory=2) the whole reserve is committed at
   * open; set a smaller reserve where that matters.
   */
  readonly tailReserveBytes?: number
  /**
   * Touch the start of the reserve at open (tail-arena.ts `prefault`): 64
   * MiB, or 1,280 bytes per log the store opened with if that is more (a
   * first tail block of 1 KiB, twice a first append of a few hundred bytes,
   * and a first block of staged index records, 256 bytes: what every log that
   * takes a change holds until its next write-back). They become resident at
   * once, and appends into them never wait on a page fault (with many logs,
   * those faults add up in the first seconds after an open). For a
   * long-running writer; off by default (tests open many small stores).
   */
  readonly prefaultTails?: boolean
  /**
   * Write-behind tails leave memory through a checkpoint (a hot log's also
   * through its own write-backs). Past half this many bytes of them the
   * current journal segment is closed early and checkpointed; past all of it
   * the store asks its writer to hold back (`onPressure`) until a checkpoint
   * has brought them under half.
   */
  readonly tailBudgetBytes?: number
  /**
   * Write-backs on the process's write-back thread (write-back.ts); the
   * default with the real file system. Otherwise through `fs` on the thread
   * pool (a port other than the real file system cannot be used from the
   * thread).
   */
  readonly writeBackThread?: boolean
  readonly fs?: FsPort
  /**
   * How the writer lock is taken (store-lock.ts): a kernel lock where the
   * caller has one (flock(2) through a native addon; otherwise a pid file),
   * and how long to wait for a holder to let go.
   */
  readonly lock?: StoreLockOptions
  /**
   * Stats many files in one call (a native addon's; see stat-files.ts): an
   * open after a clean stop checks each log's four files against the heads
   * file with it. Used only with the real file system (`fs` unset or
   * nodeFs); without it, `statSync` per file.
   */
  readonly statFiles?: StatFiles
  /**
   * Registered before the logs are opened, so it hears what `onError` would
   * have but is too late for: each log quarantined at open (a damaged or
   * missing file), with why. Stays registered like an `onError` listener.
   */
  readonly onError?: (err: StorageError) => void
}
