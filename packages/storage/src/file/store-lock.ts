/**
 * One writer per store directory: a LOCK file created with O_EXCL holding the
 * writer's pid. A lock left by a process that no longer exists is taken over.
 * (Choosing the writer among machines sharing a disk is the server's job,
 * through a Postgres advisory lock; this only stops two local writers.)
 */
import { StorageError, fromSystemError } from '../errors.js'
import type { FsPort } from '../fs-port.js'
import { writeFully } from '../fs-port.js'

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0)
    return true
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM'
  }
}

export function acquireStoreLock(fs: FsPort, root: string): () => void {
  const path = `${root}/LOCK`
  for (let attempt = 0; attempt < 2; attempt++) {
    try {
      const fd = fs.openSync(path, 'wx', 0o644)
      const pid = Buffer.from(String(process.pid))
      try {
        writeFully(fs, fd, pid, pid.length, 0)
      } finally {
        fs.closeSync(fd)
      }
      return () => {
        try {
          fs.unlinkSync(path)
        } catch {
          // Already gone: nothing to release.
        }
      }
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw fromSystemError(err, `lock ${root}`)
      const holder = Number.parseInt(fs.readFileSync(path).toString('utf8'), 10)
      if (Number.isInteger(holder) && holder !== process.pid && alive(holder)) {
        throw new StorageError('store_locked', `${root} is held for writing by process ${holder}`)
      }
      if (holder === process.pid) {
        throw new StorageError('store_locked', `${root} is already open for writing in this process`)
      }
      fs.unlinkSync(path)
    }
  }
  throw new StorageError('store_locked', `could not lock ${root}`)
}
