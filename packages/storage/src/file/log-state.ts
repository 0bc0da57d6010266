import type { LogOffset } from '@sluice/protocol'
import { BEFORE_ALL } from '@sluice/protocol'
import { HEADER_BYTES } from '../format.js'

/** A closed chunk, as kept in memory (one per chunks.idx record). */
export interface ChunkInfo {
  /** Offset of the chunk's last entry: the `nextOffset` of a read that ends here. */
  readonly end: LogOffset
  /** Entries up to and including this chunk. */
  readonly endEntry: number
  /** Position in log.dat just past the chunk. */
  readonly endPos: number
  readonly kind: number
}

/**
 * A consistent cut of a log: everything a reader needs to resolve offsets.
 * The writer keeps two, the appended one and the published one; a published
 * head only ever moves to a transaction boundary the watermark covers.
 */
export interface HeadState {
  readonly entries: number
  readonly dataEnd: number
  readonly last: LogOffset
  readonly closedChunks: number
  readonly snapshotChunks: number
}

export const EMPTY_HEAD: HeadState = Object.freeze({
  entries: 0,
  dataEnd: HEADER_BYTES,
  last: BEFORE_ALL,
  closedChunks: 0,
  snapshotChunks: 0,
})

/** Where the open chunk starts, given the closed chunks. */
export function openChunkStart(chunks: readonly ChunkInfo[], closed: number): { entry: number; pos: number } {
  const prev = closed > 0 ? chunks[closed - 1] : undefined
  return prev ? { entry: prev.endEntry, pos: prev.endPos } : { entry: 0, pos: HEADER_BYTES }
}
