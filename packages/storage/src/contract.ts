import type { LogOffset } from '@sluice/protocol'

/**
 * The shape-log contract. Two implementations honour it and run through one test
 * suite: `MemoryLogStore` (the reference) and `FileLogStore` (the engine).
 *
 * Model
 * -----
 * A shape log is a sequence of entries. Each entry is one pre-encoded JSON line;
 * the store keeps it as `json + ","` so that the stored bytes of any run of
 * entries are the HTTP body for that run apart from a fixed prefix `[` and
 * suffix (`]`, or an up-to-date control line then `]`).
 *
 *   snapshot region   rows of the initial snapshot, then one `snapshot-end` line.
 *                     Cut into chunks; every row of chunk n has the virtual
 *                     offset `0_n`, so a request at `0_n` answers chunk n+1.
 *   live region       one entry per change, offset `<commit lsn>_<op>`, strictly
 *                     increasing, appended one transaction at a time.
 *
 * Chunks close after the entry whose bytes make the chunk reach `chunkBytes`,
 * so boundaries depend only on the entries and every reader gets identical ranges.
 *
 * Visibility: appended entries become visible to readers only once durable, that
 * is once a flush has synced them and published a watermark that covers their
 * transaction (`advance`). Readers therefore never see a partial transaction or
 * anything a crash could take back.
 */

/** One entry handed to `appendTransaction`: its offset and its JSON line (no separator). */
export interface LogEntryInput {
  readonly offset: LogOffset
  readonly json: Uint8Array
}

/** Bytes of the stored log, without copying: a range of an open file, or memory. */
export type Span =
  | { readonly kind: 'file'; readonly fd: number; readonly position: number; readonly length: number }
  | { readonly kind: 'bytes'; readonly bytes: Uint8Array }

/**
 * The answer to `read(after)`: the entries strictly after `after`, up to the end
 * of the chunk that holds the first of them (or up to the last published entry
 * when that chunk is still open).
 *
 * `spans` concatenated are the stored bytes of those entries: each entry's JSON
 * followed by `,`. A body without a trailing control line drops the last byte.
 * File spans stay valid until `release()`; call it exactly once.
 */
export interface LogRead {
  readonly spans: readonly Span[]
  /** Total bytes of `spans`. */
  readonly byteLength: number
  /** Number of entries in the range. */
  readonly entryCount: number
  /** Offset of the last entry in the range (the next request's offset); `after` when empty. */
  readonly nextOffset: LogOffset
  /** The range ends at the last published entry of the log. */
  readonly reachedHead: boolean
  release(): void
}

/** The pieces of a log readers need to tell where they stand. */
export interface LogHead {
  /** Offset of the last published entry; `-1` for a log with none. */
  readonly lastOffset: LogOffset
  /** Number of published entries. */
  readonly entryCount: number
  /** Number of closed chunks, snapshot chunks included. */
  readonly closedChunks: number
  /** Number of snapshot chunks (all closed; the last ends with `snapshot-end`). */
  readonly snapshotChunks: number
}

export interface SnapshotAppendOptions {
  readonly closeChunk?: boolean
}

export interface AppendOptions {
  readonly more?: boolean
}

export interface ShapeLog {
  readonly id: string
  /** Opaque bytes given at creation (the server keeps the shape definition here). */
  readonly meta: Uint8Array
  /** The same bytes as a string of one character per byte (latin1), where the log keeps them so: no copy to read. */
  readonly metaText?: string
  /** The published head. */
  head(): LogHead
  /**
   * Appends the entries of one transaction (all with the same `tx`, ops
   * increasing) with one batched write per file. Entries at or below the log's
   * last appended offset are skipped, so replaying a transaction after a crash
   * is a no-op. Returns how many entries were appended.
   *
   * `more: true` says further entries of the same transaction follow in another
   * call (a transaction too large to hold in memory); it is published only after
   * the call without `more`.
   *
   * The log a `SnapshotWriter` built refuses (`invalid_append`) new entries at
   * or below the watermark that its finishing flush published: they could not
   * have been synced before that watermark, which recovery relies on.
   * (`advance` already rules them out for a caller that keeps its promise.)
   */
  appendTransaction(entries: readonly LogEntryInput[], options?: AppendOptions): number
  /**
   * `appendTransaction` for entries given as parallel arrays: the first `count`
   * of `ops` (the entries' op numbers, integers below 2^53) and `jsons`, all in
   * transaction `tx`. The same rules and result, without an object and a
   * BigInt per entry; the arrays are read during the call and not kept, so a
   * caller may reuse them (they may be longer than `count`).
   */
  appendLines(tx: bigint, ops: readonly number[], jsons: readonly Uint8Array[], count: number, options?: AppendOptions): number
  /** Entries strictly after `after`, to the end of their chunk. See `LogRead`. */
  read(after: LogOffset): LogRead
}

/**
 * Builds a new log: the snapshot region, then (once `finish` is called) the
 * transactions the caller queued while the snapshot ran. The log exists only
 * once `finish` resolves.
 *
 * Why live entries go through the writer: the queued transactions can have
 * commit LSNs at or below the store's durable watermark (other logs kept
 * advancing it during the snapshot). A finished log can never take those, since
 * recovery treats every record at or below the watermark as synced; so they
 * must be in the new log before its directory becomes durable.
 */
