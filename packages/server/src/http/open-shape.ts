import type { ShapeDefinitionParams } from '@sluice/protocol'
import type { ShapeLog } from '@sluice/storage'
import { type CreationGate, type ResolvedShape, type ShapeService, isNotOnReplica, isShapeInvalidated, isTableNotFound, shapeTableGone } from '../shape-service.js'
import { toSluiceError } from './http-errors.js'

/**
 * Resolving a request's definition to a shape and waiting for its snapshot,
 * as every `/v1/shape` read does (GET, HEAD and subset snapshots alike).
 */

/** The handles a request names: the one it follows, and the one it was told is retired. */
export interface FollowedHandles {
  readonly handle?: string | undefined
  readonly expiredHandle?: string | undefined
}

/**
 * The shape for a definition (created if new), failures mapped to what the
 * client gets. A client that followed a shape whose table is now gone
 * (docs/protocol.md §5.4) is not told the table does not exist, a 400 that
 * stops it: a request naming the shape's handle gets `'refetch'` (a 409 with
 * no handle, as nothing can replace it), and the refetch naming it as retired
 * gets 503 with `retry-after` until the table exists again. A handle the
 * server never issued proves nothing.
 */
export async function resolveShape(shapes: ShapeService, params: ShapeDefinitionParams, followed: undefined, gate?: CreationGate, client?: string): Promise<ResolvedShape>
export async function resolveShape(shapes: ShapeService, params: ShapeDefinitionParams, followed: FollowedHandles, gate?: CreationGate, client?: string): Promise<ResolvedShape | 'refetch'>
export async function resolveShape(shapes: ShapeService, params: ShapeDefinitionParams, followed: FollowedHandles = {}, gate?: CreationGate, client?: string): Promise<ResolvedShape | 'refetch'> {
  try {
    return await shapes.resolve(params, gate, client)
  } catch (error) {
    // The shape the request follows is gone and no other serves its definition yet: it must refetch all the same.
    if (isNotOnReplica(error) && followed.handle !== undefined && shapes.status(followed.handle) === 'expired') return 'refetch'
    if (isTableNotFound(error)) {
      const { handle, expiredHandle } = followed
      if (handle !== undefined && shapes.status(handle) !== 'unknown') return 'refetch'
      if (expiredHandle !== undefined && shapes.status(expiredHandle) !== 'unknown') {
        throw toSluiceError(shapeTableGone(params.table.schema, params.table.name, error))
      }
    }
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
export async function awaitReady(
  shapes: ShapeService,
  shape: ResolvedShape,
  params: ShapeDefinitionParams,
  namedHandle: boolean,
  gate?: CreationGate,
  client?: string,
): Promise<ReadyShape | undefined> {
  try {
    return { shape, log: await shapes.ready(shape.handle) }
  } catch (error) {
    if (!isShapeInvalidated(error)) throw toSluiceError(error)
    if (namedHandle) return undefined
  }
  const next = await resolveShape(shapes, params, undefined, gate, client)
  try {
    return { shape: next, log: await shapes.ready(next.handle) }
  } catch (error) {
    throw toSluiceError(error)
  }
}

/**
 * The handle a 409 for the invalidated `shape` names (§5.4): the shape its
 * definition has now, or, when none has replaced it yet, one created now, as a
 * request naming an unknown handle would (the client's very next request is
 * for it anyway). Created as any new shape is, except that it never evicts
 * another: when the shape was itself evicted for room, evicting the next
 * would only pass the 409 along. Undefined when none can be made (the table
 * is gone, say).
 */
export async function replacementHandle(
  shapes: ShapeService,
  gate: CreationGate,
  shape: ResolvedShape,
  params: ShapeDefinitionParams | undefined,
  client: () => string | undefined,
): Promise<string | undefined> {
  const handle = shapes.lookup(shape.definition)
  if (handle !== undefined || params === undefined) return handle
  return shapes.resolve(params, gate, client()).then(
    (next) => next.handle,
    () => undefined,
  )
}
