import { setImmediate as turn } from 'node:timers/promises'
import type { Awaitable, SpillDir, SpillFile, StreamAbort, StreamAhead, StreamCommit, StreamedChange } from '../replication/index.js'
import { SPILL_HEADER_BYTES } from '../replication/index.js'
import { LineScratch } from './line-scratch.js'
import type { AheadPart, ShapeRouter } from './router.js'
import type { RoutedShape } from './table-route.js'

/**
 * A streamed transaction routed while it streams in, so that its commit costs
 * little more than appending lines already encoded.
 *
 * Postgres (pgoutput protocol 2) streams a transaction bigger than
 * `logical_decoding_work_mem` before it commits; the stream buffer keeps its
 * changes, and before this module all of the routing work (read back, decode,
 * where clauses, JSON encoding) waited for the commit. Here each streamed
 * batch is routed at once to the shapes of the moment (`ShapeRouter.routeAhead`)
 * and its encoded lines wait in a scratch file of their own. The commit LSN
 * is in every line (`"lsn":"…"`) but unknown until the commit, so lines are
 * encoded with LSN 0 and kept split around it; which line is a shape's last
 * (`"last":true`) is known only then too. At the commit both are spliced in
 * and the lines go to the shapes' targets as any transaction's do: appended,
 * published with the commit, durable before Postgres hears of it. Nothing of
 * the transaction reaches a log before its commit, so an abort, a crash or a
 * lost connection only drops scratch files.
 *
 * The stream buffer keeps its own copy all along. The commit is delivered from
 * that copy, as before, whenever the lines prepared here may be wrong:
 * - a shape joined a table the transaction had already changed (its earlier
 *   lines lack that shape, whose snapshot does not see the transaction);
 * - the transaction truncates a table (its invalidations belong to the commit);
 * - a subtransaction rolled back (its lines would have to be cut out);
 * - a line failed to encode, or the scratch file failed.
 * Shapes that left before the commit are skipped.
 *
 * Routed file (spill format "SLSR", version 1; after the 16-byte spill
 * header), records back to back, little-endian:
 *
 *   off size field
 *   0   4    slot     the shape, an index into the transaction's shape list (in memory)
 *   4   8    op       the line's op position (f64: ops count by two per change)
 *   12  4    a        bytes of the line up to and including `"lsn":"`
 *   16  4    b        bytes after the LSN up to the closing `]` of `txids`
 *   20  a+b  the two parts; the line is part a, the commit LSN in decimal,
 *            part b, then `}}`, or `,"last":true}}` for the shape's last line
 */

export interface RoutedAheadOptions {
  /** Encoded bytes of one transaction kept in memory before they go to its file. Default 1 MiB. */
  readonly memoryBytes?: number
  /** Bytes of records read and handed to the router per batch at the commit. Default 1 MiB. */
  readonly batchBytes?: number
}

const DEFAULT_MEMORY_BYTES = 1024 * 1024
const DEFAULT_BATCH_BYTES = 1024 * 1024
const RECORD_HEAD_BYTES = 20
const INITIAL_BYTES = 64 * 1024
/** A line encoded with LSN 0 ends `"lsn":"0","op_position":<op>,"txids":[<xid>]}}`. */
const LSN_OPEN = Buffer.from('"lsn":"', 'latin1')
const OP_POSITION = Buffer.from('","op_position":', 'latin1')
const TXIDS = Buffer.from(',"txids":[', 'latin1')
const END = Buffer.from('}}', 'latin1')
const LAST_END = Buffer.from(',"last":true}}', 'latin1')
const ZERO = 0x30

interface AheadState {
  readonly xid: number
  /** Changes of the transaction so far: the next change's index (its op is twice that). */
  nextIndex: number
  /** Oids of the tables it changed, with shapes or not. */
  readonly tables: Set<number>
  /** Shapes it has lines for, by slot. */
  readonly shapes: RoutedShape[]
  readonly slots: Map<RoutedShape, number>
  /** Lines per slot. */
  readonly lines: number[]
  buf: Buffer
  len: number
  file: SpillFile | undefined
  /** Bytes of records in the file, after its header. */
  fileLength: number
  /** Routed ahead no more: the commit takes the buffered copy. */
  declined: boolean
}

export class RoutedAhead implements StreamAhead {
  private readonly open = new Map<number, AheadState>()
  private readonly memoryBytes: number
  private readonly batchBytes: number
  private readonly scratch = new LineScratch()
  private readonly stopJoins: () => void
  private closed = false

  constructor(
    private readonly router: ShapeRouter,
    private readonly dir: SpillDir,
    options: RoutedAheadOptions = {},
  ) {
    this.memoryBytes = options.memoryBytes ?? DEFAULT_MEMORY_BYTES
    this.batchBytes = options.batchBytes ?? DEFAULT_BATCH_BYTES
    this.stopJoins = router.onJoin((oid) => {
      for (const state of this.open.values()) if (state.tables.has(oid)) void this.decline(state)
    })
  }

