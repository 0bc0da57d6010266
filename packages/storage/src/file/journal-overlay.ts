/**
 * What a read-only follower lays over the log files: the writes and truncations
 * of the journal segments still present, in order.
 *
 * The writer syncs a log's own files only at checkpoints, so the files on disk
 * may lack what the watermark covers (after a power cut before the writer's
 * replay, or for a follower that does not share the writer's page cache). The
 * journal holds it: everything since the last checkpoint, synced before the
 * watermark covering it was published. So a follower that reads the watermark
 * first and then the journal, and reads each file through the journal's
 * operations, sees every byte the watermark covers. Once a checkpoint deletes a
 * segment, its logs' files are synced, and the overlay is rebuilt from the
 * segments left (after reading the rest of the deleted one, still open here).
 *
 * Per file the operations collapse into sorted, disjoint extents; appends
 * extend the last one in place (amortised doubling), which is what almost
 * every journaled write is.
 *
 * That holds for logs the writer still has. A deleted log's tail is never
 * written back: its records leave the view at its tombstone, and with any
 * segment the overlay never read (checkpointed before this follower looked,
 * or another writer's). So the overlay reports those events (`onTombstone`,
 * `epoch`), and a reader holding such a log checks it is still there before
 * trusting a view that may have lost them (read-only-store.ts).
 */
import { fromSystemError } from '../errors.js'
import type { FsPort } from '../fs-port.js'
import { readFully } from '../fs-port.js'
import { JOURNAL_FILES, RECORD_TOMBSTONE, RECORD_WRITE, parseSegment } from './journal-format.js'
import type { JournalFile, JournalRecord } from './journal-format.js'
import { listSegments, readSegmentGroups } from './journal-replay.js'
import { isBucketName } from './shape-dirs.js'

interface Extent {
  pos: number
  buf: Buffer
  len: number
}

export class FileOverlay {
  private readonly extents: Extent[] = []
  /** Set by a truncation: bytes of the file on disk past it are not the writer's. */
  private truncatedTo: number | undefined
  /** End of the furthest write since the last truncation. */
  private end = 0

  write(pos: number, bytes: Uint8Array): void {
    const n = bytes.length
    if (n === 0) return
    const last = this.extents.at(-1)
    if (last && last.pos + last.len === pos) {
      if (last.len + n > last.buf.length) {
        const grown = Buffer.allocUnsafe(Math.max(last.len + n, last.buf.length * 2))
        last.buf.copy(grown, 0, 0, last.len)
        last.buf = grown
      }
      last.buf.set(bytes, last.len)
      last.len += n
    } else {
      this.clip(pos, pos + n)
      const at = this.extents.findIndex((e) => e.pos > pos)
      const extent = { pos, buf: Buffer.from(bytes), len: n }
      if (at < 0) this.extents.push(extent)
      else this.extents.splice(at, 0, extent)
    }
    this.end = Math.max(this.end, pos + n)
  }

  truncate(size: number): void {
    this.clip(size, Number.MAX_SAFE_INTEGER)
    this.truncatedTo = size
    this.end = 0
  }

  /** Removes [from, to) from the extents. */
  private clip(from: number, to: number): void {
    const kept: Extent[] = []
    for (const e of this.extents) {
      const eEnd = e.pos + e.len
      if (eEnd <= from || e.pos >= to) {
        kept.push(e)
        continue
      }
      if (e.pos < from) kept.push({ pos: e.pos, buf: e.buf, len: from - e.pos })
      if (eEnd > to) kept.push({ pos: to, buf: e.buf.subarray(to - e.pos), len: eEnd - to })
    }
    this.extents.length = 0
    this.extents.push(...kept)
  }

  /** The file's size as the writer had it, given its size on disk. */
  size(diskSize: number): number {
    return this.truncatedTo === undefined ? Math.max(diskSize, this.end) : Math.max(this.truncatedTo, this.end)
  }

  /** Whether [from, to) of a file of `diskSize` bytes reads differently through the overlay. */
  touches(from: number, to: number, diskSize: number): boolean {
    if (to > diskSize) return true
    if (this.truncatedTo !== undefined && to > this.truncatedTo) return true
    return this.extents.some((e) => e.pos < to && e.pos + e.len > from)
  }