export interface SnapshotWriter {
  /**
   * Appends snapshot rows (JSON lines without separator). `closeChunk: true`
   * closes the chunk after the last of them, whatever its size: a compacted log
   * (built again from an existing one) keeps each snapshot row in the chunk
   * number, so at the virtual offset `0_n`, it had, since clients hold those
   * offsets. An empty `rows` with `closeChunk` is refused (a chunk ends at an entry).
   */
  append(rows: readonly Uint8Array[], options?: SnapshotAppendOptions): void
  /**
   * Appends the `snapshot-end` line and closes the last snapshot chunk. The store
   * then makes the log durable and publishes it in a group commit: the snapshot
   * region, every transaction appended through `appendTransaction` before that
   * commit synced the log, and of those the complete ones at or below the
   * watermark it publishes become visible together. Until then nothing of the
   * shape exists on disk under its id (a crash leaves no half-built log).
   *
   * The commit waits (one more flush each time) while a transaction at or below
   * its watermark is still open (`more`) or was appended after the log was
   * synced, so every such transaction is durable with the directory.
   */
  finish(snapshotEnd?: Uint8Array): Promise<ShapeLog>
  /**
   * Appends the `snapshot-end` line and closes the snapshot region without
   * asking for the log to be finished yet: from here on `appendTransaction`
   * takes the queued transactions, at the caller's pace (a queue read back
   * from disk in batches), and the finishing flush cannot rename the log before
   * the caller says so by calling `finish()` (with no argument). Optional:
   * `finish(snapshotEnd)` does both at once.
   */
  endSnapshot(snapshotEnd: Uint8Array): void
  /**
   * Appends one transaction after the snapshot: same rules as
   * `ShapeLog.appendTransaction` (one transaction per call, offsets increasing,
   * replays skipped, `more` for a transaction in parts), except that any commit
   * LSN above 0 is accepted, also at or below the store's `durableLsn`, until
   * the finishing flush renames the log's directory into place (inside that
   * flush, so possibly a little before the promise resolves).
   *
   * Legal from the call to `endSnapshot` or `finish` on (before: `invalid_append`), before and
   * after its promise resolves. From the rename on the writer is the log: it
   * behaves exactly like the returned `ShapeLog.appendTransaction`, which
   * refuses (`invalid_append`) a new transaction at or below the watermark that
   * flush published. So append the queued transactions right after calling
   * `finish`, yielding to the event loop only between the parts of a
   * transaction appended with `more` (the rename waits for those). A queued
   * transaction refused this way is missing from the log: delete the shape
   * and build it again.
   *
   * A failed write before the directory is published fails the whole snapshot,
   * as a failed `append` does: the error is thrown here, `finish` rejects with
   * it and nothing is left.
   */
  appendTransaction(entries: readonly LogEntryInput[], options?: AppendOptions): number
  /** `appendTransaction` as parallel arrays: see `ShapeLog.appendLines`. */
  appendLines(tx: bigint, ops: readonly number[], jsons: readonly Uint8Array[], count: number, options?: AppendOptions): number
  /**
   * Drops everything written so far, also after `finish` was called: `finish`
   * then rejects with `shape_deleted`, or, when the store had already published
   * the log, the log is deleted before `abort` resolves. A no-op once `finish`
   * has resolved (use `deleteShape`) or failed.
   */
  abort(): Promise<void>
}

export interface FlushResult {
  /** The durable watermark after this flush. */
  readonly durableLsn: bigint
  /**
   * Ids of logs whose published head moved. Filled for a `flush()` call and
   * whenever a listener registered without `{ advanced: false }`; a store may
   * leave it empty for a flush of its own that no such listener hears (it
   * then publishes the logs lazily, as they are next read or appended to).
   */
  readonly advanced: readonly string[]
  /** How long the flush took, from its start to its publication (for latency metrics). */
  readonly durationMs: number
}

export interface ShapeLogStore {
  readonly readOnly: boolean
  /** Every transaction with commit LSN at or below this is durable in every log. */
  readonly durableLsn: bigint
  /** Starts a new log. Throws if the id exists. */
  createShape(id: string, options?: { meta?: Uint8Array }): SnapshotWriter
  /** The log with that id, if it exists (and its snapshot is finished). */
  get(id: string): ShapeLog | undefined
  /** Ids of every finished log. */
  ids(): string[]
  /** Every finished log (as `get` gives each of `ids()`; a restore of 100k logs looks none up by id). */
  finishedLogs(): Iterable<ShapeLog>
  /** Removes a log at once for readers; its files go in the background. */
  deleteShape(id: string): Promise<boolean>
  /**
   * The caller's promise that every transaction with commit LSN ≤ `lsn` that
   * belongs in any log has been appended. The next flush makes it durable and
   * publishes it. Never moves backwards.
   */
  advance(lsn: bigint): void
  /** Group commit now: sync every dirty log once, publish the watermark. */
  flush(): Promise<FlushResult>
  /**
   * Called after every flush that published something. `advanced: false`: the
   * listener never reads `FlushResult.advanced` (finding which logs moved
   * costs a visit to every log appended since the last flush).
   */
  onFlush(listener: (result: FlushResult) => void, options?: FlushListenerOptions): () => void
  close(): Promise<void>
}

export interface FlushListenerOptions {
  /** Whether the listener reads `FlushResult.advanced`; default true. */
  readonly advanced?: boolean
}

/** Reads a `LogRead` into one buffer. For tests, tools and the benchmark. */
export type SpanReader = (read: LogRead) => Buffer
