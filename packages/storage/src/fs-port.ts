/**
 * The filesystem port: the only way the file engine touches the disk. The default
 * is node:fs; tests pass a wrapper that injects ENOSPC, EIO and torn writes
 * (see @sluice/test-utils `createFaultyFs`). Hot-path calls are synchronous on
 * purpose: an append is a couple of page-cache writes, and a thread-pool round
 * trip would cost more than the write. Syncs, which wait on the device, are async.
 */
import { execFile } from 'node:child_process'
import * as fs from 'node:fs'
import { release } from 'node:os'

export interface FsPort {
  openSync(path: string, flags: string, mode?: number): number
  closeSync(fd: number): void
  readSync(fd: number, buffer: Uint8Array, offset: number, length: number, position: number): number
  writeSync(fd: number, buffer: Uint8Array, offset: number, length: number, position: number): number
  ftruncateSync(fd: number, length: number): void
  fstatSync(fd: number): { size: number; ino: number }
  /** `nlink` where the port knows it (a directory's count tells an open how many logs a bucket holds). */
  statSync(path: string): { size: number; mtimeMs: number; ino: number; nlink?: number }
  read(fd: number, buffer: Uint8Array, offset: number, length: number, position: number): Promise<number>
  /** On the thread pool: write-behind through a port other than the real file system (write-back.ts `PortWriter`). */
  write(fd: number, buffer: Uint8Array, offset: number, length: number, position: number): Promise<number>
  fdatasync(fd: number): Promise<void>
  fsync(fd: number): Promise<void>
  /**
   * Optional: makes every write to files under `dir` durable in one call
   * (syncfs(2) on the filesystem that holds it). A checkpoint of many logs
   * takes it over one fdatasync per file, which costs a journal commit each.
   * Rejects with code ENOTSUP where the system has no way to do it, EIO when
   * the sync failed, or another code when it could not be attempted.
   */
  syncFilesystem?(dir: string): Promise<void>
  mkdirSync(path: string, options: { recursive: true }): void
  readdirSync(path: string): string[]
  renameSync(from: string, to: string): void
  /** A second name for a file; EEXIST if `to` exists (never replaces it, unlike rename). Optional: the pid-file lock falls back to O_EXCL without it. */
  linkSync?(from: string, to: string): void
  readFileSync(path: string): Buffer
  existsSync(path: string): boolean
  unlinkSync(path: string): void
  /** Removes an empty directory (ENOTEMPTY otherwise). */
  rmdirSync(path: string): void
  rm(path: string, options: { recursive: true; force: true }): Promise<void>
}

function promised<T>(fn: (cb: (err: NodeJS.ErrnoException | null, value: T) => void) => void): Promise<T> {
  return new Promise((resolve, reject) => fn((err, value) => (err ? reject(err) : resolve(value))))
}

/**
 * syncfs(2) through coreutils' `sync -f` (Node has no binding for it). The
 * child opens `dir` afresh; since Linux 5.8 syncfs reports every writeback
 * error on the filesystem that no earlier syncfs reported, so a failure of the
 * kernel's background writeback before the call is seen too. Older kernels
 * report none, so there it is not offered (`syncfsReportsErrors`).
 *
 * Rejects with ENOTSUP when `sync` is missing or lacks -f, with EIO when the
 * sync itself failed, and with the spawn's own code (EAGAIN, ENOMEM, EMFILE:
 * nothing was synced, nothing reported) when the child could not start.
 */
