import type { Queryable } from '../replication/index.js'
import { catalogChanged } from './invalidation.js'
import type { Invalidation } from './route-contracts.js'
import { type TableInfo, loadTableStates } from './table-catalog.js'

/*
 * DDL the replication stream does not announce. pgoutput says nothing of a
 * DROP TABLE, and of an ALTER TABLE (a rename, a new primary key, a new
 * replica identity) only with the table's next change, if one ever comes,
 * and then with a description that for a new key under REPLICA IDENTITY FULL
 * is the very same as before. So the catalog is asked instead: every
 * `intervalMs`, one query for all the tables that have shapes (no event
 * trigger: that needs a superuser), and each shape whose table is no longer
 * the one it was made for is invalidated, and its waiting requests get their
 * 409 then, not at their long-poll timeout.
 */

export interface CatalogWatchOptions {
  readonly db: Queryable
  readonly intervalMs: number
  /** The shapes to check: each table version they were made for, with their handles. */
  readonly shapes: () => Map<TableInfo, string[]>
  /** Invalidates those of `handles` still made for `info`. */
  readonly invalidate: (info: TableInfo, handles: readonly string[], reason: Invalidation) => Promise<void>
  readonly onError: (error: unknown) => void
}

export class CatalogWatch {
  private timer: NodeJS.Timeout | undefined
  private running: Promise<void> | undefined
  private stopped = false

  constructor(private readonly options: CatalogWatchOptions) {}

  start(): void {
    if (this.options.intervalMs > 0) this.schedule()
  }

  async stop(): Promise<void> {
    this.stopped = true
    if (this.timer !== undefined) clearTimeout(this.timer)
    await this.running
  }

  /**
   * One check. The shapes are listed before the query is sent, so a shape
   * created from a catalog answer newer than this one is never judged by it.
   */
  async check(): Promise<void> {
    const shapes = this.options.shapes()
    if (shapes.size === 0) return
    const oids = new Set<number>()
    for (const info of shapes.keys()) oids.add(info.oid)
    const states = await loadTableStates(this.options.db, [...oids])
    for (const [info, handles] of shapes) {
      const reason = catalogChanged(info, states.get(info.oid))
      if (reason !== undefined) await this.options.invalidate(info, handles, reason)
    }
  }

  private schedule(): void {
    if (this.stopped) return
    this.timer = setTimeout(() => {
      this.running = this.check()
        .catch(this.options.onError)
        .finally(() => {
          this.running = undefined
          this.schedule()
        })
    }, this.options.intervalMs)
    // A server with nothing else to do exits; the watch never keeps it alive.
    this.timer.unref()
  }
}
