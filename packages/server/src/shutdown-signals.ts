// SIGINT/SIGTERM/SIGHUP handling for the processes that run a Sluice server (the
// CLI, the demo): the first signal drains, a later one exits at once. SIGHUP is
// what closing the terminal or SSH session of `sluice start` sends; left to its
// default it killed the process with no drain and no exit hooks (the embedded
// Postgres, in a session of its own, kept running).
//
// Supervisors (`timeout`, systemd's control-group kill, container runtimes, a
// terminal's Ctrl-C) signal every process of a group at once, and wrappers such
// as npm and scripts/run.mjs pass the signal on as well: one stop request can
// reach the server two or three times within milliseconds. Those repeats must
// not turn an orderly drain into an exit at once, so signals that arrive within
// REPEAT_WINDOW_MS of the first count as that one.

/** Signals this soon after the first are the same request, delivered again. */
export const REPEAT_WINDOW_MS = 1000

export interface ShutdownSignalHandlers {
  /** The first signal: drain and exit when done. Called once. */
  readonly stop: (signal: NodeJS.Signals) => void
  /** A signal after the window: the user insists. Should exit the process. */
  readonly force: (signal: NodeJS.Signals) => void
  /** Repeats inside the window, for the log. */
  readonly repeated?: (signal: NodeJS.Signals) => void
}

/** The signals that stop a server. */
const SHUTDOWN_SIGNALS: readonly NodeJS.Signals[] = ['SIGTERM', 'SIGINT', 'SIGHUP']

/** Installs the handlers on SIGTERM, SIGINT and SIGHUP; returns a function that removes them. */
export function onShutdownSignals(handlers: ShutdownSignalHandlers, options: { readonly windowMs?: number } = {}): () => void {
  const windowMs = options.windowMs ?? REPEAT_WINDOW_MS
  let first: number | undefined
  const onSignal = (signal: NodeJS.Signals): void => {
    const now = performance.now()
    if (first === undefined) {
      first = now
      handlers.stop(signal)
    } else if (now - first < windowMs) {
      handlers.repeated?.(signal)
    } else {
      handlers.force(signal)
    }
  }
  for (const signal of SHUTDOWN_SIGNALS) process.on(signal, onSignal)
  return () => {
    for (const signal of SHUTDOWN_SIGNALS) process.off(signal, onSignal)
  }
}
