import type { Row, Shape } from '@sluice/client'
import type { ShapeCache, UseShapeOptions } from './shape-cache.js'

/**
 * Starts a shape in `cache` (or joins the running one) and resolves with it
 * once it is up to date; afterwards the shape waits the cache's grace period
 * for a component to use it. The signal gives up the wait (a router's
 * navigation cancelled while the server is unreachable).
 */
export function preloadShape<T extends Row = Row>(cache: ShapeCache, options: UseShapeOptions, wait: { signal?: AbortSignal } = {}): Promise<Shape<T>> {
  return cache.preload<T>(options, wait)
}
