/**
 * The pid-file writer lock (store-lock.ts without a kernel lock: the native
 * addon did not load): a second writer refused, a dead writer's lock taken
 * over, and never two writers, whatever order two starters go in, whatever
 * LOCK holds and whatever the filesystem allows.
 */
import { existsSync, readFileSync, readdirSync, utimesSync, writeFileSync } from 'node:fs'
import { hostname } from 'node:os'
import { useTempDir } from '@sluice/test-utils'
import { afterEach, describe, expect, it } from 'vitest'
import { acquireStoreLock } from '../src/file/store-lock.js'
import { type FileLogStore, type FsPort, nodeFs, openFileLogStore } from '../src/index.js'

const tempDirs = useTempDir()

/** LOCK as this process writes it: its pid, its host and its process token. */
const OWN_LOCK = new RegExp(`^${process.pid}\\n${hostname().replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}\\n[0-9a-f]{16}\\n$`)

describe('pid-file writer lock', () => {
  const open: FileLogStore[] = []
  afterEach(async () => {
    for (const s of open.splice(0)) await s.close().catch(() => undefined)
  })
  const openStore = async (dir: string): Promise<FileLogStore> => {
    const s = await openFileLogStore({ dir, chunkBytes: 2048, flushIntervalMs: 60_000, flushWhenIdle: false })
    open.push(s)
    return s
  }

  it('refuses a second writer and takes over the lock of a dead one', async () => {
    const dir = await tempDirs.make('lock')
    await openStore(dir)
    await expect(openFileLogStore({ dir })).rejects.toMatchObject({ code: 'store_locked' })
    const other = await tempDirs.make('lock2')
    writeFileSync(`${other}/LOCK`, '999999999')
    const s = await openStore(other)
    expect(readFileSync(`${other}/LOCK`, 'utf8')).toMatch(OWN_LOCK)
    await s.close()
    expect(existsSync(`${other}/LOCK`)).toBe(false)
  })

  it("takes over a pid-file lock naming this process's pid and host but not this process (a container restarted after a kill runs as the same pid)", async () => {
    for (const left of [`${process.pid}\n${hostname()}\n0123456789abcdef\n`, `${process.pid}\n${hostname()}\n`, `${process.pid}`]) {
      const dir = await tempDirs.make('lock-earlier')
      writeFileSync(`${dir}/LOCK`, left)
      const s = await openStore(dir)
      expect(readFileSync(`${dir}/LOCK`, 'utf8')).toMatch(OWN_LOCK)
      // This process's own lock still refuses a second writer here.
      await expect(openFileLogStore({ dir })).rejects.toMatchObject({ code: 'store_locked' })
      await s.close()
    }
  })

  it('never takes over a pid-file lock that names another host: its pid means nothing here', async () => {
    // A writer on another machine sharing the storage (no kernel lock on either): its pid is not running here.
    const dir = await tempDirs.make('lock-host')
    writeFileSync(`${dir}/LOCK`, `999999999\nwriter.internal\n`)
    await expect(openFileLogStore({ dir })).rejects.toMatchObject({
      code: 'store_locked',
      message: expect.stringMatching(/process 999999999 on host writer\.internal .*remove .*LOCK/),
    })
    expect(readFileSync(`${dir}/LOCK`, 'utf8')).toBe('999999999\nwriter.internal\n')
    // The same dead pid on this host is taken over, as is a LOCK of an older build (the pid alone).
    writeFileSync(`${dir}/LOCK`, `999999999\n${hostname()}\n`)
    const s = await openStore(dir)
    await s.close()
    writeFileSync(`${dir}/LOCK`, '999999999')
    const t = await openStore(dir)
    expect(readFileSync(`${dir}/LOCK`, 'utf8')).toMatch(OWN_LOCK)
    await t.close()
  })

  it('two starters that both find a dead writer\'s pid-file lock: one takes it over, the other is refused (never both)', async () => {
    const dir = await tempDirs.make('lock-race')
    writeFileSync(`${dir}/LOCK`, `999999999\n${hostname()}\n`)
    // Starter A runs its whole attempt in the instant starter B, which judged the same LOCK stale, takes it
    // over: B's removal (rename or unlink of LOCK) then meets A's new LOCK.
    let a: Promise<() => void> | undefined
    const interleave = (path: string): void => {
      if (a === undefined && path === `${dir}/LOCK`) a = acquireStoreLock(nodeFs, dir)
    }
    const fsB: FsPort = {
      ...nodeFs,
      renameSync: (from, to) => {
        interleave(from)
        nodeFs.renameSync(from, to)
      },
      unlinkSync: (path) => {
        interleave(path)
        nodeFs.unlinkSync(path)
      },
    }
    const b = acquireStoreLock(fsB, dir)
    expect(a).toBeDefined()
    const releaseA = await a!
    await expect(b).rejects.toMatchObject({ code: 'store_locked' })
    expect(readFileSync(`${dir}/LOCK`, 'utf8')).toMatch(OWN_LOCK)
    expect(readdirSync(dir).filter((n) => n.startsWith('LOCK'))).toEqual(['LOCK'])
    releaseA()
    expect(existsSync(`${dir}/LOCK`)).toBe(false)
  })

  it('a pid-file lock that names no process: a power cut\'s leftover, taken over; without link(2), only once it is old', async () => {
    const dir = await tempDirs.make('lock-empty')
    // Made by link(2), a LOCK is whole when it appears: an empty one lost its unsynced content.
    writeFileSync(`${dir}/LOCK`, '')
    const s = await openStore(dir)
    expect(readFileSync(`${dir}/LOCK`, 'utf8')).toMatch(OWN_LOCK)
    await s.close()
    // Made with O_EXCL, it is empty for an instant after its creation: a young one is a starter's, left alone.
    const { linkSync: _link, ...withoutLink } = nodeFs
    writeFileSync(`${dir}/LOCK`, '')
    await expect(acquireStoreLock(withoutLink, dir)).rejects.toMatchObject({ code: 'store_locked', message: expect.stringContaining('names no process') })
    expect(readFileSync(`${dir}/LOCK`, 'utf8')).toBe('')
    const old = new Date(Date.now() - 60_000)
    utimesSync(`${dir}/LOCK`, old, old)
    ;(await acquireStoreLock(withoutLink, dir))()
    // A dead writer's, taken over without link(2) too.
    writeFileSync(`${dir}/LOCK`, `999999999\n${hostname()}\n`)
    const release = await acquireStoreLock(withoutLink, dir)
    expect(readFileSync(`${dir}/LOCK`, 'utf8')).toMatch(OWN_LOCK)
    await expect(acquireStoreLock(withoutLink, dir)).rejects.toMatchObject({ code: 'store_locked' })
    release()
    expect(readdirSync(dir)).not.toContain('LOCK')
  })

  it('never takes over a pid-file lock it cannot read, and makes one with O_EXCL where the filesystem has no hard links', async () => {
    const dir = await tempDirs.make('lock-unreadable')
    const live = `${process.pid + 1_000_000}\n${hostname()}\n`
    writeFileSync(`${dir}/LOCK`, live)
    // No descriptor to spare (or another user's file): whose it is cannot be told.
    const starved: FsPort = {
      ...nodeFs,
      readFileSync: (path) => {
        if (path.endsWith('LOCK') || path.includes('LOCK.')) throw Object.assign(new Error('EMFILE: too many open files'), { code: 'EMFILE' })
        return nodeFs.readFileSync(path)
      },
    }
    await expect(acquireStoreLock(starved, dir)).rejects.toMatchObject({ code: 'store_locked', message: expect.stringContaining('EMFILE') })
    expect(readFileSync(`${dir}/LOCK`, 'utf8')).toBe(live)
    // link(2) refused (vfat, some network mounts): LOCK is made with O_EXCL instead.
    const other = await tempDirs.make('lock-nolink')
    const noLinks: FsPort = {
      ...nodeFs,
      linkSync: () => {
        throw Object.assign(new Error('EPERM: operation not permitted, link'), { code: 'EPERM' })
      },
    }
    const release = await acquireStoreLock(noLinks, other)
    expect(readFileSync(`${other}/LOCK`, 'utf8')).toMatch(OWN_LOCK)
    expect(readdirSync(other)).toEqual(['LOCK'])
    release()
  })
})
