import * as fs from 'node:fs'
import { constants } from 'node:os'
import { join } from 'node:path'
import { promisify } from 'node:util'
import { beforeEach, describe, expect, it } from 'vitest'
import { createFaultyFs, isInjectedFault, useTempDir } from '../src/index.js'

/** A port shaped like the storage engine's: sync hot path, promise-returning syncs. */
const port = Object.freeze({
  openSync: (path: string, flags: string) => fs.openSync(path, flags),
  closeSync: (fd: number) => fs.closeSync(fd),
  writeSync: (fd: number, buffer: Uint8Array, offset: number, length: number, position: number) =>
    fs.writeSync(fd, buffer, offset, length, position),
  writevSync: (fd: number, buffers: readonly Uint8Array[], position: number) => fs.writevSync(fd, buffers, position),
  readFileSync: (path: string) => fs.readFileSync(path),
  renameSync: (from: string, to: string) => fs.renameSync(from, to),
  fdatasync: promisify(fs.fdatasync),
  write: promisify(fs.write) as (fd: number, buffer: Uint8Array, offset: number, length: number, position: number) => Promise<unknown>,
  rm: (path: string, options: { recursive: true; force: true }) => fs.promises.rm(path, options),
  pageSize: 4096,
})

const tmp = useTempDir('faulty-fs')
let dir = ''
let file = ''
beforeEach(async () => {
  dir = await tmp.make()
  file = join(dir, 'log')
  fs.writeFileSync(file, 'AAAAAAAAAAAAAAAA') // 16 bytes
})

function catchError(fn: () => unknown): NodeJS.ErrnoException & { dest?: string } {
  try {
    fn()
  } catch (error) {
    return error as NodeJS.ErrnoException & { dest?: string }
  }
  throw new Error('expected a throw')
}

