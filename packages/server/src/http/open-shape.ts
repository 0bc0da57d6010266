import type { ShapeDefinitionParams } from '@sluice/protocol'
import type { ShapeLog } from '@sluice/storage'
import { type ResolvedShape, type ShapeService, isShapeInvalidated } from '../shape-service.js'
import { toSluiceError } from './http-errors.js'

/**
 * Resolving a request's definition to a shape and waiting for its snapshot,
 * as every `/v1/shape` read does (GET, HEAD and subset snapshots alike).
 */

/** The shape for a definition (created if new), failures mapped to what the client gets. */
export async function resolveShape(shapes: ShapeService, params: ShapeDefinitionParams): Promise<ResolvedShape> {
  try {
    return await shapes.resolve(params)
  } catch (error) {
    throw toSluiceError(error, { relation: params.table })
  }
}

export interface ReadyShape {
  readonly shape: ResolvedShape
  readonly log: ShapeLog
}

/**
 * Waits for a resolved shape's snapshot. A shape invalidated while its snapshot
 * ran is replaced once, resolved afresh, for a request that named no handle:
 * such a request simply gets the next shape. A request that named the handle
 * gets `undefined`, and the caller answers 409 must-refetch.
 */
export async function awaitReady(shapes: ShapeService, shape: ResolvedShape, params: ShapeDefinitionParams, namedHandle: boolean): Promise<ReadyShape | undefined> {
  try {
    return { shape, log: await shapes.ready(shape.handle) }
  } catch (error) {
    if (!isShapeInvalidated(error)) throw toSluiceError(error)
    if (namedHandle) return undefined
  }
  const next = await resolveShape(shapes, params)
  try {
    return { shape: next, log: await shapes.ready(next.handle) }
  } catch (error) {
    throw toSluiceError(error)
  }
}
