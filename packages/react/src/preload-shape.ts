import type { Row, Shape } from '@sluice/client'
import type { ShapeCache, UseShapeOptions } from './shape-cache.js'

/**
 * Starts a shape in `cache` (or joins the running one) and resolves with it
 * once it is up to date; afterwards the shape waits the cache's grace period
 * for a component to use it.
 */
export function preloadShape<T extends Row = Row>(cache: ShapeCache, options: UseShapeOptions): Promise<Shape<T>> {
  return cache.preload<T>(options)
}
