/**
 * Constants shared across the package: the public defaults of both engines'
 * settings and the names of a log's files, which the writer, the read-only
 * store and recovery all use. One module, so that a reader of the store never
 * imports the writer for them.
 */
import { StorageError } from './errors.js'
import { defaultMaxOpenFiles } from './open-file-limit.js'

/** A chunk closes after the entry that makes it reach this many bytes (Electric's default). */
export const DEFAULT_CHUNK_BYTES = 10 * 1024 * 1024

// Short enough that live readers barely notice the wait for durability, long
// enough that a busy stream shares each sync among many transactions.
export const DEFAULT_FLUSH_INTERVAL_MS = 10
export const DEFAULT_FLUSH_BYTES = 8 * 1024 * 1024
export const DEFAULT_MAX_OPEN_FILES = defaultMaxOpenFiles()
// Replay after a crash reads about this much (up to 4x with many logs: see
// closeDue in file/journal.ts); a checkpoint syncs the logs of a segment once,
// so bigger segments mean fewer, larger checkpoints.
export const DEFAULT_JOURNAL_SEGMENT_BYTES = 64 * 1024 * 1024
// Bounds how long a quiet store keeps a journal to replay (up to 10x with many logs).
export const DEFAULT_JOURNAL_SEGMENT_AGE_MS = 30_000
// How often a running writer rewrites the heads file when something changed
// (heads-snapshots.ts): an open after a crash scans the logs appended to since.
// With 100k logs each write takes a few hundred ms of CPU, in slices.
export const DEFAULT_HEADS_INTERVAL_MS = 30_000
// Large enough that a segment's own size, not memory, ends it: the budget
// decides how many changes a log gathers between two write-backs, each of
// which costs system calls on two files, so sealing segments early because of
// a small budget makes every write-back carry only a change or two. With few
// logs the tails stay near what a segment holds, far below it.
export const DEFAULT_TAIL_BUDGET_BYTES = 1024 * 1024 * 1024

/** The files of a log's directory (format.ts has their byte tables). */
export const LOG_FILES = { data: 'log.dat', entries: 'entries.idx', chunks: 'chunks.idx', meta: 'meta.bin' } as const

const SHAPE_ID = /^[A-Za-z0-9_-]{1,128}$/

/** Whether `id` can name a shape (see `checkShapeId`). */
export function isShapeId(id: string): boolean {
  return SHAPE_ID.test(id)
}

/** Shape ids become directory names, so they are restricted to a safe alphabet. */
export function checkShapeId(id: string): void {
  if (!isShapeId(id)) throw new StorageError('invalid_shape_id', `invalid shape id ${JSON.stringify(id)}`)
}
