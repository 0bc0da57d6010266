import type { ShapeLog, ShapeLogStore, SnapshotWriter } from '@sluice/storage'
import type pg from 'pg'
import type { SpillDir, SpillQueue } from '../replication/index.js'
import { type ShapeDefinition, type TableSignature, encodeShapeMeta } from './definition/index.js'
import type { LiveShape } from './live-shape.js'
import { routeSpec } from './live-shape.js'
import type { QueueBudget } from './queue-budget.js'
import type { TransactionPart } from './route-contracts.js'
import type { ShapeRouter } from './router.js'
import { ShapeError } from './shape-error.js'
import { QueueTarget, StitchingTarget } from './shape-targets.js'
import type { SnapshotSemaphore } from './snapshot-semaphore.js'
import { encodeSnapshotEnd, isVisibleInSnapshot, runSnapshot } from './snapshot/index.js'
import { renumberParams } from './snapshot/renumber-params.js'
import { subquerySnapshotRequest } from './subquery/subquery-snapshot.js'
import type { TableInfo } from './table-catalog.js'
import { routeSummaryOf } from '../where/index.js'

/** Attempts at a snapshot that raced a commit (see RegistrationTicket) before giving up. */
const MAX_SNAPSHOT_ATTEMPTS = 5
const DRAIN_BATCH = 512

export interface ShapeBuilderParts {
  readonly store: ShapeLogStore
  readonly router: ShapeRouter
  readonly snapshotPool: pg.Pool
  readonly spillDir: SpillDir
  readonly semaphore: SnapshotSemaphore
  readonly queues: QueueBudget
  /** Whether the manager is closing: creations stop. */
  readonly closed: () => boolean
}

/**
 * Shape creation, from registration to a published log:
 *   1. the shape joins the router with a queue as its target: from here on it
 *      misses no transaction;
 *   2. the snapshot runs (REPEATABLE READ, rows' JSON built in SQL) into a new
 *      log, bounded by a semaphore of snapshot connections, and is retaken when
 *      it missed a transaction already routed;
 *   3. `finish(snapshot-end)` is called and the queue drained into the
 *      finishing log, then the router appends to it directly; transactions the
 *      snapshot already saw are dropped (stitching, see `StitchingTarget`);
 *   4. the log is durable and published once `finish` resolves.
 * A crash at any point before 4 leaves no shape: nothing was acknowledged for
 * it, and a later request simply creates it again.
 */
export class ShapeBuilder {
  constructor(private readonly parts: ShapeBuilderParts) {}

