import { join } from 'node:path'
import { spillError } from './errors.js'
import { SPILL_HEADER_BYTES, encodeHeader, type SpillFileKind } from './format.js'
import { type SpillFs, nodeSpillFs, writeFully } from './spill-fs.js'

/** Every spill file ends with this; nothing else in a spill directory is ever touched. */
export const SPILL_FILE_SUFFIX = '.spill'

export interface SpillDirOptions {
  /** The filesystem port; node:fs by default. */
  readonly fs?: SpillFs | undefined
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
  private created: Promise<void> | undefined

  private constructor(
    readonly path: string,
    readonly fs: SpillFs,
    created: boolean,
  ) {
    if (created) this.created = Promise.resolve()
  }

  /** Creates the directory if missing and deletes stale spill files in it. */
  static async open(path: string, options: SpillDirOptions = {}): Promise<SpillDir> {
    const fs = options.fs ?? nodeSpillFs
    try {
      await fs.mkdir(path, { recursive: true })
      for (const name of await fs.readdir(path)) {
        if (name.endsWith(SPILL_FILE_SUFFIX)) await fs.unlink(join(path, name))
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
    return new SpillDir(path, options.fs ?? nodeSpillFs, false)
  }

  /**
   * Creates a new spill file named `<prefix>.<n>.spill` and writes its header.
   * Rejects with `spill_open_failed` (nothing left behind) or `spill_write_failed`.
   */
  async createFile(prefix: string, kind: SpillFileKind): Promise<SpillFile> {
    this.created ??= this.fs.mkdir(this.path, { recursive: true }).then(
      () => undefined,
      (err: unknown) => {
        this.created = undefined
        throw err
      },
    )
    const path = join(this.path, `${safeName(prefix)}.${++fileCounter}${SPILL_FILE_SUFFIX}`)
    let fd: number
    try {
      await this.created
      fd = await this.fs.open(path, 'w+', 0o600)
    } catch (err) {
      throw spillError('spill_open_failed', `creating spill file ${path}`, err)
    }
    try {
      await writeFully(this.fs, fd, encodeHeader(kind), SPILL_HEADER_BYTES, 0)
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
      await this.fs.close(file.fd)
    } catch {
      ok = false
    }
    try {
      await this.fs.unlink(file.path)
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') ok = false
    }
    return ok
  }
}

/** File-name-safe, bounded: names come from xids and shape handles. */
function safeName(prefix: string): string {
  const safe = prefix.replace(/[^A-Za-z0-9_-]/g, '_')
  return safe.length > 100 ? safe.slice(0, 100) : safe
}
