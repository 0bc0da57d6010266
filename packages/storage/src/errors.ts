/**
 * Storage errors. Every error the engine raises is a `StorageError` with a stable
 * `code`; callers branch on the code, never on the message.
 */
export const STORAGE_ERROR_CODES = {
  disk_full: 'The disk is full (ENOSPC)',
  io_error: 'An I/O operation failed',
  corrupt_log: 'A shape log failed its integrity checks',
  unsupported_format: 'A file was written by an unknown format version',
  invalid_append: 'The entries do not form a valid transaction for this log',
  invalid_shape_id: 'Shape ids are 1-128 characters of [A-Za-z0-9_-]',
  shape_exists: 'A shape with this id already exists',
  shape_deleted: 'The shape log was deleted',
  read_only: 'The store was opened read-only',
  store_closed: 'The store is closed',
  store_not_promoted: 'The store is prepared for a standby and takes writes only once promoted',
  store_locked: 'Another process holds this store for writing',
} as const

export type StorageErrorCode = keyof typeof STORAGE_ERROR_CODES

export class StorageError extends Error {
  override readonly name = 'StorageError'
  constructor(
    readonly code: StorageErrorCode,
    message: string = STORAGE_ERROR_CODES[code],
    options?: { cause?: unknown },
  ) {
    super(message, options)
  }
}

/** Maps a failed system call to a storage error, keeping the original as `cause`. */
export function fromSystemError(err: unknown, what: string): StorageError {
  if (err instanceof StorageError) return err
  const sys = err as NodeJS.ErrnoException
  const code: StorageErrorCode = sys?.code === 'ENOSPC' || sys?.code === 'EDQUOT' ? 'disk_full' : 'io_error'
  const detail = sys?.code ? `${sys.code}: ${sys.message}` : String(err)
  return new StorageError(code, `${what} failed: ${detail}`, { cause: err })
}

/**
 * Raised by `flush()` when a sync failed. The logs named in `rolledBack` lost
 * every entry that was not yet durable; the caller must append again everything
 * after `durableLsn` (replay is idempotent for the logs that kept theirs).
 */
export class FlushError extends StorageError {
  constructor(
    cause: StorageError,
    readonly durableLsn: bigint,
    readonly rolledBack: readonly string[],
  ) {
    super(cause.code, `${cause.message}; durable watermark stays at ${durableLsn}`, { cause })
  }
}
