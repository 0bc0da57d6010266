import { ServerError, codeTable } from '../../errors.js'

/**
 * Spill errors. Everything the spill buffers raise is a `SpillError` with a
 * stable `code` (defined in src/errors.ts); callers branch on the code (and on
 * `errno` for the system error underneath, e.g. 'ENOSPC'), never on the message.
 */
export const SPILL_ERROR_CODES = codeTable(
  'spill_open_failed',
  'spill_write_failed',
  'spill_read_failed',
  'spill_transaction_failed',
  'spill_corrupt',
  'spill_invalid_item',
  'spill_closed',
)

export type SpillErrorCode = keyof typeof SPILL_ERROR_CODES

export class SpillError extends ServerError<SpillErrorCode> {
  override readonly name = 'SpillError'
  /** The system error code underneath ('ENOSPC', 'EIO', ...), when there is one. */
  readonly errno: string | undefined

  constructor(code: SpillErrorCode, message?: string, options?: { cause?: unknown }) {
    super(code, message, options)
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
