/**
 * The third layer of a `FileShapeLog` (see file-log.ts): cutting a log back
 * to an earlier head. A failed append is cut back to the head before it, a
 * failed sync to the published head (`rollbackToPublished`), and an open to
 * what recovery found (`restore`).
 *
 * Every write is positional at the appended end, and the appended head moves
 * only after all writes of an append succeeded. A failed append therefore
 * leaves at most garbage past the end, which is truncated at once (or before
 * the next append, if truncating failed too) and which recovery would cut
 * anyway. The journal records every cut, whether or not the truncates
 * succeed: replay must never bring back bytes past the head.
 */
import { CHUNK_RECORD_BYTES, ENTRY_RECORD_BYTES, HEADER_BYTES } from '../format.js'
import type { ChunkInfo, HeadState } from './log-state.js'
import { LogTail } from './log-tail.js'

export abstract class LogCut extends LogTail {
  /** Bumped by every cut: a write-back that raced one must not count as done. */
  protected epoch = 0
  /** Sizes to cut the files back to before the next append, after a failed truncate. */
  protected pendingCut: HeadState | undefined

  /** Sets the state found by recovery. */
  restore(head: HeadState, chunks: readonly ChunkInfo[]): void {
    this.chunks.length = 0
    // Not push(...chunks): a long log's hundreds of thousands of chunks would overflow the stack as arguments.
    for (const c of chunks) this.chunks.push(c)
    this.setAppended(head)
    this.setPublished(head)
    this.dropUnpublished()
    this.recordsOnDisk = head.entries
    this.recordsJournaled = head.entries
    this.dataOnDisk = head.dataEnd
    this.dropPend()
    this.pendLen = 0
    this.chunksOnDisk = head.closedChunks
    this.truncateStaged(0)
    this.open = false
  }

  /**
   * Forgets everything not published (a sync of this log failed, so the kernel
   * may have dropped those pages) and cuts the files back to match.
   */
  rollbackToPublished(): void {
    // What earlier flushes made durable stays: only what none covered goes.
    this.catchUp()
    this.dropUnpublished()
    this.open = false
    this.cutTo(this.published)
  }

  /**
   * `rollbackToPublished` for a log holding anything past its published head
   * (an open transaction, or ends no flush has published); false, and nothing
   * touched, for one that holds nothing more.
   */
  rollbackIfAhead(): boolean {
    this.catchUp()
    if (!this.open && this.endSeq === 0 && this.appendedEntries === this.publishedEntries) return false
    this.rollbackToPublished()
    return true
  }

  /** Makes `head` the appended head: drops what lies past it in memory and cuts the files to it. */
  protected cutTo(head: HeadState): void {
    this.epoch++
    this.chunks.length = Math.min(this.chunks.length, head.closedChunks)
    this.setAppended(head)
    // Memory holds log.dat from dataOnDisk on and records from recordsOnDisk on; keep what lies below the new head.
    if (head.dataEnd >= this.dataOnDisk) {
      this.pendLen = Math.min(this.pendLen, head.dataEnd - this.dataOnDisk)
    } else {
      this.dataOnDisk = head.dataEnd
      this.dropPend()
      this.pendLen = 0
    }
    this.recordsOnDisk = Math.min(this.recordsOnDisk, head.entries)
    this.truncateStaged(head.entries - this.recordsOnDisk)
    this.recordsJournaled = Math.min(this.recordsJournaled, head.entries)
    this.chunksOnDisk = Math.min(this.chunksOnDisk, head.closedChunks)
    // Recorded whether or not the truncates succeed: replay must never bring back bytes past the head.
    const journal = this.journal
    if (journal) {
      const sizes = [head.dataEnd, HEADER_BYTES + head.entries * ENTRY_RECORD_BYTES, HEADER_BYTES + head.closedChunks * CHUNK_RECORD_BYTES] as const
      for (let f = 0; f < 3; f++) journal.truncate(this, this.id, f as 0 | 1 | 2, sizes[f]!)
    }
    // A write-back in flight may still land past the cut: it cuts the files when it ends.
    if (!this.flight) this.cutFiles()
  }

  /** Truncates the files to what they hold that is known good (the rest is in memory, or gone). */
  protected cutFiles(): void {
    const fs = this.host.fs
    const fds = this.host.fds
    const head = this.appended
    try {
      fds.use(this.data, (fd) => fs.ftruncateSync(fd, this.dataOnDisk))
      fds.use(this.entries, (fd) => fs.ftruncateSync(fd, HEADER_BYTES + this.recordsOnDisk * ENTRY_RECORD_BYTES))
      fds.use(this.chunkFile, (fd) => fs.ftruncateSync(fd, HEADER_BYTES + head.closedChunks * CHUNK_RECORD_BYTES))
      this.chunksDirty = true
      this.pendingCut = undefined
    } catch {
      // Retried before the next append or write-back; until then the garbage
      // lies past every head and no reader or replay can reach it.
      this.pendingCut = head
    }
  }
}