  /** Lays the extents over `got` bytes read from disk at `position`; returns the logical count. */
  overlay(buf: Uint8Array, offset: number, length: number, position: number, got: number, diskSize: number): number {
    const size = this.size(diskSize)
    const end = Math.min(position + length, size)
    const n = Math.max(0, end - position)
    // Disk bytes past a truncation, or past the disk's end, are not the writer's.
    const valid = Math.max(0, Math.min(got, (this.truncatedTo ?? Number.MAX_SAFE_INTEGER) - position))
    if (n > valid) buf.fill(0, offset + valid, offset + n)
    for (const e of this.extents) {
      const from = Math.max(e.pos, position)
      const to = Math.min(e.pos + e.len, end)
      if (from < to) buf.set(e.buf.subarray(from - e.pos, to - e.pos), offset + (from - position))
    }
    return n
  }
}

interface KnownSegment {
  readonly generation: number
  readonly path: string
  fd: number
  /**
   * Its inode, pinned by our open descriptor: a writer that starts over can
   * reuse a generation, and the new file then has another inode.
   */
  readonly ino: number
  /** Bytes of the segment parsed into the overlay. */
  parsed: number
  /** Bytes of it ever parsed: a rebuild reads it again from its start, and those groups are not new. */
  seen: number
}

export class JournalOverlay {
  private segments: KnownSegment[] = []
  private files = new Map<string, Map<JournalFile, FileOverlay>>()
  /**
   * Moves when records may have left the view without a live log's files
   * holding them for it: segments created and deleted unread, or replaced by
   * another writer's.
   */
  epoch = 0
  /** The sequence of the last group read for the first time. */
  private lastSequence: number | undefined
  /** Ids with records applied since the last `takeTouched`: the logs a new watermark can have moved (see `ReadOnlyFileLogStore.poll`). */
  private touched = new Set<string>()

  /** Whether any segment is being read: a writer without a journal (or between its segments) leaves nothing to tell which logs moved. */
  get journaled(): boolean {
    return this.segments.length > 0
  }

  /** The ids written, truncated or deleted through the journal since the last call. */
  takeTouched(): Set<string> {
    const touched = this.touched
    this.touched = new Set()
    return touched
  }

  constructor(
    private readonly fs: FsPort,
    private readonly root: string,
    /** Called for each tombstone applied: the records of that id before it left the view. */
    private readonly onTombstone: (id: string) => void = () => {},
  ) {}

  /** Whether the view holds records of `id`. */
  holds(id: string): boolean {
    return this.files.has(id)
  }

  view(id: string, file: JournalFile): FileOverlay | undefined {
    return this.files.get(id)?.get(file)
  }

  /** Reads what the writer added to the journal since the last call. Call after reading the watermark. */
  update(): void {
    const present = listSegments(this.fs, this.root)
    const names = new Set(present.map((s) => s.generation))
    const gone = this.segments.filter((s) => !names.has(s.generation))
    const replaced = this.segments.some((s) => names.has(s.generation) && !this.same(s))
    if (gone.length > 0 || replaced) {
      // A checkpoint deleted segments: their logs' files now hold what they wrote, so the overlay is
      // rebuilt from the segments left (or it would grow for ever). What they gained since the last
      // reading is read first, through the descriptors still held (a deleted file stays readable while
      // open): no record of theirs goes unseen, which logs it touched nor which it deleted, so nothing
      // left the view unseen and no reader has to look at every log (the epoch stays). A segment
      // replaced under its name is another writer's: its files hide what may have come and gone.
      for (const seg of gone) this.tail(seg)
      if (replaced) {
        this.epoch++
        this.rebuild([])
      } else {
        // The segments left are read again from their start, through the descriptors held.
        this.rebuild(this.segments.filter((s) => names.has(s.generation)))
      }
    }
    const known = new Set(this.segments.map((s) => s.generation))
    for (const s of present) {
      if (known.has(s.generation)) continue
      // Whether segments came and went unread before this one is told by its groups' sequence (`tail`).
      let fd: number
      try {
        fd = this.fs.openSync(s.path, 'r')
      } catch (err) {
        // Checkpointed just now: its live logs' files hold its writes (not a deleted log's).
        if ((err as NodeJS.ErrnoException).code === 'ENOENT') {
          this.epoch++
          continue
        }
        throw fromSystemError(err, `open ${s.path}`)
      }
      this.segments.push({ generation: s.generation, path: s.path, fd, parsed: 0, seen: 0, ino: this.fs.fstatSync(fd).ino })
    }
    for (const seg of this.segments) this.tail(seg)
  }

  private same(seg: KnownSegment): boolean {
    try {
      return this.fs.statSync(seg.path).ino === seg.ino
    } catch {
      return false
    }
  }

