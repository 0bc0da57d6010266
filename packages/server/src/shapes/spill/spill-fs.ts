/**
 * The filesystem port of the spill buffers: the only way they touch the disk.
 * The default is node:fs; tests pass a wrapper that injects ENOSPC, EIO and torn
 * writes (`createFaultyFs` from @sluice/test-utils). Every call is asynchronous
 * (the thread pool): spill I/O runs next to replication and must not block the
 * event loop, and it is batched (≥ tens of KiB per call), so the round trip is
 * cheap next to the bytes moved.
 */
import * as fs from 'node:fs'

export interface SpillFs {
  mkdir(path: string, options: { recursive: true }): Promise<unknown>
  readdir(path: string): Promise<string[]>
  unlink(path: string): Promise<void>
  /** Returns a file descriptor. */
  open(path: string, flags: string, mode: number): Promise<number>
  close(fd: number): Promise<void>
  /** Positional write; returns the bytes written (possibly fewer than `length`). */
  write(fd: number, buffer: Uint8Array, offset: number, length: number, position: number): Promise<number>
  /** Positional read; returns the bytes read (0 at end of file). */
  read(fd: number, buffer: Uint8Array, offset: number, length: number, position: number): Promise<number>
  ftruncate(fd: number, length: number): Promise<void>
}

function promised<T>(fn: (cb: (err: NodeJS.ErrnoException | null, value: T) => void) => void): Promise<T> {
  return new Promise((resolve, reject) => fn((err, value) => (err ? reject(err) : resolve(value))))
}

export const nodeSpillFs: SpillFs = {
  mkdir: (path, options) => fs.promises.mkdir(path, options),
  readdir: (path) => fs.promises.readdir(path),
  unlink: (path) => fs.promises.unlink(path),
  open: (path, flags, mode) => promised<number>((cb) => fs.open(path, flags, mode, cb)),
  close: (fd) => promised<void>((cb) => fs.close(fd, (err) => cb(err, undefined))),
  write: (fd, buffer, offset, length, position) =>
    promised<number>((cb) => fs.write(fd, buffer, offset, length, position, (err, n) => cb(err, n))),
  read: (fd, buffer, offset, length, position) =>
    promised<number>((cb) => fs.read(fd, buffer, offset, length, position, (err, n) => cb(err, n))),
  ftruncate: (fd, length) => promised<void>((cb) => fs.ftruncate(fd, length, (err) => cb(err, undefined))),
}

/** Writes `length` bytes of `buf` at `position`, looping over short writes. */
export async function writeFully(port: SpillFs, fd: number, buf: Uint8Array, length: number, position: number): Promise<void> {
  let done = 0
  while (done < length) {
    const n = await port.write(fd, buf, done, length - done, position + done)
    if (n <= 0) throw Object.assign(new Error('write returned 0 bytes'), { code: 'EIO' })
    done += n
  }
}

/** Reads `length` bytes at `position` into `buf[offset..]`; fewer only at end of file. Returns the count. */
export async function readFully(port: SpillFs, fd: number, buf: Uint8Array, offset: number, length: number, position: number): Promise<number> {
  let done = 0
  while (done < length) {
    const n = await port.read(fd, buf, offset + done, length - done, position + done)
    if (n === 0) break
    done += n
  }
  return done
}
