import { type FSWatcher, readdirSync, watch as nodeWatch } from 'node:fs'
import { LIVE_WATERMARK_FILE, WATERMARK_FILE, bucketPath, isBucketName, listBuckets, shapesRoot } from '@sluice/storage'

/**
 * How a read replica learns that the writer published, without a timer per
 * request or per waiter: one change notification (inotify through
 * `fs.watch`) on the store's root directory, which sees the writer's
 * in-place write of `watermark.live` after every flush and the rename of a
 * new `watermark` at each checkpoint; one on `shapes/`, which sees its
 * buckets (storage's shape-dirs.ts) made and removed; and one on each bucket,
 * which sees a shape's directory renamed in (created) or out (deleted). A
 * bucket's watch is set up again whenever `shapes/` names it, so one removed
 * and made again is watched anew, and a rescan follows each such change,
 * covering a shape renamed into a new bucket before its watch was set up.
 * At most 257 watches (inotify's per-user limit is far above). Events that
 * arrive in one turn of the event loop are handled once, in the next.
 *
 * A file system that sends no notifications (NFS, most network and FUSE
 * file systems: the writer is on another machine, so the local kernel never
 * sees its writes) is covered by a timer of `fallbackMs` that does both
 * re-reads; it is also what retries a watch that failed (an inotify limit,
 * say). One timer per process, whatever the number of clients.
 */

/** `fs.watch` as this module uses it (a port, so a test can see what it watches). */
export type WatchFn = (path: string, options: { persistent: boolean }, listener: (event: string, filename: string | Buffer | null) => void) => FSWatcher

export interface StoreWatchOptions {
  /** The store's root directory (the one holding `watermark` and `shapes/`). */
  readonly dir: string
  /** Both re-reads on a timer this often; 0: never (then nothing covers a missing notification). */
  readonly fallbackMs: number
  /** The writer may have published: re-read the watermark. */
  readonly onPublished: () => void
  /** A shape directory may have come or gone: re-read `shapes/` and its buckets. */
  readonly onShapesChanged: () => void
  /** A watch could not be set up or failed; the timer covers for it. */
  readonly onWatchError?: (error: unknown) => void
  readonly watch?: WatchFn
  /** Lists `shapes/` (a port, like `watch`). */
  readonly readdir?: (path: string) => string[]
}

/** What the watch did so far: for tests and logs. */
export interface StoreWatchStats {
  /** Notifications handled (after coalescing). */
  readonly notices: number
  /** Ticks of the fallback timer. */
  readonly fallbackTicks: number
  /** Whether both directories are watched. */
  readonly watching: boolean
}

/** The files the writer publishes its watermark in. */
const WATERMARK_NAMES = new Set([WATERMARK_FILE, LIVE_WATERMARK_FILE])

export class StoreWatch {
  private readonly watchFn: WatchFn
  private root: FSWatcher | undefined
  private shapes: FSWatcher | undefined
  private readonly buckets = new Map<string, FSWatcher>()
  private timer: NodeJS.Timeout | undefined
  private pendingPublished = false
  private pendingShapes = false
  private scheduled: NodeJS.Immediate | undefined
  private notices = 0
  private fallbackTicks = 0
  private closed = false

  constructor(private readonly options: StoreWatchOptions) {
    this.watchFn = options.watch ?? (nodeWatch as unknown as WatchFn)
    this.startWatching()
    if (options.fallbackMs > 0) {
      this.timer = setInterval(() => this.tick(), options.fallbackMs)
      this.timer.unref()
    }
  }

  stats(): StoreWatchStats {
    return { notices: this.notices, fallbackTicks: this.fallbackTicks, watching: this.root !== undefined && this.shapes !== undefined }
  }

  close(): void {
    this.closed = true
    if (this.timer !== undefined) clearInterval(this.timer)
    if (this.scheduled !== undefined) clearImmediate(this.scheduled)
    this.stopWatching()
  }

  private startWatching(): void {
    try {
      this.root ??= this.open(this.options.dir, (name) => {
        if (name === null || WATERMARK_NAMES.has(name)) this.schedule('published')
      })
      if (this.shapes === undefined) {
        this.shapes = this.open(shapesRoot(this.options.dir), (name) => {
          try {
            if (name === null) this.watchBuckets()
            else if (isBucketName(name)) this.watchBucket(name)
          } catch (error) {
            this.stopWatching()
            this.options.onWatchError?.(error)
          }
          this.schedule('shapes')
        })
        this.watchBuckets()
      }
    } catch (error) {
      this.stopWatching()
      this.options.onWatchError?.(error)
    }
  }

  private open(path: string, onEvent: (name: string | null) => void): FSWatcher {
    const watcher = this.watchFn(path, { persistent: false }, (_event, filename) => onEvent(filename === null ? null : String(filename)))
    watcher.on('error', (error) => {
      // Its directory went away or the kernel dropped the watch: the timer re-reads, and retries the watch.
      this.stopWatching()
      this.options.onWatchError?.(error)
    })
    return watcher
  }

  /** Watches every bucket `shapes/` holds now: all anew (`anew`), or only those not watched yet. */
  private watchBuckets(anew = true): void {
    const names = new Set(listBuckets({ readdirSync: this.options.readdir ?? readdirSync }, this.options.dir))
    for (const name of [...this.buckets.keys()]) if (!names.has(name)) this.watchBucket(name)
    for (const name of names) if (anew || !this.buckets.has(name)) this.watchBucket(name)
  }

  /** (Re)watches bucket `name`: made, removed, or both since its last watch. */
  private watchBucket(name: string): void {
    this.buckets.get(name)?.close()
    this.buckets.delete(name)
    let watcher: FSWatcher
    try {
      watcher = this.watchFn(bucketPath(this.options.dir, name), { persistent: false }, () => this.schedule('shapes'))
    } catch {
      return // gone again; `shapes/` names it once more if it comes back
    }
    // Removed under the watch: `shapes/` names it, which sets the watch up again or drops it.
    watcher.on('error', () => {
      watcher.close()
      if (this.buckets.get(name) === watcher) this.buckets.delete(name)
      this.schedule('shapes')
    })
    this.buckets.set(name, watcher)
  }

  private stopWatching(): void {
    this.root?.close()
    this.shapes?.close()
    for (const watcher of this.buckets.values()) watcher.close()
    this.buckets.clear()
    this.root = undefined
    this.shapes = undefined
  }

  private schedule(what: 'published' | 'shapes'): void {
    if (what === 'published') this.pendingPublished = true
    else this.pendingShapes = true
    if (this.scheduled !== undefined || this.closed) return
    this.scheduled = setImmediate(() => {
      this.scheduled = undefined
      this.notices++
      this.run()
    })
  }

  private run(): void {
    // Shapes first: a flush that publishes a new shape's first live transaction then finds it indexed.
    if (this.pendingShapes) {
      this.pendingShapes = false
      this.options.onShapesChanged()
    }
    if (this.pendingPublished) {
      this.pendingPublished = false
      this.options.onPublished()
    }
  }

  private tick(): void {
    if (this.closed) return
    this.fallbackTicks++
    if (this.root === undefined || this.shapes === undefined) this.startWatching()
    else {
      try {
        this.watchBuckets(false)
      } catch {
        // Read again at the next tick.
      }
    }
    this.pendingShapes = true
    this.pendingPublished = true
    this.run()
  }
}
