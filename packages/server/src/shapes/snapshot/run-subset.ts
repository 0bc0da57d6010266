import type pg from 'pg'
import { ServerError } from '../../errors.js'
import type { TableInfo } from '../table-catalog.js'
import { isVisibleInSnapshot } from './pg-snapshot.js'
import type { PgSnapshot } from './pg-snapshot.js'
import { type SnapshotResult, runSnapshot } from './run-snapshot.js'
import { SnapshotError } from './snapshot-error.js'
import type { SubsetQuery } from './subset-query.js'

/**
 * Runs a subset snapshot (docs/protocol.md §6): the query from `buildSubsetQuery`
 * in its own REPEATABLE READ READ ONLY transaction (`runSnapshot`: display
 * settings, ACCESS SHARE lock, catalog check, cursor), on a pool the caller
 * bounds.
 *
 * The response also tells the client where to continue the shape's stream
 * (`position`, the log's head): every change up to there must be visible in the
 * snapshot, or the client, skipping past them, would never see it. A commit is
 * in the log once replication delivered it, but Postgres delivers a commit
 * before the committing backend publishes it to new snapshots, so a snapshot
 * taken just after can still miss it. `fix` is therefore read (synchronously,
 * with the router's recent xids) before the snapshot is taken, and a snapshot
 * that does not see all those xids is taken again, as shape creation does.
 */

export interface SubsetFix<P> {
  /** The xids of the transactions routed last, up to the moment `position` was read. */
  readonly recentXids: readonly number[]
  readonly position: P
}

export interface SubsetRunRequest<P> {
  readonly table: TableInfo
  readonly query: SubsetQuery
  /** Read right before each attempt; see the module comment. */
  readonly fix: () => SubsetFix<P>
  readonly signal?: AbortSignal | undefined
  /** Bounds the whole query, row streaming included (see `SnapshotOptions`). */
  readonly statementTimeoutMs?: number | undefined
}

export interface SubsetStart<P> {
  readonly snapshot: PgSnapshot
  /** `pg_current_wal_insert_lsn()` after the snapshot: above the commit LSN of everything it sees. */
  readonly insertLsn: bigint
  readonly position: P
}

export interface SubsetSink<P> {
  /** Once, when the snapshot is fixed and known to cover `position`, before any rows. */
  start(info: SubsetStart<P>): void | Promise<void>
  rows(lines: Uint8Array[]): void | Promise<void>
}

/** Attempts at a snapshot that raced a commit before giving up (the race is microseconds wide). */
export const MAX_SUBSET_ATTEMPTS = 5

class RacedCommit extends ServerError<'raced_commit'> {
  override readonly name = 'RacedCommit'
  constructor(message: string) {
    super('raced_commit', message)
  }
}

export async function runSubsetSnapshot<P>(pool: pg.Pool, request: SubsetRunRequest<P>, sink: SubsetSink<P>): Promise<SnapshotResult> {
  for (let attempt = 1; ; attempt++) {
    const fixed = request.fix()
    try {
      return await runSnapshot(
        pool,
        {
          table: request.table,
          text: request.query.text,
          values: request.query.values,
          signal: request.signal,
          statementTimeoutMs: request.statementTimeoutMs,
        },
        {
          start: async ({ snapshot, insertLsn }) => {
            const raced = fixed.recentXids.find((xid) => !isVisibleInSnapshot(snapshot, xid))
            if (raced !== undefined) throw new RacedCommit(`transaction ${raced} is not visible yet`)
            await sink.start({ snapshot, insertLsn, position: fixed.position })
          },
          rows: (lines) => sink.rows(lines),
        },
      )
    } catch (error) {
      const race = error instanceof SnapshotError && error.cause instanceof RacedCommit ? error.cause : undefined
      if (race === undefined) throw error
      if (attempt >= MAX_SUBSET_ATTEMPTS) {
        throw new SnapshotError('query_failed', `the subset snapshot kept missing a transaction already replicated (${race.message})`, { cause: error })
      }
    }
  }
}
