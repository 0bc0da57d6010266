export {
  DEFAULT_GC_TIME_MS,
  type GcTimers,
  LOADING_SNAPSHOT,
  loadingSnapshot,
  ShapeCache,
  ShapeCacheClosedError,
  type ShapeCacheOptions,
  type ShapeSnapshot,
  type UseShapeOptions,
} from './shape-cache.js'
export { shapeKey } from './shape-key.js'
export { NO_CACHE_MESSAGE, ShapeCacheContext, ShapeCacheProvider, type ShapeCacheProviderProps, useShapeCache } from './provider.js'
export { type UseShapeResult, useShape } from './use-shape.js'
export { preloadShape } from './preload-shape.js'
