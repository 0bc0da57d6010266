// One fault repeating (a full disk failing every flush, a replication stream
// reconnecting into the same error) would otherwise write the same line
// hundreds of times a minute, drowning whatever else the log says. Each key's
// first occurrence is written in full; repeats within a window are only
// counted, and the window ends with one summary line naming the count and
// carrying the last occurrence's fields. A key that did not repeat in its
// window is forgotten: its next occurrence is written in full again.

/** The timer port (real timers by default; a test passes a clock of its own). */
export interface DedupeTimers {
  setTimeout(callback: () => void, ms: number): unknown
  clearTimeout(handle: unknown): void
}

/** One line: the pino-style data object and message. */
export type DedupeWrite = (data: Record<string, unknown>, message: string) => void

export interface LogDedupeOptions {
  /** How long repeats of one key are counted before the summary line. */
  readonly windowMs: number
  readonly timers?: DedupeTimers
}

/** Repeats of one key are summarised at most this often by default: a few lines a minute per fault. */
export const DEFAULT_DEDUPE_WINDOW_MS = 10_000

interface Pending {
  count: number
  data: Record<string, unknown>
  message: string
  readonly write: DedupeWrite
  timer: unknown
}

const realTimers: DedupeTimers = {
  setTimeout: (callback, ms) => {
    const timer = setTimeout(callback, ms)
    // A summary still due must not keep a process alive that has nothing else to do.
    timer.unref()
    return timer
  },
  clearTimeout: (handle) => clearTimeout(handle as NodeJS.Timeout),
}

export class LogDedupe {
  private readonly windowMs: number
  private readonly timers: DedupeTimers
  /** Keys seen within their current window, with the repeats counted so far. */
  private readonly windows = new Map<string, Pending>()

  constructor(options: LogDedupeOptions) {
    this.windowMs = options.windowMs
    this.timers = options.timers ?? realTimers
  }

  /**
   * Writes the line through `write` unless the same `key` was written within the
   * window; then it is counted, and the window's summary line reports it.
   */
  log(key: string, write: DedupeWrite, data: Record<string, unknown>, message: string): void {
    const pending = this.windows.get(key)
    if (pending !== undefined) {
      pending.count++
      pending.data = data
      pending.message = message
      return
    }
    write(data, message)
    this.open(key, write, data, message)
  }

  /** Writes the summary of every key with repeats now (the fault cleared, or the process stops) and forgets them all. */
  flush(): void {
    for (const key of [...this.windows.keys()]) this.close(key, false)
  }

  /** Repeats counted and not yet summarised, per key (for tests and for logging a recovery). */
  get pendingRepeats(): number {
    let n = 0
    for (const pending of this.windows.values()) n += pending.count
    return n
  }

  private open(key: string, write: DedupeWrite, data: Record<string, unknown>, message: string): void {
    const pending: Pending = { count: 0, data, message, write, timer: undefined }
    pending.timer = this.timers.setTimeout(() => this.close(key, true), this.windowMs)
    this.windows.set(key, pending)
  }

  /** Ends a key's window; `again`: repeats keep the key counted for another window. */
  private close(key: string, again: boolean): void {
    const pending = this.windows.get(key)
    if (pending === undefined) return
    this.timers.clearTimeout(pending.timer)
    this.windows.delete(key)
    if (pending.count === 0) return
    const { count, data, message, write } = pending
    write({ ...data, repeated: count, windowMs: this.windowMs }, `${message} (repeated ${count} time${count === 1 ? '' : 's'})`)
    // Still repeating: the next window counts from here, so a lasting fault writes one line per window.
    if (again) this.open(key, write, data, message)
  }
}

/**
 * The key of an error line: the message and what identifies the error (its
 * class, code and text). Fields that vary between otherwise identical
 * occurrences (a retry delay, a timestamp) are data, not key; so are the
 * numbers in the text: a retry that fails the same way names the next
 * journal segment, or a watermark that moved in between.
 */
export function errorKey(message: string, err: unknown): string {
  if (!(err instanceof Error)) return `${message}\0${withoutNumbers(String(err))}`
  const code = (err as { code?: unknown }).code
  return `${message}\0${err.name}\0${code === undefined ? '' : String(code)}\0${withoutNumbers(err.message)}`
}

function withoutNumbers(text: string): string {
  return text.replace(/\d+/g, '#')
}