describe('createFaultyFs', () => {
  it('passes calls through untouched when no rule applies', () => {
    const { fs: faulty, rules } = createFaultyFs(port)
    const fd = faulty.openSync(file, 'r+')
    expect(faulty.writeSync(fd, Buffer.from('xy'), 0, 2, 4)).toBe(2)
    faulty.closeSync(fd)
    expect(fs.readFileSync(file, 'utf8')).toBe('AAAAxyAAAAAAAAAA')
    expect(faulty.pageSize).toBe(4096)
    expect(rules.calls('writeSync')).toBe(1)
    expect(rules.callCounts()).toEqual({ openSync: 1, writeSync: 1, closeSync: 1 })
  })

  it('throws ENOSPC shaped like a node system error, and writes nothing', () => {
    const { fs: faulty, rules } = createFaultyFs(port)
    const rule = rules.failNext('writeSync', { code: 'ENOSPC' })
    const fd = faulty.openSync(file, 'r+')
    const error = catchError(() => faulty.writeSync(fd, Buffer.from('zz'), 0, 2, 0))
    expect(error).toBeInstanceOf(Error)
    expect(error.code).toBe('ENOSPC')
    expect(error.errno).toBe(-(constants.errno.ENOSPC as number))
    expect(error.syscall).toBe('write')
    expect(error.message).toBe('ENOSPC: no space left on device, write')
    expect(isInjectedFault(error)).toBe(true)
    expect(rule.hits).toBe(1)
    expect(rule.active).toBe(false)
    // Only the next call failed.
    expect(faulty.writeSync(fd, Buffer.from('zz'), 0, 2, 0)).toBe(2)
    faulty.closeSync(fd)
    expect(fs.readFileSync(file, 'utf8')).toBe('zzAAAAAAAAAAAAAA')
    expect(rules.calls('writeSync')).toBe(2)
  })

  it('names the paths involved, like node does', () => {
    const { fs: faulty, rules } = createFaultyFs(port)
    rules.failNext('openSync', { code: 'EACCES' })
    rules.failNext('renameSync', { code: 'EXDEV' })
    const open = catchError(() => faulty.openSync(file, 'r'))
    expect(open.path).toBe(file)
    expect(open.message).toBe(`EACCES: permission denied, open '${file}'`)
    const rename = catchError(() => faulty.renameSync(file, `${file}.2`))
    expect(rename.message).toContain(`rename '${file}' -> '${file}.2'`)
    expect(rename.dest).toBe(`${file}.2`)
    expect(fs.existsSync(file)).toBe(true)
  })

  it('fails `times` matching calls, leaving others alone', () => {
    const { fs: faulty, rules } = createFaultyFs(port)
    const other = join(dir, 'other')
    fs.writeFileSync(other, '')
    rules.failNext('openSync', { code: 'EMFILE', times: 2, match: ([path]) => path === file })
    faulty.closeSync(faulty.openSync(other, 'r'))
    expect(() => faulty.openSync(file, 'r')).toThrow(expect.objectContaining({ code: 'EMFILE' }))
    faulty.closeSync(faulty.openSync(other, 'r'))
    expect(() => faulty.openSync(file, 'r')).toThrow(expect.objectContaining({ code: 'EMFILE' }))
    faulty.closeSync(faulty.openSync(file, 'r'))
  })

  it('fails every call until clear(), then behaves normally', () => {
    const { fs: faulty, rules } = createFaultyFs(port)
    rules.failAlways('readFileSync', { code: 'EIO' })
    for (let i = 0; i < 3; i++) expect(() => faulty.readFileSync(file)).toThrow(/^EIO: i\/o error, read/)
    rules.clear()
    expect(faulty.readFileSync(file).toString()).toBe('AAAAAAAAAAAAAAAA')
  })

  it("fails any method with '*', and a removed rule stops applying", () => {
    const { fs: faulty, rules } = createFaultyFs(port)
    const rule = rules.failAlways('*', { code: 'EROFS' })
    expect(() => faulty.openSync(file, 'r')).toThrow(expect.objectContaining({ code: 'EROFS', syscall: 'open' }))
    expect(() => faulty.readFileSync(file)).toThrow(expect.objectContaining({ code: 'EROFS' }))
    rule.remove()
    expect(rule.active).toBe(false)
    expect(faulty.readFileSync(file)).toHaveLength(16)
  })

  it('rejects from promise-returning methods instead of throwing', async () => {
    const { fs: faulty, rules } = createFaultyFs(port)
    rules.failNext('fdatasync', { code: 'EIO' })
    const fd = faulty.openSync(file, 'r+')
    let result: Promise<void> | undefined
    expect(() => {
      result = faulty.fdatasync(fd)
    }).not.toThrow()
    await expect(result).rejects.toMatchObject({ code: 'EIO', syscall: 'fdatasync', errno: -(constants.errno.EIO as number) })
    await expect(faulty.fdatasync(fd)).resolves.toBeUndefined()
    faulty.closeSync(fd)
  })

  it('calls back with the error for callback-style methods', async () => {
    const { fs: faulty, rules } = createFaultyFs(fs)
    rules.failNext('fsync', { code: 'EIO' })
    const fd = faulty.openSync(file, 'r+')
    const error = await new Promise<NodeJS.ErrnoException | null>((resolve) => faulty.fsync(fd, resolve))
    expect(error).toMatchObject({ code: 'EIO', syscall: 'fsync' })
    expect(await new Promise((resolve) => faulty.fsync(fd, resolve))).toBeNull()
    faulty.closeSync(fd)
    // node:fs's non-function members pass through too.
    expect(faulty.constants.O_RDONLY).toBe(fs.constants.O_RDONLY)
  })

  it("with when: 'after', performs the operation and still reports the error", () => {
    const { fs: faulty, rules } = createFaultyFs(port)
    rules.failNext('renameSync', { code: 'EIO', when: 'after' })
    expect(() => faulty.renameSync(file, `${file}.moved`)).toThrow(/EIO/)
    expect(fs.existsSync(file)).toBe(false)
    expect(fs.readFileSync(`${file}.moved`, 'utf8')).toBe('AAAAAAAAAAAAAAAA')
  })

  it('tears a writeSync: the first half lands at the position, then the error', () => {
    const { fs: faulty, rules } = createFaultyFs(port)
    rules.tornWrite({ code: 'ENOSPC' })
    const fd = faulty.openSync(file, 'r+')
    const data = Buffer.from('..0123456789..')
    const error = catchError(() => faulty.writeSync(fd, data, 2, 10, 3))
    expect(error).toMatchObject({ code: 'ENOSPC', syscall: 'write' })
    faulty.closeSync(fd)
    expect(fs.readFileSync(file, 'utf8')).toBe('AAA01234AAAAAAAA')
  })

  it('tears a writevSync across buffers at an exact byte count', () => {
    const { fs: faulty, rules } = createFaultyFs(port)
    const rule = rules.tornWrite({ bytes: 6, code: 'EIO' })
    const fd = faulty.openSync(file, 'r+')
    expect(() => faulty.writevSync(fd, [Buffer.from('abcd'), Buffer.from('efgh')], 16)).toThrow(/^EIO/)
    expect(rule.hits).toBe(1)
    // The next writev is whole again.
    expect(faulty.writevSync(fd, [Buffer.from('XY'), Buffer.from('Z')], 0)).toBe(3)
    faulty.closeSync(fd)
    expect(fs.readFileSync(file, 'utf8')).toBe('XYZAAAAAAAAAAAAAabcdef')
  })

  it('tears a promise-returning write and rejects', async () => {
    const { fs: faulty, rules } = createFaultyFs(port)
    rules.tornWrite({ bytes: (total) => total - 1 })
    const fd = faulty.openSync(file, 'r+')
    await expect(faulty.write(fd, Buffer.from('wxyz'), 0, 4, 8)).rejects.toMatchObject({ code: 'EIO', syscall: 'write' })
    faulty.closeSync(fd)
    expect(fs.readFileSync(file, 'utf8')).toBe('AAAAAAAAwxyAAAAA')
  })

  it("tears node's callback-style fs.write", async () => {
    const { fs: faulty, rules } = createFaultyFs(fs)
    rules.tornWrite({ bytes: 'half', code: 'EDQUOT', match: ([, data]) => Buffer.isBuffer(data) })
    const fd = faulty.openSync(file, 'r+')
    const error = await new Promise((resolve) => faulty.write(fd, Buffer.from('12345678'), 0, 8, 0, resolve))
    expect(error).toMatchObject({ code: 'EDQUOT', syscall: 'write' })
    faulty.closeSync(fd)
    expect(fs.readFileSync(file, 'utf8')).toBe('1234AAAAAAAAAAAA')
  })

  it('refuses error codes the OS does not have', () => {
    const { rules } = createFaultyFs(port)
    expect(() => rules.failNext('writeSync', { code: 'ENOTACODE' })).toThrow(TypeError)
  })

  it('counts calls and can reset the counts', () => {
    const { fs: faulty, rules } = createFaultyFs(port)
    rules.failAlways('readFileSync', { code: 'EIO' })
    for (let i = 0; i < 4; i++) expect(() => faulty.readFileSync(file)).toThrow()
    expect(rules.calls('readFileSync')).toBe(4)
    rules.resetCalls()
    expect(rules.calls('readFileSync')).toBe(0)
    expect(rules.callCounts()).toEqual({})
  })

  it('exposes the same keys as the real object and cannot be modified', () => {
    const { fs: faulty } = createFaultyFs(port)
    expect(Object.keys(faulty).sort()).toEqual(Object.keys(port).sort())
    expect('fdatasync' in faulty).toBe(true)
    expect(() => {
      ;(faulty as { pageSize: number }).pageSize = 1
    }).toThrow(TypeError)
  })
})
