import { join } from 'node:path'
import { type FsPort, nodeFs, writeFullyAsync } from '@sluice/storage'
import { spillError } from './errors.js'
import { SPILL_HEADER_BYTES, encodeHeader, type SpillFileKind } from './format.js'

/** Every spill file ends with this; nothing else in a spill directory is ever touched. */
export const SPILL_FILE_SUFFIX = '.spill'

export interface SpillDirOptions {
  /**
   * The storage engine's filesystem port (tests inject faults through it);
   * node:fs by default. Spill files are read and written through its
   * asynchronous `read` and `write` (the thread pool: spill I/O is batched, tens
   * of KiB and more per call, and runs next to replication); opening, closing,
   * truncating and deleting a file are the quick synchronous calls.
   */
  readonly fs?: FsPort | undefined
}

/** Per process, so two SpillDir objects for one path never hand out the same name. */
let fileCounter = 0

/** An open spill file: its descriptor and path. The header is already written. */
export interface SpillFile {
  readonly path: string
  readonly fd: number
}

/**
 * The directory that holds spill files (see format.ts for the layout). Spill
 * files never outlive their process, so `open` wipes every `*.spill` file left
 * by an earlier run. A spill directory belongs to one process: open it once at
 * startup and hand the same SpillDir to every buffer and queue.
 */
export class SpillDir {
  private constructor(
    readonly path: string,
    readonly fs: FsPort,
    private created: boolean,
  ) {}

  /** Creates the directory if missing and deletes stale spill files in it. */
  static async open(path: string, options: SpillDirOptions = {}): Promise<SpillDir> {
    const fs = options.fs ?? nodeFs
    try {
      fs.mkdirSync(path, { recursive: true })
      for (const name of fs.readdirSync(path)) {
        if (name.endsWith(SPILL_FILE_SUFFIX)) fs.unlinkSync(join(path, name))
      }
    } catch (err) {
      throw spillError('spill_open_failed', `opening spill directory ${path}`, err)
    }
    return new SpillDir(path, fs, true)
  }

  /**
   * A SpillDir for `path` without wiping it; the directory is created on first
   * use. For a component handed a bare path: prefer `open` once at startup.
   */
  static at(path: string, options: SpillDirOptions = {}): SpillDir {
    return new SpillDir(path, options.fs ?? nodeFs, false)
  }

  /**
   * Creates a new spill file named `<prefix>.<n>.spill` and writes its header.
   * Rejects with `spill_open_failed` (nothing left behind) or `spill_write_failed`.
   */
  async createFile(prefix: string, kind: SpillFileKind): Promise<SpillFile> {
    const path = join(this.path, `${safeName(prefix)}.${++fileCounter}${SPILL_FILE_SUFFIX}`)
    let fd: number
    try {
      if (!this.created) {
        this.fs.mkdirSync(this.path, { recursive: true })
        this.created = true
      }
      fd = this.fs.openSync(path, 'w+', 0o600)
    } catch (err) {
      throw spillError('spill_open_failed', `creating spill file ${path}`, err)
    }
    try {
      await writeFullyAsync(this.fs, fd, encodeHeader(kind), SPILL_HEADER_BYTES, 0)
    } catch (err) {
      await this.removeFile({ path, fd })
      throw spillError('spill_write_failed', `writing the header of spill file ${path}`, err)
    }
    return { path, fd }
  }

  /**
   * Closes and deletes a spill file. Best effort: a file that cannot be
   * deleted is reported by the returned promise resolving to false (the next
   * `open` of the directory wipes it).
   */
  async removeFile(file: SpillFile): Promise<boolean> {
    let ok = true
    try {
      this.fs.closeSync(file.fd)
    } catch {
      ok = false
    }
    try {
      this.fs.unlinkSync(file.path)
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') ok = false
    }
    return ok
  }
}

/** Reads `length` bytes at `position` into `buf[offset..]` through the port's asynchronous read; fewer only at end of file. Returns the count. */
export async function readFully(port: FsPort, fd: number, buf: Uint8Array, offset: number, length: number, position: number): Promise<number> {
  let done = 0
  while (done < length) {
    const n = await port.read(fd, buf, offset + done, length - done, position + done)
    if (n === 0) break
    done += n
  }
  return done
}

/** File-name-safe, bounded: names come from xids and shape handles. */
function safeName(prefix: string): string {
  const safe = prefix.replace(/[^A-Za-z0-9_-]/g, '_')
  return safe.length > 100 ? safe.slice(0, 100) : safe
}
