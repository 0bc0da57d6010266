/**
 * A standby writer's wait (`sluice start --standby`, docs/scaling.md "Restart
 * and takeover"). Before it holds the writer lock it has built its store's
 * logs from the writer's heads file (`FileLogStore.prepare`) and restored its
 * shapes on them (`ShapeManager.prepare`). While the writer lives it follows
 * each new heads file, at most every `standbyRefreshMs`; when the lock comes
 * free, the store's promotion replays the journal and checks every log against
 * its files, keeping the objects of logs that stayed, and the shape manager
 * then only restores what changed since.
 */
import type { FileLogStore, StoreLockOptions } from '@sluice/storage'
import { DEFAULT_STANDBY_REFRESH_MS } from './defaults.js'
import { ServerError } from './errors.js'
import type { ShapeLogger, ShapeManager } from './shapes/shape-manager.js'

export interface StandbyOptions {
  readonly writerLock?: StoreLockOptions
  /** Gives up the wait (the promise rejects with `standby_stopped`); the store, never promoted, is closed. */
  readonly signal?: AbortSignal
  readonly standbyRefreshMs?: number
  readonly logger?: ShapeLogger
}

/** Waits for the writer lock, keeping the prepared store and shapes current, and promotes the store once the lock is ours. */
export async function waitAndPromote(store: FileLogStore, shapes: ShapeManager, options: StandbyOptions): Promise<void> {
  const refreshMs = options.standbyRefreshMs ?? DEFAULT_STANDBY_REFRESH_MS
  const logger = options.logger
  logger?.info({ logs: store.size, shapes: shapes.size }, 'standby: prepared')
  let last = performance.now()
  await store.promote({
    ...options.writerLock,
    whileWaiting: async () => {
      if (options.signal?.aborted === true) throw new ServerError('standby_stopped')
      if (performance.now() - last < refreshMs) return
      last = performance.now()
      try {
        const started = performance.now()
        if (!(await store.refresh())) return
        await shapes.sync()
        logger?.info({ logs: store.size, shapes: shapes.size, ms: Math.round(performance.now() - started) }, 'standby: followed the writer')
      } catch (err) {
        // Tried again at the next new heads file; what it missed is left to the takeover.
        logger?.warn({ err }, 'standby: following the writer failed')
      }
    },
  })
}
