/**
 * The power-cut model the crash and standby tests write through
 * (fixtures/volatile-fs.ts): unsynced writes are this process's alone, and
 * they go with a removed file, even when the filesystem hands the removed
 * file's inode number to a directory made next (ext4 does so at once).
 */
import { statSync } from 'node:fs'
import { useTempDir } from '@sluice/test-utils'
import { describe, expect, it } from 'vitest'
import { nodeFs } from '../src/index.js'
import { volatileFs } from './fixtures/volatile-fs.js'

const temp = useTempDir('volatile-fs')

describe('volatile filesystem model', () => {
  it('keeps writes from the file until it is synced', async () => {
    const dir = await temp.make()
    const fs = volatileFs()
    const fd = fs.openSync(`${dir}/f`, 'w')
    fs.writeSync(fd, Buffer.from('hello'), 0, 5, 0)
    expect(statSync(`${dir}/f`).size).toBe(0)
    expect(fs.fstatSync(fd).size).toBe(5)
    await fs.fdatasync(fd)
    expect(statSync(`${dir}/f`).size).toBe(5)
    fs.closeSync(fd)
  })

  it('drops the unsynced writes of a removed file when its inode number comes back as a directory', async () => {
    const dir = await temp.make()
    const fs = volatileFs()
    // Repeated: the filesystem decides whether the number comes back (ext4 gives it to the next new
    // inode); the model must not care either way.
    for (let i = 0; i < 20; i++) {
      const file = `${dir}/file-${i}`
      const fd = fs.openSync(file, 'w')
      fs.writeSync(fd, Buffer.alloc(100, 1), 0, 100, 0)
      fs.closeSync(fd)
      fs.unlinkSync(file)
      const sub = `${dir}/dir-${i}`
      fs.mkdirSync(sub, { recursive: true })
      // What the store does after a rename into a directory: open it and sync it.
      const dfd = fs.openSync(sub, 'r')
      await fs.fsync(dfd)
      expect(fs.fstatSync(dfd).size).toBe(nodeFs.fstatSync(dfd).size)
      fs.closeSync(dfd)
    }
  })
})
