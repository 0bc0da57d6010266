/**
 * The durable watermark file: published atomically (write a temp file, sync it,
 * rename it over the old one, sync the directory), so a reader, or the writer
 * after a crash, sees either the old value or the new one, never a torn one.
 */
import { StorageError, fromSystemError } from '../errors.js'
import { decodeWatermark, encodeWatermark } from '../format.js'
import type { Watermark } from '../format.js'
import type { FsPort } from '../fs-port.js'
import { writeFully } from '../fs-port.js'

export const WATERMARK_FILE = 'watermark'
export const LIVE_WATERMARK_FILE = 'watermark.live'
const TEMP_FILE = 'watermark.tmp'

export async function syncDirectory(fs: FsPort, dir: string): Promise<void> {
  const fd = fs.openSync(dir, 'r')
  try {
    await fs.fsync(fd)
  } finally {
    fs.closeSync(fd)
  }
}

/** Replaces `dir/name` with `bytes` so that a crash leaves the old file or the new one: a temporary file, fdatasync, rename, directory fsync. */
export async function replaceFileDurably(fs: FsPort, dir: string, name: string, tmpName: string, bytes: Uint8Array): Promise<void> {
  const tmp = `${dir}/${tmpName}`
  const fd = fs.openSync(tmp, 'w', 0o644)
  try {
    writeFully(fs, fd, bytes, bytes.length, 0)
    await fs.fdatasync(fd)
  } finally {
    fs.closeSync(fd)
  }
  fs.renameSync(tmp, `${dir}/${name}`)
  await syncDirectory(fs, dir)
}

export async function publishWatermark(fs: FsPort, root: string, w: Watermark): Promise<void> {
  try {
    await replaceFileDurably(fs, root, WATERMARK_FILE, TEMP_FILE, encodeWatermark(w))
  } catch (err) {
    throw fromSystemError(err, 'publish the durable watermark')
  }
}

/** Reads the watermark; undefined when the store has none yet. */
export function readWatermark(fs: FsPort, root: string): Watermark | undefined {
  const path = `${root}/${WATERMARK_FILE}`
  let bytes: Buffer
  try {
    bytes = fs.readFileSync(path)
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined
    throw fromSystemError(err, `read ${path}`)
  }
  const w = decodeWatermark(bytes)
  if (w === 'version') throw new StorageError('unsupported_format', `${path} has format version ${bytes[4]}`)
  if (typeof w === 'string') throw new StorageError('corrupt_log', `${path} is damaged (${w})`)
  return w
}

/** The version byte of the watermark file, if there is one. */
export function watermarkVersion(fs: FsPort, root: string): number | undefined {
  try {
    return fs.readFileSync(`${root}/${WATERMARK_FILE}`)[4]
  } catch {
    return undefined
  }
}

/**
 * The watermark as of the writer's last flush, for read-only followers: with
 * the journal, a flush makes its watermark durable inside its journal group
 * (journal-format.ts), and the `watermark` file moves only at checkpoints. So
 * after each flush the writer overwrites this file in place with one
 * positional write, then syncs it in the background, off the flush's path: a
 * follower on another machine sharing the disk sees it only once synced, and
 * nothing is lost if a crash takes the last one back (the journal holds it; a
 * follower then waits for the writer's replay). A follower that reads it torn
 * sees a failed check and keeps its previous value until the next poll.
 */
export class LiveWatermark {
  private fd: number | undefined
  private syncing: Promise<void> | undefined
  private again = false
  /** A sync waiting for the next turn of the event loop (see `write`). */
  private scheduled: NodeJS.Immediate | undefined
  private readonly onImmediate = (): void => {
    this.scheduled = undefined
    this.startSync()
  }

  constructor(
    private readonly fs: FsPort,
    private readonly root: string,
    private readonly onError: (err: StorageError) => void,
  ) {}

  /**
   * The write now, before the flush tells its listeners (a follower sees a
   * watermark no later than they do); its sync at the next turn of the event
   * loop: the flush's listeners include the live requests it wakes, and
   * handing an fdatasync to the thread pool (a thread woken on a busy core)
   * would stand between the journal's sync and their responses.
   */
  write(w: Watermark): void {
    try {
      this.fd ??= this.fs.openSync(`${this.root}/${LIVE_WATERMARK_FILE}`, 'w', 0o644)
      const bytes = encodeWatermark(w)
      writeFully(this.fs, this.fd, bytes, bytes.length, 0)
    } catch (err) {
      // Followers lag until a later write succeeds; the writer loses nothing.
      this.onError(fromSystemError(err, `write ${LIVE_WATERMARK_FILE}`))
      return
    }
    this.scheduled ??= setImmediate(this.onImmediate)
  }

  /** Starts the sync `write` put off, if any, now. */
  syncNow(): void {
    if (this.scheduled === undefined) return
    clearImmediate(this.scheduled)
    this.scheduled = undefined
    this.startSync()
  }

  private startSync(): void {
    if (this.fd === undefined) return
    if (this.syncing) {
      this.again = true
      return
    }
    const run = async (fd: number): Promise<void> => {
      do {
        this.again = false
        try {
          await this.fs.fdatasync(fd)
        } catch (err) {
          this.onError(fromSystemError(err, `sync ${LIVE_WATERMARK_FILE}`))
        }
      } while (this.again)
      this.syncing = undefined
    }
    this.syncing = run(this.fd)
  }

  async close(): Promise<void> {
    this.syncNow()
    await this.syncing
    if (this.fd === undefined) return
    try {
      this.fs.closeSync(this.fd)
    } catch {
      // Synced above, or a notice a later writer rewrites.
    }
    this.fd = undefined
  }
}