function syncfs(dir: string): Promise<void> {
  return new Promise((resolve, reject) => {
    // LC_ALL=C: the option error below is matched in English.
    execFile('sync', ['-f', '--', dir], { encoding: 'utf8', env: { ...process.env, LC_ALL: 'C' } }, (err, _stdout, stderr) => {
      if (!err) return resolve()
      const text = String(stderr).trim()
      const spawnCode = typeof err.code === 'string' ? err.code : undefined
      // No sync binary, or one without -f (coreutils before 8.24, some busybox builds).
      const unsupported = spawnCode === 'ENOENT' || (spawnCode === undefined && /invalid option|unrecognized option/.test(text))
      const code = unsupported ? 'ENOTSUP' : (spawnCode ?? 'EIO')
      reject(Object.assign(new Error(`sync -f ${dir}: ${text || err.message}`), { code }))
    })
  })
}

/** Linux 5.8 or later: syncfs reports writeback errors (before, it returned 0 whatever happened). */
export function syncfsReportsErrors(platform: string, release: string): boolean {
  if (platform !== 'linux') return false
  const m = /^(\d+)\.(\d+)/.exec(release)
  if (!m) return false
  const major = Number(m[1])
  return major > 5 || (major === 5 && Number(m[2]) >= 8)
}

export const nodeFs: FsPort = {
  openSync: (path, flags, mode) => fs.openSync(path, flags, mode),
  closeSync: (fd) => fs.closeSync(fd),
  readSync: (fd, buffer, offset, length, position) => fs.readSync(fd, buffer, offset, length, position),
  writeSync: (fd, buffer, offset, length, position) => fs.writeSync(fd, buffer, offset, length, position),
  ftruncateSync: (fd, length) => fs.ftruncateSync(fd, length),
  fstatSync: (fd) => fs.fstatSync(fd),
  statSync: (path) => fs.statSync(path),
  read: (fd, buffer, offset, length, position) =>
    promised<number>((cb) => fs.read(fd, buffer, offset, length, position, (err, n) => cb(err, n))),
  fdatasync: (fd) => promised<void>((cb) => fs.fdatasync(fd, (err) => cb(err, undefined))),
  fsync: (fd) => promised<void>((cb) => fs.fsync(fd, (err) => cb(err, undefined))),
  write: (fd, buffer, offset, length, position) =>
    promised<number>((cb) => fs.write(fd, buffer, offset, length, position, (err, n) => cb(err, n))),
  mkdirSync: (path, options) => void fs.mkdirSync(path, options),
  readdirSync: (path) => fs.readdirSync(path),
  renameSync: (from, to) => fs.renameSync(from, to),
  linkSync: (from, to) => fs.linkSync(from, to),
  readFileSync: (path) => fs.readFileSync(path),
  existsSync: (path) => fs.existsSync(path),
  unlinkSync: (path) => fs.unlinkSync(path),
  rmdirSync: (path) => fs.rmdirSync(path),
  rm: (path, options) => fs.promises.rm(path, options),
  ...(syncfsReportsErrors(process.platform, release()) ? { syncFilesystem: syncfs } : {}),
}

/** Writes all of `buf` at `position`, looping over short writes. */
export function writeFully(port: FsPort, fd: number, buf: Uint8Array, length: number, position: number): void {
  let done = 0
  while (done < length) {
    const n = port.writeSync(fd, buf, done, length - done, position + done)
    if (n <= 0) throw Object.assign(new Error('write returned 0 bytes'), { code: 'EIO' })
    done += n
  }
}

/** `writeFully` on the thread pool. */
export async function writeFullyAsync(port: FsPort, fd: number, buf: Uint8Array, length: number, position: number): Promise<void> {
  let done = 0
  while (done < length) {
    const n = await port.write(fd, buf, done, length - done, position + done)
    if (n <= 0) throw Object.assign(new Error('write returned 0 bytes'), { code: 'EIO' })
    done += n
  }
}

/** Reads exactly `length` bytes at `position` (fewer only at end of file); returns the count. */
export function readFully(port: FsPort, fd: number, buf: Uint8Array, offset: number, length: number, position: number): number {
  let done = 0
  while (done < length) {
    const n = port.readSync(fd, buf, offset + done, length - done, position + done)
    if (n === 0) break
    done += n
  }
  return done
}
