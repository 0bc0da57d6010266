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
 * trigger: that needs a superuser; the table versions in use are a handful
 * whatever the number of shapes, which the manager keeps indexed by version),
 * and each shape whose table is no longer the one it was made for is
 * invalidated: its waiting requests get their 409 then, not at their
 * long-poll timeout.
 */

export interface CatalogWatchOptions {
  readonly db: Queryable
  readonly intervalMs: number
  /** Each table version (TableInfo object) some shape was made for. */
  readonly tables: () => readonly TableInfo[]
  /** Invalidates the shapes made for `info`. */
  readonly invalidate: (info: TableInfo, reason: Invalidation) => Promise<void>
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
   * One check. The table versions are listed before the query is sent, so a
   * version loaded from a catalog answer newer than this one is never judged
   * by it; shapes made meanwhile for a listed version share its fate, rightly.
   */
  async check(): Promise<void> {
    const tables = this.options.tables()
    if (tables.length === 0) return
    const states = await loadTableStates(this.options.db, [...new Set(tables.map((info) => info.oid))])
    for (const info of tables) {
      const reason = catalogChanged(info, states.get(info.oid))
      if (reason !== undefined) await this.options.invalidate(info, reason)
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