  /** Open transactions still routed ahead. */
  get routing(): number {
    let n = 0
    for (const state of this.open.values()) if (!state.declined) n++
    return n
  }

  append(xid: number, changes: readonly StreamedChange[]): Awaitable {
    if (this.closed) return undefined
    let state = this.open.get(xid)
    if (state === undefined) {
      state = newState(xid)
      this.open.set(xid, state)
    }
    if (state.declined) return undefined
    const s = state
    for (const { change } of changes) {
      if (change.kind !== 'truncate') s.tables.add(change.relation.id)
    }
    const next = this.router.routeAhead(xid, s.nextIndex, changes, (shape, op, line) => this.put(s, shape, op, line))
    if (next === undefined) return this.decline(s)
    s.nextIndex = next
    if (s.len > this.memoryBytes) return this.writeOut(s)
    return undefined
  }

  abort(abort: StreamAbort): Awaitable {
    const state = this.open.get(abort.xid)
    if (state === undefined) return undefined
    // A subtransaction's lines cannot be told apart here: the commit takes the buffered copy, which can cut them.
    if (abort.subxid !== abort.xid && abort.reason === 'aborted') return this.decline(state)
    this.open.delete(abort.xid)
    return this.release(state)
  }

  commit(commit: StreamCommit): Promise<void> | undefined {
    const state = this.open.get(commit.xid)
    if (state === undefined) return undefined
    this.open.delete(commit.xid)
    if (state.declined || this.closed) {
      void this.release(state)
      return undefined
    }
    return this.deliver(state, commit)
  }

  /** Drops every transaction and deletes their files. */
  async close(): Promise<void> {
    this.closed = true
    this.stopJoins()
    const states = [...this.open.values()]
    this.open.clear()
    await Promise.all(states.map((s) => this.release(s)))
  }

  private put(state: AheadState, shape: RoutedShape, op: number, line: Uint8Array): void {
    const at = lsnAt(line, op, state.xid)
    let slot = state.slots.get(shape)
    if (slot === undefined) {
      slot = state.shapes.length
      state.shapes.push(shape)
      state.slots.set(shape, slot)
      state.lines.push(0)
    }
    state.lines[slot]!++
    const b = line.length - at - 1 - END.length
    const need = RECORD_HEAD_BYTES + at + b
    if (state.len + need > state.buf.length) {
      const bigger = Buffer.allocUnsafe(Math.max(state.len + need, state.buf.length * 2))
      state.buf.copy(bigger, 0, 0, state.len)
      state.buf = bigger
    }
    const buf = state.buf
    let p = state.len
    buf.writeUInt32LE(slot, p)
    buf.writeDoubleLE(op, p + 4)
    buf.writeUInt32LE(at, p + 12)
    buf.writeUInt32LE(b, p + 16)
    p += RECORD_HEAD_BYTES
    buf.set(line.subarray(0, at), p)
    buf.set(line.subarray(at + 1, at + 1 + b), p + at)
    state.len = p + at + b
  }

  /**
   * Appends the records in memory to the transaction's file. The write is
   * synchronous (a copy into the page cache, as the read at the commit is), so
   * no write is ever in flight when a decline or close removes the file.
   */
  private async writeOut(state: AheadState): Promise<void> {
    try {
      if (state.file === undefined) {
        const file = await this.dir.createFile(`routed-${state.xid}`, 'routed')
        if (state.declined || this.closed) {
          await this.dir.removeFile(file)
          return
        }
        state.file = file
      }
      const { fd } = state.file
      for (let done = 0; done < state.len; ) {
        const n = this.dir.fs.writeSync(fd, state.buf, done, state.len - done, SPILL_HEADER_BYTES + state.fileLength + done)
        if (n <= 0) throw new Error('write returned 0 bytes')
        done += n
      }
    } catch {
      // Scratch only: the buffered copy still has the transaction.
      await this.decline(state)
      return
    }
    state.fileLength += state.len
    state.len = 0
    if (state.buf.length > 2 * this.memoryBytes) state.buf = Buffer.allocUnsafe(INITIAL_BYTES)
  }

  private decline(state: AheadState): Promise<void> | undefined {
    if (state.declined) return undefined
    state.declined = true
    return this.release(state)
  }

  private async release(state: AheadState): Promise<void> {
    state.buf = EMPTY
    state.len = 0
    state.shapes.length = 0
    state.slots.clear()
    const file = state.file
    state.file = undefined
    state.fileLength = 0
    if (file !== undefined) await this.dir.removeFile(file)
  }

  private async deliver(state: AheadState, commit: StreamCommit): Promise<void> {
    try {
      await this.router.onAheadTransaction(commit.lsn, commit.xid, this.batches(state, commit.lsn))
    } finally {
      await this.release(state)
    }
  }

