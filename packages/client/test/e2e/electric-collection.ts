import type { Row as ElectricRow } from '@electric-sql/client'
import { type Collection, createCollection, createLiveQueryCollection } from '@tanstack/db'
import { electricCollectionOptions } from '@tanstack/electric-db-collection'

/**
 * TanStack DB's Electric collection (from npm, unchanged) following one shape
 * of a Sluice server: the library a large share of Electric apps sync through,
 * and the one that applies subquery tags and move events itself. A test
 * reads its materialised rows and compares them with Postgres.
 */

export interface ElectricCollectionTarget {
  /** `…/v1/shape`. */
  readonly url: string
  readonly table: string
  readonly where?: string
  /** Values of `$1`, `$2`, … in `where`. */
  readonly params?: readonly string[]
  /** The row's key in the collection; the shape's tables key rows by `id`. */
  readonly keyColumn?: string
  /**
   * `eager` (default) syncs everything before ready; `progressive` syncs in the background;
   * `on-demand` (`offset=now`, `log=changes_only`) loads rows only for a query, so the rows read
   * are those of a live query selecting every row of the collection.
   */
  readonly syncMode?: 'eager' | 'progressive' | 'on-demand'
}

export interface FollowedCollection {
  readonly collection: Collection<ElectricRow>
  /** The rows, keyed by the key column as text, without TanStack's `$`-prefixed virtual fields. */
  rows(): Map<string, Record<string, unknown>>
  /** Errors the stream reported (a 4xx such as a refused where clause lands here). */
  readonly errors: unknown[]
  close(): Promise<void>
}

let collections = 0

/** Creates the collection and resolves once its first sync is complete. */
export async function followCollection(target: ElectricCollectionTarget): Promise<FollowedCollection> {
  const keyColumn = target.keyColumn ?? 'id'
  const errors: unknown[] = []
  const params = {
    table: target.table,
    ...(target.where === undefined ? {} : { where: target.where }),
    ...(target.params === undefined ? {} : { params: [...target.params] }),
  }
  const collection = createCollection(
    electricCollectionOptions<ElectricRow>({
      id: `sluice-e2e-${++collections}`,
      syncMode: target.syncMode ?? 'eager',
      getKey: (row) => String(row[keyColumn]),
      shapeOptions: {
        url: target.url,
        params,
        onError: (error) => {
          errors.push(error)
        },
      },
    }),
  )
  await collection.preload()
  const everything = target.syncMode === 'on-demand' ? createLiveQueryCollection((q) => q.from({ row: collection })) : undefined
  await everything?.preload()
  const source = (everything ?? collection) as Collection<ElectricRow>
  return {
    collection,
    errors,
    rows() {
      const out = new Map<string, Record<string, unknown>>()
      for (const row of source.state.values()) {
        out.set(String(row[keyColumn]), Object.fromEntries(Object.entries(row).filter(([name]) => !name.startsWith('$'))))
      }
      return out
    },
    close: async () => {
      await everything?.cleanup()
      await collection.cleanup()
    },
  }
}