  async build(shape: LiveShape): Promise<ShapeLog> {
    const { store, router, snapshotPool, spillDir, semaphore, queues } = this.parts
    const signal = shape.abort!.signal
    const slot = await semaphore.acquire(signal)
    let held = true
    const release = (): void => {
      if (held) slot()
      held = false
    }
    let writer: SnapshotWriter | undefined
    let finishing: Promise<ShapeLog> | undefined
    const queue = queues.open(spillDir, shape.handle)
    shape.queue = queue
    try {
      const stitch = new StitchingTarget(new QueueTarget(queue, () => queues.check()))
      const sub = shape.subquery
      const ticket = await router.register(routeSpec(shape), sub === undefined ? stitch : sub.attach(stitch), sub?.companions())
      let taken: Awaited<ReturnType<typeof runSnapshot>> | undefined
      for (let attempt = 1; taken === undefined; attempt++) {
        this.throwIfCancelled(shape)
        let w: SnapshotWriter | undefined
        const result = await runSnapshot(
          snapshotPool,
          sub !== undefined
            ? { table: shape.table, ...subquerySnapshotRequest(sub, shape.definition, shape.table, shape.definition.log === 'changes_only' ? 'false' : shape.definition.where!), signal }
            : {
                table: shape.table,
                // log=changes_only: no rows, but the same snapshot, so snapshot-end and the stitching still hold.
                ...(shape.definition.log === 'changes_only' ? { where: 'false', params: [] } : denseWhere(shape.definition)),
                columns: shape.definition.columns,
                signal,
              },
          {
            // The log is made once the snapshot is fixed, so its meta records it: a restored shape keeps stitching.
            start: (info) => {
              const stitch = { snapshot: info.snapshot, insertLsn: info.insertLsn }
              const meta = encodeShapeMeta(shape.definition, shape.handle, { table: signatureOf(shape.table), stitch, route: routeSummaryOf(shape.where) })
              w = store.createShape(shape.handle, { meta })
              writer = w
            },
            rows: (lines: readonly Uint8Array[]) => w!.append(lines),
          },
        )
        const raced = ticket.recentXids.find((xid) => !isVisibleInSnapshot(result.snapshot, xid))
        if (raced === undefined) {
          taken = result
          break
        }
        await w!.abort()
        writer = undefined
        if (attempt >= MAX_SNAPSHOT_ATTEMPTS) {
          throw new ShapeError('snapshot_failed', `the snapshot kept missing transaction ${raced}, which had already been replicated`)
        }
      }
      // The snapshot's connection is free again: the next shape's snapshot need not wait for this one's
      // drain and for the flush that makes its log durable (one flush finishes many logs at once).
      release()
      this.throwIfCancelled(shape)
      const w = writer!
      w.endSnapshot(encodeSnapshotEnd(taken.snapshot))
      stitch.setSnapshot(taken.snapshot, taken.insertLsn)
      sub?.snapshotTaken(taken.snapshot, taken.insertLsn)
      // Drain what queued while the snapshot ran, in order (a spilled queue comes back from disk in batches,
      // across flushes: the store cannot rename the log before finish() below). The last check, the switch
      // and finish() happen in one tick, so nothing slips between.
      for (;;) {
        const parts = await queue.shift(DRAIN_BATCH)
        for (const part of parts) stitch.deliver(w, part)
        if (queue.length === 0) {
          stitch.goLive(w)
          finishing = w.finish()
          break
        }
      }
      this.dropQueue(shape, queue)
      const log = await finishing
      finishing = undefined
      stitch.goLive(log)
      if (shape.cancelled !== undefined || this.parts.closed()) {
        // Invalidated while finishing: the log came into being after invalidateHandles looked for it.
        await store.deleteShape(shape.handle).catch(() => {})
        this.throwIfCancelled(shape)
      }
      return log
    } catch (error) {
      if (finishing !== undefined) {
        // Too late to abort: let the log appear, then remove it.
        await finishing.then(
          () => store.deleteShape(shape.handle),
          () => undefined,
        ).catch(() => {})
      } else if (writer !== undefined) {
        await writer.abort().catch(() => {})
      }
      this.dropQueue(shape, queue)
      throw error
    } finally {
      release()
      queues.check()
    }
  }

  private dropQueue(shape: LiveShape, queue: SpillQueue<TransactionPart>): void {
    if (this.parts.queues.drop(queue)) shape.queue = undefined
  }

  private throwIfCancelled(shape: LiveShape): void {
    if (shape.cancelled !== undefined) throw new ShapeError('shape_invalidated', shape.cancelled.detail)
    if (this.parts.closed()) throw new ShapeError('shutting_down')
  }
}

/** Why a creation failed, as the shape's `ready` promise rejects. */
export function creationError(shape: LiveShape, error: unknown): Error {
  if (shape.cancelled !== undefined) return new ShapeError('shape_invalidated', shape.cancelled.detail, { cause: error })
  if (error instanceof ShapeError) return error
  // Refused while the snapshot ran (a subquery shape's views past their bound): the refusal, not a failed snapshot.
  if (error instanceof Error && error.cause instanceof ShapeError) return error.cause
  const message = error instanceof Error ? error.message : String(error)
  return new ShapeError('snapshot_failed', `the initial snapshot failed: ${message}`, { cause: error })
}

/** What a shape's meta records of its table, to tell on restore whether the table is still the same. */
export function signatureOf(info: TableInfo): TableSignature {
  return {
    oid: info.oid,
    columns: info.columns.map((c) => [c.name, c.typeOid, c.typeMod] as const),
    primaryKey: info.primaryKey,
    replicaIdentity: info.replicaIdentity,
  }
}

/** The shape's where clause with only the parameters it uses, numbered densely (see renumberParams). */
function denseWhere(def: ShapeDefinition): { where: string | undefined; params: string[] } {
  const params: string[] = []
  if (def.where === undefined) return { where: undefined, params }
  return { where: renumberParams(def.where, (n) => def.params[String(n)], params), params }
}