  /** The transaction's lines with the commit LSN spliced in, about `batchBytes` of records at a time, grouped by shape. */
  private async *batches(state: AheadState, lsn: bigint): AsyncGenerator<readonly AheadPart[]> {
    const digits = Buffer.from(lsn.toString(), 'latin1')
    const left = state.lines.slice()
    const groups = state.shapes.map(() => ({ ops: [] as number[], jsons: [] as Uint8Array[], count: 0 }))
    const used: number[] = []
    const file = state.file
    // Without a file every record is in memory; with one, the file's records come first, then those in memory.
    let buf = file === undefined ? state.buf : Buffer.allocUnsafe(Math.max(2 * this.batchBytes, INITIAL_BYTES))
    let start = 0
    let end = file === undefined ? state.len : 0
    let filePos = 0
    let tailCopied = file === undefined
    let partial = false
    for (;;) {
      if (partial && tailCopied) throw new Error(`the routed records of xid ${state.xid} end inside a record`)
      if (!tailCopied && (partial || end - start < this.batchBytes)) {
        // Compact, then fill from the file (written moments ago: a page-cache copy, on the event loop).
        buf.copyWithin(0, start, end)
        end -= start
        start = 0
        if (filePos < state.fileLength) {
          const want = Math.min(buf.length - end, state.fileLength - filePos)
          let got = 0
          while (got < want) {
            const n = this.dir.fs.readSync(file!.fd, buf, end + got, want - got, SPILL_HEADER_BYTES + filePos + got)
            if (n === 0) throw new Error(`the routed file of xid ${state.xid} is shorter than written`)
            got += n
          }
          end += got
          filePos += got
        } else {
          if (end + state.len > buf.length) {
            const bigger = Buffer.allocUnsafe(end + state.len)
            buf.copy(bigger, 0, 0, end)
            buf = bigger
          }
          state.buf.copy(buf, end, 0, state.len)
          end += state.len
          tailCopied = true
        }
      }
      if (start === end && tailCopied) break
      partial = false
      const batchEnd = start + this.batchBytes
      while (start < end && start < batchEnd) {
        if (end - start < RECORD_HEAD_BYTES) {
          partial = true
          break
        }
        const a = buf.readUInt32LE(start + 12)
        const b = buf.readUInt32LE(start + 16)
        const size = RECORD_HEAD_BYTES + a + b
        if (end - start < size) {
          if (size > buf.length) {
            const bigger = Buffer.allocUnsafe(size * 2)
            buf.copy(bigger, 0, start, end)
            end -= start
            start = 0
            buf = bigger
          }
          partial = true
          break
        }
        const slot = buf.readUInt32LE(start)
        const op = buf.readDoubleLE(start + 4)
        const last = --left[slot]! === 0
        const shape = state.shapes[slot]!
        if (!shape.doomed) {
          const tail = last ? LAST_END : END
          const out = this.scratch.open(a + digits.length + b + tail.length)
          let at = this.scratch.start
          const body = start + RECORD_HEAD_BYTES
          buf.copy(out, at, body, body + a)
          at += a
          out.set(digits, at)
          at += digits.length
          buf.copy(out, at, body + a, body + a + b)
          at += b
          out.set(tail, at)
          const group = groups[slot]!
          if (group.count === 0) used.push(slot)
          group.ops[group.count] = op
          group.jsons[group.count] = this.scratch.take(at + tail.length)
          group.count++
        }
        start += size
      }
      if (used.length > 0) {
        const parts: AheadPart[] = used.map((slot) => ({ shape: state.shapes[slot]!, ops: groups[slot]!.ops, jsons: groups[slot]!.jsons, count: groups[slot]!.count, more: left[slot]! > 0 }))
        yield parts
        for (const slot of used) {
          const group = groups[slot]!
          group.jsons.fill(NO_LINE, 0, group.count)
          group.count = 0
        }
        used.length = 0
      }
      this.scratch.reset()
      // As the buffered read-back does: a turn between batches, so flushes, write-backs and requests run.
      await turn()
    }
  }
}

const EMPTY = Buffer.alloc(0)
const NO_LINE = new Uint8Array(0)

function newState(xid: number): AheadState {
  return {
    xid,
    nextIndex: 0,
    tables: new Set(),
    shapes: [],
    slots: new Map(),
    lines: [],
    buf: Buffer.allocUnsafe(INITIAL_BYTES),
    len: 0,
    file: undefined,
    fileLength: 0,
    declined: false,
  }
}

/**
 * Where the `0` of `"lsn":"0"` sits in a line encoded with LSN 0, checked
 * against the encoder's layout (change-encoder.ts): the line must end
 * `"lsn":"0","op_position":<op>,"txids":[<xid>]}}`.
 */
function lsnAt(line: Uint8Array, op: number, xid: number): number {
  const after = OP_POSITION.length + String(op).length + TXIDS.length + String(xid).length + 1 + END.length
  const at = line.length - after - 1
  const ok = at > LSN_OPEN.length && line[at] === ZERO && sameBytes(line, at - LSN_OPEN.length, LSN_OPEN) && sameBytes(line, at + 1, OP_POSITION)
  if (!ok) throw new Error('a routed line does not end as the change encoder writes it')
  return at
}

function sameBytes(line: Uint8Array, at: number, bytes: Uint8Array): boolean {
  for (let i = 0; i < bytes.length; i++) if (line[at + i] !== bytes[i]) return false
  return true
}
