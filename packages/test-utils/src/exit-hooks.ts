import { isMainThread } from 'node:worker_threads'

/**
 * Synchronous cleanups that run when the process goes away without the test
 * having cleaned up: a normal exit, or SIGINT/SIGTERM/SIGHUP. Only synchronous
 * work is possible here ('exit' listeners cannot await), so callers register
 * the blunt version of their teardown (SIGKILL, rm -rf, `pg_ctl -m immediate`).
 */
type Cleanup = () => void

const cleanups = new Set<Cleanup>()
const SIGNALS: readonly NodeJS.Signals[] = ['SIGINT', 'SIGTERM', 'SIGHUP']
let exitListenerInstalled = false
let signalListenersInstalled = false

function runCleanups(): void {
  for (const cleanup of [...cleanups]) {
    cleanups.delete(cleanup)
    try {
      cleanup()
    } catch {
      // The process is going away; one failed cleanup must not stop the others.
    }
  }
}

function onSignal(signal: NodeJS.Signals): void {
  runCleanups()
  removeSignalListeners()
  // Listening for a signal cancels its default action (terminate). Restore it
  // unless someone else still handles the signal and decides for themselves.
  if (process.listenerCount(signal) === 0) process.kill(process.pid, signal)
}

function removeSignalListeners(): void {
  if (!signalListenersInstalled) return
  for (const signal of SIGNALS) process.removeListener(signal, onSignal)
  signalListenersInstalled = false
}

/**
 * Registers `cleanup` to run once if the process exits or is signalled before
 * the returned function is called. Call the returned function after a normal
 * teardown so the cleanup does not run twice.
 */
export function onProcessExit(cleanup: Cleanup): () => void {
  cleanups.add(cleanup)
  if (!exitListenerInstalled) {
    process.on('exit', runCleanups)
    exitListenerInstalled = true
  }
  // Signals reach only the main thread; and while nothing needs cleaning we keep
  // our hands off signal handling so the default behaviour is untouched.
  if (!signalListenersInstalled && isMainThread) {
    for (const signal of SIGNALS) process.on(signal, onSignal)
    signalListenersInstalled = true
  }
  return () => {
    cleanups.delete(cleanup)
    if (cleanups.size === 0) removeSignalListeners()
  }
}
