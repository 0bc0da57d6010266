import type { Row, Shape, ShapeStream, Txid } from '@sluice/client'
import { useCallback, useContext, useMemo, useRef, useSyncExternalStore } from 'react'
import { NO_CACHE_MESSAGE, ShapeCacheContext } from './provider.js'
import { type ShapeSnapshot, type UseShapeOptions, loadingSnapshot } from './shape-cache.js'

export interface UseShapeResult<T extends Row = Row, S = readonly T[]> {
  /** `selector(rows)`, or the rows themselves. */
  readonly data: S
  readonly isLoading: boolean
  readonly isError: boolean
  readonly error: unknown
  /** When the rendered rows were synced; `shape.lastSyncedAt` is always the current value. */
  readonly lastSyncedAt: number | undefined
  /** Undefined on the server, while hydrating, and on the first render of a key that no mounted component holds open yet. */
  readonly shape: Shape<T> | undefined
  readonly stream: ShapeStream<T> | undefined
  /** Resolves once the shape's synced rows include transaction `txid`; stable for a given shape. */
  readonly waitForTxid: (txid: Txid, options?: { signal?: AbortSignal }) => Promise<void>
}

type Selected<T extends Row, S> = Omit<UseShapeResult<T, S>, 'waitForTxid'>

interface Memo<T extends Row, S> {
  readonly snapshot: ShapeSnapshot<T>
  readonly selector: ((rows: readonly T[]) => S) | undefined
  readonly result: Selected<T, S>
}

/**
 * A shape's rows (or a selection of them) for a component. The shape comes
 * from the cache (`options.cache`, else the provider's), is started when the
 * component mounts, and is shared with every other user of the same key.
 *
 * Re-renders only when the selection (compared with `isEqual`), the loading
 * or error state, or the shape itself changes.
 */
export function useShape<T extends Row = Row, S = readonly T[]>(
  options: UseShapeOptions,
  selector?: (rows: readonly T[]) => S,
  isEqual: (a: S, b: S) => boolean = Object.is,
): UseShapeResult<T, S> {
  const provided = useContext(ShapeCacheContext)
  const cache = options.cache ?? provided
  if (cache === undefined) throw new Error(NO_CACHE_MESSAGE)
  const key = cache.keyOf(options)

  // Keyed on the shape key, not on the options object: inline options are a new
  // object every render and must not resubscribe. The options of the render
  // that first asks for a key are the ones that start its stream.
  // biome-ignore lint/correctness/useExhaustiveDependencies: see above
  const subscribe = useCallback((onChange: () => void) => cache.subscribe(options, onChange), [cache, key])
  // biome-ignore lint/correctness/useExhaustiveDependencies: see above
  const waitForTxid = useCallback(
    (txid: Txid, waitOptions: { signal?: AbortSignal } = {}) => cache.waitForTxid(options, txid, waitOptions),
    [cache, key],
  )

  // The last selection, reused while it is still equal: this is what keeps the
  // snapshot stable (no render loop) and skips renders a selector makes moot.
  const memo = useRef<Memo<T, S> | undefined>(undefined)
  const select = (snapshot: ShapeSnapshot<T>): Selected<T, S> => {
    const last = memo.current
    if (last !== undefined && last.snapshot === snapshot && last.selector === selector) return last.result
    const data = selector === undefined ? (snapshot.rows as unknown as S) : selector(snapshot.rows)
    if (
      last !== undefined &&
      last.result.isLoading === snapshot.isLoading &&
      last.result.isError === snapshot.isError &&
      Object.is(last.result.error, snapshot.error) &&
      last.result.shape === snapshot.shape &&
      isEqual(last.result.data, data)
    ) {
      memo.current = { snapshot, selector, result: last.result }
      return last.result
    }
    const result: Selected<T, S> = {
      data,
      isLoading: snapshot.isLoading,
      isError: snapshot.isError,
      error: snapshot.error,
      lastSyncedAt: snapshot.lastSyncedAt,
      shape: snapshot.shape,
      stream: snapshot.stream,
    }
    memo.current = { snapshot, selector, result }
    return result
  }

  const selected = useSyncExternalStore(
    subscribe,
    () => select(cache.snapshotOfKey<T>(key)),
    // The server (and hydration) render the loading state and never start a stream.
    () => select(loadingSnapshot<T>()),
  )
  return useMemo(() => ({ ...selected, waitForTxid }), [selected, waitForTxid])
}