  private tail(seg: KnownSegment): void {
    const size = this.fs.fstatSync(seg.fd).size
    if (size <= seg.parsed) return
    const buf = Buffer.allocUnsafe(size - seg.parsed)
    const n = readFully(this.fs, seg.fd, buf, 0, buf.length, seg.parsed)
    const bytes = buf.subarray(0, n)
    const { groups, end } = seg.parsed === 0 ? readSegmentGroups(bytes, seg.generation) : parseSegment(bytes, seg.generation, 0)
    for (const g of groups) {
      // Every group a writer commits takes the next sequence number, and a new writer goes on from its
      // watermark's. A group read for the first time that does not follow the last one seen means groups
      // that came and went unread (segments checkpointed before this view looked), or a writer that
      // started over from an earlier sequence: records may have left the view unseen. Groups read again
      // after a rebuild were seen already.
      if (seg.parsed + g.end > seg.seen) {
        if (this.lastSequence === undefined || g.sequence !== this.lastSequence + 1) this.epoch++
        this.lastSequence = g.sequence
      }
      this.apply(g.records)
    }
    seg.parsed += end
    seg.seen = Math.max(seg.seen, seg.parsed)
  }

  private apply(records: readonly JournalRecord[]): void {
    for (const r of records) {
      this.touched.add(r.id)
      if (r.type === RECORD_TOMBSTONE) {
        this.files.delete(r.id)
        this.onTombstone(r.id)
        continue
      }
      let files = this.files.get(r.id)
      if (!files) this.files.set(r.id, (files = new Map()))
      let f = files.get(r.file)
      if (!f) files.set(r.file, (f = new FileOverlay()))
      if (r.type === RECORD_WRITE) f.write(r.position, r.bytes)
      else f.truncate(r.size)
    }
  }

  /**
   * Forgets what the segments wrote, to read `keep` again from their start
   * (through the descriptors held: a segment deleted meanwhile is still the
   * one read); the others are closed.
   */
  private rebuild(keep: readonly KnownSegment[]): void {
    const kept = new Set(keep)
    for (const seg of this.segments) {
      if (kept.has(seg)) seg.parsed = 0
      else this.closeSegment(seg)
    }
    this.segments = [...keep]
    this.files = new Map()
  }

  private closeSegment(seg: KnownSegment): void {
    try {
      this.fs.closeSync(seg.fd)
    } catch {
      // Read-only descriptor: nothing to lose.
    }
  }

  close(): void {
    for (const seg of this.segments) this.closeSegment(seg)
    this.segments = []
  }
}

const FILE_OF = new Map<string, JournalFile>(JOURNAL_FILES.map((name, i) => [name, i as JournalFile]))

/**
 * A filesystem port that reads log files through the overlay: reads and sizes of
 * `shapes/<bucket>/<id>/<file>` descriptors are what the writer's files hold.
 */
export function overlayFs(base: FsPort, root: string, overlay: JournalOverlay): FsPort {
  const prefix = `${root}/shapes/`
  const keys = new Map<number, { id: string; file: JournalFile }>()
  const viewOf = (fd: number): FileOverlay | undefined => {
    const key = keys.get(fd)
    return key && overlay.view(key.id, key.file)
  }
  return {
    ...base,
    openSync(path, flags, mode) {
      const fd = base.openSync(path, flags, mode)
      if (path.startsWith(prefix)) {
        const parts = path.slice(prefix.length).split('/')
        // `<bucket>/<id>/<file>`, or `<id>/<file>` from a writer that has not moved its logs into buckets yet.
        if (parts.length === 3 && isBucketName(parts[0]!)) parts.shift()
        const [id, name, more] = parts
        const file = name === undefined ? undefined : FILE_OF.get(name)
        if (id && file !== undefined && more === undefined) keys.set(fd, { id, file })
      }
      return fd
    },
    closeSync(fd) {
      keys.delete(fd)
      base.closeSync(fd)
    },
    fstatSync(fd) {
      const s = base.fstatSync(fd)
      const view = viewOf(fd)
      return view ? { size: view.size(s.size), ino: s.ino } : s
    },
    readSync(fd, buffer, offset, length, position) {
      const view = viewOf(fd)
      const got = base.readSync(fd, buffer, offset, length, position)
      return view ? view.overlay(buffer, offset, length, position, got, base.fstatSync(fd).size) : got
    },
    async read(fd, buffer, offset, length, position) {
      const view = viewOf(fd)
      const got = await base.read(fd, buffer, offset, length, position)
      return view ? view.overlay(buffer, offset, length, position, got, base.fstatSync(fd).size) : got
    },
  }
}
