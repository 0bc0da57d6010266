import { type FsPort, type ShapeLog, type ShapeLogStore, bucketPath, listBuckets, shapesRoot } from '@sluice/storage'
import { generationOfLogId, handleOfLogId } from '../shapes/compaction/log-ids.js'
import { type ShapeDefinition, type ShapeMeta, decodeShapeMeta, definitionKey, parseHandle } from '../shapes/definition/index.js'

/**
 * A read replica's registry: which shapes the writer's store holds, read from
 * `shapes/` and each shape's meta (the definition the writer stored with
 * it), so that a request's definition finds the writer's handle.
 *
 * The writer renames a shape's directory into its bucket of `shapes/` once
 * its snapshot is durable and out of it when the shape is invalidated or
 * deleted, so the buckets' entries are exactly the live shapes. `rescan` diffs them with
 * what is indexed: a shape gone is reported through `onGone` (its clients
 * get 409, as on the writer). It runs on a change notification for
 * `shapes/`, and on a miss (a handle or definition not indexed) when the
 * directory changed since the last scan, so a client that got a new handle
 * from the writer an instant ago is not told it is unknown before the
 * notification arrives.
 *
 * A compacted log is a new directory, `<handle>_c<n>`, renamed in before the
 * old one is deleted (shapes/compaction/log-ids.ts), so a handle can have two
 * for a while: the newest generation is the one served, as on the writer
 * (restore-shapes.ts), and a scan that finds a newer one switches to it. Both
 * hold the same offsets past the compaction point, and the old one keeps
 * taking the writer's copies until it is deleted, so a request that picked it
 * up just before reads a log that still moves.
 */

/** Handles seen going, remembered so that a client naming one hears `expired`, not `unknown`; bounded, as handles never repeat. */
const MAX_REMEMBERED_GONE = 10_000

export interface ReplicaShapesOptions {
  readonly store: ShapeLogStore
  /** The store's root directory. */
  readonly dir: string
  readonly fs: Pick<FsPort, 'statSync' | 'readdirSync'>
  readonly onGone: (handle: string) => void
  /** A shape's meta that does not decode, or a log whose meta.bin is damaged: skipped (the writer deletes or quarantines such a shape at its next start). */
  readonly onBadMeta?: (handle: string, error: unknown) => void
  /** A scan of its own (the recheck's timer) that failed; the next notification or timer scans again. */
  readonly onScanError?: (error: unknown) => void
}

interface Indexed {
  readonly key: string
  readonly meta: ShapeMeta
  /** The store id of the log served: the handle's newest generation. */
  logId: string
}

export class ReplicaShapes {
  private readonly byKey = new Map<string, string>()
  private readonly byHandle = new Map<string, Indexed>()
  private readonly gone = new Set<string>()
  private stamp = ''
  /** When a stamp too recent to be trusted (see `rescan`) is to be scanned again, unchanged or not. */
  private recheckAt: number | undefined
  private recheck: NodeJS.Timeout | undefined
  private closed = false
  private scans = 0

  constructor(private readonly options: ReplicaShapesOptions) {}

  /** Stops the recheck timer (the service is closing). */
  close(): void {
    this.closed = true
    if (this.recheck !== undefined) clearTimeout(this.recheck)
    this.recheck = undefined
  }

  /** Full scans of `shapes/` so far. */
  get scanCount(): number {
    return this.scans
  }

  get size(): number {
    return this.byHandle.size
  }

  /**
   * Re-reads `shapes/` if it changed since the last scan (the mtime, ctime
   * and inode of it and of each bucket: every rename in or out changes them),
   * or always with `force`.
   */
  rescan(force = false): void {
    const started = Date.now()
    const { stamp, newestMs } = this.dirStamp()
    if (!force && stamp === this.stamp && (this.recheckAt === undefined || started < this.recheckAt)) return
    this.stamp = stamp
    // A directory changed within the timestamps' granularity of this scan may change again with the same stamp
    // (a rename in the same clock tick, on a filesystem whose times are coarse): the same stamp is then scanned
    // once more, by the first call once that window is over. The margin also covers some clock skew with a file server.
    this.recheckAt = newestMs >= started - RACY_STAMP_MS ? newestMs + RACY_STAMP_MS : undefined
    // Nothing else may call again (no fallback timer, one notification already spent): a timer of its own does.
    if (this.recheck !== undefined) clearTimeout(this.recheck)
    this.recheck = undefined
    if (this.recheckAt !== undefined && !this.closed) {
      this.recheck = setTimeout(() => {
        this.recheck = undefined
        try {
          this.rescan()
        } catch (error) {
          this.options.onScanError?.(error)
        }
      }, Math.max(1, this.recheckAt - started))
      this.recheck.unref()
    }
    this.scans++
    // Each handle's newest generation.
    const present = new Map<string, string>()
    for (const id of this.options.store.ids()) {
      const handle = handleOfLogId(id)
      const other = present.get(handle)
      if (other === undefined || generationOfLogId(id) > generationOfLogId(other)) present.set(handle, id)
    }
    for (const handle of [...this.byHandle.keys()]) {
      if (!present.has(handle)) this.remove(handle)
    }
    for (const [handle, logId] of present) {
      const indexed = this.byHandle.get(handle)
      if (indexed !== undefined) {
        if (indexed.logId !== logId && this.openLog(handle, logId) !== undefined) indexed.logId = logId
        continue
      }
      const log = this.openLog(handle, logId)
      if (log === undefined) continue
      let meta: ShapeMeta
      try {
        meta = decodeShapeMeta(log.meta)
      } catch (error) {
        this.options.onBadMeta?.(handle, error)
        continue
      }
      if (meta.expired || meta.handle !== handle) continue
      const key = definitionKey(meta.definition)
      // Two directories for one definition: the writer is replacing one; the newer handle is the one it serves.
      const other = this.byKey.get(key)
      if (other !== undefined && issuedAt(other) > issuedAt(handle)) continue
      this.byKey.set(key, handle)
      this.byHandle.set(handle, { key, meta, logId })
      this.gone.delete(handle)
    }
  }

