import { generationOfLogId, handleOfLogId } from '../shapes/compaction/log-ids.js'

/**
 * Bodies of log ranges recently served, kept in memory (docs/architecture.md
 * §3): a hot chunk (every client's first request of a popular shape, say) is
 * then written from one Buffer, with no pread and no copy per request.
 *
 * Why a cached body can never be wrong: a key names the log (its store id,
 * which a compaction changes), the range's first offset and its last entry's
 * offset, and the body has no up-to-date line (only such bodies are offered).
 * A log is append-only and its readers see only published, so durable,
 * entries, which are never cut back; so the entries between two offsets of one
 * log are the same bytes for as long as the log exists. That holds for a
 * closed chunk and for the open chunk up to the head a read saw: a later read
 * that reaches further has another last offset, so another key. Nothing here
 * reads the log, so nothing past what a read returned can be served.
 *
 * Bounded by bytes, least recently used first out, approximately: a hit only
 * marks its entry, and eviction gives a marked entry a second chance (moved to
 * the back, unmarked) instead of moving every hit (a hot key would otherwise
 * be removed and inserted again on every request). A body is kept the second time its key is offered
 * while the key is still remembered as offered once: a client paging once
 * through a large shape does not push out the chunks many clients ask for.
 * A shape's bodies are dropped when it is invalidated or deleted
 * (`dropShape`), and when a body of a newer log of the shape (a compaction's)
 * is offered; a body of an older log than the one held is not kept.
 */

export interface RangeCacheStats {
  /** Bytes of bodies held. */
  readonly bytes: number
  readonly entries: number
  readonly maxBytes: number
  /** Lookups answered from memory. */
  readonly hits: number
  /** Lookups that found nothing (the body was then read from the log). */
  readonly misses: number
  /** Bodies dropped to stay within `maxBytes`. */
  readonly evictions: number
}

interface Entry {
  readonly bytes: Buffer
  readonly handle: string
  /** Served since it was last passed over for eviction (its second chance). */
  used: boolean
}

interface ShapeBodies {
  /** The compaction generation of the log the bodies come from. */
  readonly generation: number
  readonly keys: Set<string>
}

/** Keys remembered as offered once, for admission on the second offer. */
const SEEN_KEYS = 4096
/** No single body may take more than this share of the cache. */
const MAX_ENTRY_SHARE = 8

export class RangeCache {
  /** In insertion order (a `Map` iterates so), entries given a second chance moved to the back. */
  private readonly entries = new Map<string, Entry>()
  private readonly byShape = new Map<string, ShapeBodies>()
  private readonly seenOnce = new Set<string>()
  private held = 0
  private hits = 0
  private misses = 0
  private evictions = 0
  private readonly maxEntryBytes: number

  constructor(readonly maxBytes: number) {
    this.maxEntryBytes = Math.floor(maxBytes / MAX_ENTRY_SHARE)
  }

  /** The key of a range: the log's store id, the range's first offset (as the request wrote it) and its last entry's. */
  static key(logId: string, requestOffset: string, responseOffset: string): string {
    return `${logId} ${requestOffset} ${responseOffset}`
  }

  get enabled(): boolean {
    return this.maxBytes > 0
  }

  /** The body held for `key`, if any. */
  get(key: string): Buffer | undefined {
    const entry = this.entries.get(key)
    if (entry === undefined) {
      this.misses++
      return undefined
    }
    this.hits++
    entry.used = true
    return entry.bytes
  }

  /**
   * A body just read for `key` (a range of log `logId`, with no up-to-date
   * line). Copied and kept on its second offer; `bytes` itself is not held.
   */
  offer(logId: string, key: string, bytes: Uint8Array): void {
    if (bytes.length > this.maxEntryBytes || this.entries.has(key)) return
    if (!this.seenOnce.delete(key)) {
      this.seenOnce.add(key)
      if (this.seenOnce.size > SEEN_KEYS) this.seenOnce.delete(this.seenOnce.values().next().value!)
      return
    }
    const handle = handleOfLogId(logId)
    const generation = generationOfLogId(logId)
    let shape = this.byShape.get(handle)
    if (shape !== undefined && shape.generation !== generation) {
      // A request that picked up the log before a compaction switched it may still be reading the old one.
      if (generation < shape.generation) return
      this.dropShape(handle)
      shape = undefined
    }
    if (shape === undefined) {
      shape = { generation, keys: new Set() }
      this.byShape.set(handle, shape)
    }
    const copy = Buffer.allocUnsafeSlow(bytes.length)
    copy.set(bytes)
    this.entries.set(key, { bytes: copy, handle, used: false })
    shape.keys.add(key)
    this.held += copy.length
    while (this.held > this.maxBytes) this.evictOldest()
  }

  /**
   * Forgets the keys offered once (bodies held stay): after a sweep retired
   * thousands of shapes, those keys name their logs, which no read can offer
   * again.
   */
  forgetOffered(): void {
    this.seenOnce.clear()
  }

  /** Keys remembered as offered once. */
  get offeredOnce(): number {
    return this.seenOnce.size
  }

  /** Drops every body of the shape (invalidated, deleted or compacted). */
  dropShape(handle: string): void {
    const shape = this.byShape.get(handle)
    if (shape === undefined) return
    this.byShape.delete(handle)
    for (const key of shape.keys) {
      const entry = this.entries.get(key)
      if (entry === undefined) continue
      this.entries.delete(key)
      this.held -= entry.bytes.length
    }
  }

  stats(): RangeCacheStats {
    return { bytes: this.held, entries: this.entries.size, maxBytes: this.maxBytes, hits: this.hits, misses: this.misses, evictions: this.evictions }
  }

  private evictOldest(): void {
    let [key, entry] = this.entries.entries().next().value!
    // Every entry is passed over at most once: the loop ends at the first unmarked one.
    while (entry.used) {
      entry.used = false
      this.entries.delete(key)
      this.entries.set(key, entry)
      ;[key, entry] = this.entries.entries().next().value!
    }
    this.entries.delete(key)
    this.held -= entry.bytes.length
    this.evictions++
    const shape = this.byShape.get(entry.handle)
    if (shape === undefined) return
    shape.keys.delete(key)
    if (shape.keys.size === 0) this.byShape.delete(entry.handle)
  }
}
