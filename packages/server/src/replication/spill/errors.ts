/**
 * Spill errors. Everything the spill buffers raise is a `SpillError` with a
 * stable `code`; callers branch on the code (and on `errno` for the system
 * error underneath, e.g. 'ENOSPC'), never on the message.
 */
export const SPILL_ERROR_CODES = {
  spill_open_failed: 'Creating, opening or cleaning the spill directory or a spill file failed',
  spill_write_failed: 'Writing a spill file failed',
  spill_read_failed: 'Reading a spill file back failed',
  spill_transaction_failed: 'An earlier spill write of this transaction failed; the transaction can only be dropped',
  spill_corrupt: 'A spill file holds bytes that do not decode',
  spill_invalid_item: 'A change or queue item cannot be encoded',
  spill_closed: 'The spill buffer or queue is closed',
} as const

export type SpillErrorCode = keyof typeof SPILL_ERROR_CODES

export class SpillError extends Error {
  override readonly name = 'SpillError'
  /** The system error code underneath ('ENOSPC', 'EIO', ...), when there is one. */
  readonly errno: string | undefined

  constructor(
    readonly code: SpillErrorCode,
    message: string = SPILL_ERROR_CODES[code],
    options?: { cause?: unknown },
  ) {
    super(message, options)
    this.errno = errnoOf(options?.cause)
  }

  /** True when the disk (or a quota) is full: the condition clears when space is freed. */
  get diskFull(): boolean {
    return this.errno === 'ENOSPC' || this.errno === 'EDQUOT'
  }
}

function errnoOf(cause: unknown): string | undefined {
  if (cause instanceof SpillError) return cause.errno
  const code = (cause as { code?: unknown } | undefined)?.code
  return typeof code === 'string' ? code : undefined
}

/** Wraps a failed system call (or passes a SpillError through). */
export function spillError(code: SpillErrorCode, what: string, err: unknown): SpillError {
  if (err instanceof SpillError) return err
  const sys = err as NodeJS.ErrnoException | undefined
  const detail = sys?.code !== undefined ? `${sys.code}: ${sys.message}` : String(err)
  return new SpillError(code, `${what} failed: ${detail}`, { cause: err })
}
