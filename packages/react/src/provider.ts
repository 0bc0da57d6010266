import { type ReactNode, createContext, createElement, useContext } from 'react'
import type { ShapeCache } from './shape-cache.js'

/** Carries a cache down the tree; the cache itself is always created by the app, never here. */
export const ShapeCacheContext = createContext<ShapeCache | undefined>(undefined)

export const NO_CACHE_MESSAGE = 'useShape: no ShapeCache. Wrap the tree in <ShapeCacheProvider cache={…}> or pass options.cache'

export interface ShapeCacheProviderProps {
  readonly cache: ShapeCache
  readonly children?: ReactNode
}

export function ShapeCacheProvider({ cache, children }: ShapeCacheProviderProps): ReactNode {
  return createElement(ShapeCacheContext.Provider, { value: cache }, children)
}

/** The provider's cache; throws when there is none. */
export function useShapeCache(): ShapeCache {
  const cache = useContext(ShapeCacheContext)
  if (cache === undefined) throw new Error(NO_CACHE_MESSAGE)
  return cache
}
