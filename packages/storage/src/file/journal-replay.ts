/**
 * Reading the journal back: the writer's replay at open, and the ordered
 * per-file operations a read-only follower lays over the files.
 *
 * Replay applies, for every log directory still in shapes/ (the store's open
 * has moved a flat-layout store's logs into their buckets first), the writes and
 * truncations of every valid group in order, skipping the records of an id that
 * come before that id's last tombstone (they belong to a deleted log; a log
 * re-created under the id starts after it). It then syncs the files and deletes
 * the segments. Applying the same operations again over any state a crash left
 * part-way gives the same files, so a crash during replay just replays again.
 */
import { StorageError, fromSystemError } from '../errors.js'
import { checkHeader } from '../format.js'
import type { Watermark } from '../format.js'
import type { FsPort } from '../fs-port.js'
import { writeFully } from '../fs-port.js'
import { JOURNAL_FILES, RECORD_TOMBSTONE, RECORD_WRITE, parseSegment, segmentGeneration } from './journal-format.js'
import type { JournalFile, JournalRecord, ParsedGroup } from './journal-format.js'
import { shapeDir } from './shape-dirs.js'
import { publishWatermark, syncDirectory } from './watermark.js'

export type FileOp = { readonly position: number; readonly bytes: Buffer } | { readonly size: number }

/** Operations per shape id, then per file, in journal order; tombstones already applied. */
export type OpsById = Map<string, Map<JournalFile, FileOp[]>>

/** Folds records into `ops`, in order. */
export function foldRecords(ops: OpsById, records: readonly JournalRecord[]): void {
  for (const r of records) {
    if (r.type === RECORD_TOMBSTONE) {
      ops.delete(r.id)
      continue
    }
    let files = ops.get(r.id)
    if (!files) ops.set(r.id, (files = new Map()))
    let list = files.get(r.file)
    if (!list) files.set(r.file, (list = []))
    list.push(r.type === RECORD_WRITE ? { position: r.position, bytes: r.bytes } : { size: r.size })
  }
}

export interface SegmentFile {
  readonly generation: number
  readonly path: string
}

/** The journal's segment files, oldest first. */
export function listSegments(fs: FsPort, root: string): SegmentFile[] {
  const dir = `${root}/journal`
  let names: string[]
  try {
    names = fs.readdirSync(dir)
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return []
    throw fromSystemError(err, `list ${dir}`)
  }
  const out: SegmentFile[] = []
  for (const name of names) {
    const generation = segmentGeneration(name)
    if (generation !== undefined) out.push({ generation, path: `${dir}/${name}` })
  }
  return out.sort((a, b) => a.generation - b.generation)
}

/**
 * The valid groups of a segment's bytes from `from`. A segment cut short before
 * its header was whole (a crash while creating it) holds none.
 */
export function readSegmentGroups(bytes: Buffer, generation: number, from = 0): { groups: ParsedGroup[]; end: number } {
  if (from === 0) {
    const problem = checkHeader('journal', bytes)
    if (problem === 'version') throw new StorageError('unsupported_format', `journal segment ${generation} has format version ${bytes[4]}`)
    if (problem) return { groups: [], end: 0 }
    from = 16
  }
  return parseSegment(bytes, generation, from)
}

// Enough files in flight to keep the thread pool and the device busy.
const REPLAY_CONCURRENCY = 32

export interface ReplayResult {
  readonly segments: number
  readonly groups: number
  readonly files: number
  /** The next segment generation to use. */
  readonly nextGeneration: number
  /** The store's watermark: the journal's last, or `fileWatermark` when no group carried one. */
  readonly watermark: Watermark
}

/**
 * Applies the journal (see above) and returns the store's watermark. When the
 * journal published one, it is written to the watermark file before the
 * segments holding it are deleted.
 */
export async function replayJournal(fs: FsPort, root: string, fileWatermark: Watermark): Promise<ReplayResult> {
  const segments = listSegments(fs, root)
  const ops: OpsById = new Map()
  let groups = 0
  let watermark = fileWatermark
  for (const seg of segments) {
    let bytes: Buffer
    try {
      bytes = fs.readFileSync(seg.path)
    } catch (err) {
      throw fromSystemError(err, `read ${seg.path}`)
    }
    for (const g of readSegmentGroups(bytes, seg.generation).groups) {
      foldRecords(ops, g.records)
      if (g.watermark) watermark = g.watermark
      groups++
    }
  }
  const ids = [...ops.keys()]
  let files = 0
  let next = 0
  const worker = async (): Promise<void> => {
    while (next < ids.length) {
      const id = ids[next++]!
      const dir = shapeDir(root, id)
      if (!fs.existsSync(dir)) continue // deleted (its directory went to trash) or never renamed into place
      for (const [file, list] of ops.get(id)!) {
        const path = `${dir}/${JOURNAL_FILES[file]}`
        let fd: number
        try {
          fd = fs.openSync(path, 'r+')
        } catch (err) {
          // A damaged log: opening it reports the problem and sets it aside.
          if ((err as NodeJS.ErrnoException).code === 'ENOENT') continue
          throw fromSystemError(err, `replay into ${path}`)
        }
        try {
          for (const op of list) {
            if ('bytes' in op) writeFully(fs, fd, op.bytes, op.bytes.length, op.position)
            else fs.ftruncateSync(fd, op.size)
          }
          await fs.fdatasync(fd)
          files++
        } catch (err) {
          throw fromSystemError(err, `replay into ${path}`)
        } finally {
          fs.closeSync(fd)
        }
      }
    }
  }
  await Promise.all(Array.from({ length: Math.min(REPLAY_CONCURRENCY, ids.length) }, worker))
  if (watermark !== fileWatermark) await publishWatermark(fs, root, watermark)
  try {
    for (const seg of segments) fs.unlinkSync(seg.path)
    if (segments.length > 0) await syncDirectory(fs, `${root}/journal`)
  } catch (err) {
    throw fromSystemError(err, 'remove replayed journal segments')
  }
  const last = segments.at(-1)
  return { segments: segments.length, groups, files, nextGeneration: last ? last.generation + 1 : 1, watermark }
}
