/**
 * The durable watermark file: published atomically (write a temp file, sync it,
 * rename it over the old one, sync the directory), so a reader, or the writer
 * after a crash, sees either the old value or the new one, never a torn one.
 */
import { StorageError, fromSystemError } from './errors.js'
import { decodeWatermark, encodeWatermark } from './format.js'
import type { Watermark } from './format.js'
import type { FsPort } from './fs-port.js'
import { writeFully } from './fs-port.js'

export const WATERMARK_FILE = 'watermark'
const TEMP_FILE = 'watermark.tmp'

export async function syncDirectory(fs: FsPort, dir: string): Promise<void> {
  const fd = fs.openSync(dir, 'r')
  try {
    await fs.fsync(fd)
  } finally {
    fs.closeSync(fd)
  }
}

export async function publishWatermark(fs: FsPort, root: string, w: Watermark): Promise<void> {
  const tmp = `${root}/${TEMP_FILE}`
  try {
    const bytes = encodeWatermark(w)
    const fd = fs.openSync(tmp, 'w', 0o644)
    try {
      writeFully(fs, fd, bytes, bytes.length, 0)
      await fs.fdatasync(fd)
    } finally {
      fs.closeSync(fd)
    }
    fs.renameSync(tmp, `${root}/${WATERMARK_FILE}`)
    await syncDirectory(fs, root)
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
