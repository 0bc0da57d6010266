import type { StoreLockOptions } from '@sluice/storage'
import { loadNativeAddon } from './native-addon.js'

/** How often a standby tries the writer lock (others: the storage engine's LOCK_RETRY_MS). */
export const STANDBY_LOCK_RETRY_MS = 20

/** What the server logs about the lock (a pino logger's shape). */
interface LockLogger {
  info(fields: object, message: string): void
  warn(fields: object, message: string): void
}

/**
 * How this server takes its storage directory's writer lock: flock(2) through
 * the `@sluice/sendfile` addon (the kernel releases it however the holder
 * exits, so a restart right after a kill -9 never finds a stale lock), or the
 * storage engine's pid file where the addon cannot load. A standby waits for
 * the lock as long as it takes; any other start waits `waitMs` for a writer
 * that is going away (a restart racing the old process's exit), then fails.
 */
export async function writerLockOptions(options: { standby: boolean; waitMs: number; logger: LockLogger }): Promise<StoreLockOptions & { kind: 'flock' | 'pid file' }> {
  const lockFile = (await loadNativeAddon())?.lockFile
  const kind = lockFile === undefined ? 'pid file' : 'flock'
  if (lockFile === undefined) {
    options.logger.warn({ lock: kind }, 'the storage writer lock is a pid file (the native addon did not load): every writer of this storage must run the same build')
  }
  return {
    kind,
    lockFile,
    waitMs: options.standby ? Number.POSITIVE_INFINITY : options.waitMs,
    // A standby's whole point is to take over at once: an attempt is an open, a flock and a close.
    ...(options.standby ? { retryMs: STANDBY_LOCK_RETRY_MS } : {}),
    onWait: (holder) =>
      options.logger.info({ holder, lock: kind, standby: options.standby }, options.standby ? 'standby: waiting for the writer lock' : 'waiting for the writer lock'),
  }
}
