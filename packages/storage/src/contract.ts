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

export interface AppendOptions {
  readonly more?: boolean
}

export interface ShapeLog {
  readonly id: string
  /** Opaque bytes given at creation (the server keeps the shape definition here). */
  readonly meta: Uint8Array
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
   */
  appendTransaction(entries: readonly LogEntryInput[], options?: AppendOptions): number
  /** Entries strictly after `after`, to the end of their chunk. See `LogRead`. */
  read(after: LogOffset): LogRead
}

/** Builds the snapshot region of a new log; the log exists only once `finish` resolves. */
export interface SnapshotWriter {
  /** Appends snapshot rows (JSON lines without separator). */
  append(rows: readonly Uint8Array[]): void
  /**
   * Appends the `snapshot-end` line, closes the last snapshot chunk, makes the
   * whole region durable and publishes the log. Until then nothing of the shape
   * exists on disk under its id (a crash leaves no half snapshot behind).
   */
  finish(snapshotEnd: Uint8Array): Promise<ShapeLog>
  /** Drops everything written so far. */
  abort(): Promise<void>
}

export interface FlushResult {
  /** The durable watermark after this flush. */
  readonly durableLsn: bigint
  /** Ids of logs whose published head moved. */
  readonly advanced: readonly string[]
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
  /** Called after every flush that published something. */
  onFlush(listener: (result: FlushResult) => void): () => void
  close(): Promise<void>
}

/** Reads a `LogRead` into one buffer. For tests, tools and the benchmark. */
export type SpanReader = (read: LogRead) => Buffer