  /**
   * The store's log `logId`, or undefined when it is gone or damaged: a
   * meta.bin that does not decode is reported and skipped like a bad shape
   * meta, not thrown out of a scan (which runs from the store watch too,
   * where a throw would end the process). The writer sets such a log aside at
   * its next start.
   */
  private openLog(handle: string, logId: string): ShapeLog | undefined {
    try {
      return this.options.store.get(logId)
    } catch (error) {
      this.options.onBadMeta?.(handle, error)
      return undefined
    }
  }

  /** The store id of the log served for `handle` (its newest generation), if the store holds the shape. */
  logId(handle: string): string | undefined {
    if (this.status(handle) !== 'active') return undefined
    return this.byHandle.get(handle)?.logId
  }

  /** The handle the writer serves this definition under, if the store holds it. */
  lookup(definition: ShapeDefinition): string | undefined {
    const key = definitionKey(definition)
    const handle = this.byKey.get(key)
    if (handle !== undefined) return handle
    this.rescan()
    return this.byKey.get(key)
  }

  meta(handle: string): ShapeMeta | undefined {
    return this.byHandle.get(handle)?.meta
  }

  status(handle: string): 'active' | 'expired' | 'unknown' {
    if (this.byHandle.has(handle)) return 'active'
    if (this.gone.has(handle)) return 'expired'
    this.rescan()
    if (this.byHandle.has(handle)) return 'active'
    return this.gone.has(handle) ? 'expired' : 'unknown'
  }

  private remove(handle: string): void {
    const indexed = this.byHandle.get(handle)
    if (indexed === undefined) return
    this.byHandle.delete(handle)
    if (this.byKey.get(indexed.key) === handle) this.byKey.delete(indexed.key)
    this.gone.add(handle)
    if (this.gone.size > MAX_REMEMBERED_GONE) this.gone.delete(this.gone.values().next().value!)
    this.options.onGone(handle)
  }

  /**
   * `shapes/` and each of its buckets (storage's shape-dirs.ts): a shape
   * comes or goes by a rename in or out of its bucket, and a bucket by a
   * change of `shapes/`.
   */
  private dirStamp(): { stamp: string; newestMs: number } {
    const { fs, dir } = this.options
    const newest = { ms: 0 }
    let stamp: string
    let names: string[]
    try {
      stamp = statStamp(fs, shapesRoot(dir), newest)
      names = listBuckets(fs, dir)
    } catch {
      return { stamp: '', newestMs: 0 }
    }
    for (const name of names) {
      try {
        stamp += `|${name}:${statStamp(fs, bucketPath(dir, name), newest)}`
      } catch {
        // Removed since the listing: `shapes/` changed too.
      }
    }
    return { stamp, newestMs: newest.ms }
  }
}

/** How recent a directory's change may be for its stamp to be trusted as final (see `rescan`). */
const RACY_STAMP_MS = 2_000

function statStamp(fs: Pick<FsPort, 'statSync'>, path: string, newest: { ms: number }): string {
  const st = fs.statSync(path) as { ino: number; mtimeMs: number; ctimeMs?: number }
  newest.ms = Math.max(newest.ms, st.mtimeMs, st.ctimeMs ?? 0)
  return `${st.ino}:${st.mtimeMs}:${st.ctimeMs ?? ''}`
}

/** A handle's microseconds: of two for one definition, the later one replaced the other. */
function issuedAt(handle: string): number {
  return parseHandle(handle)?.micros ?? -1
}
