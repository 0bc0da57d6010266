/**
 * The store's writer lock (store-lock.ts): with a kernel lock (flock through
 * the native addon) a writer's exit, however it happens, lets the next one in
 * at once, whatever LOCK says; a standby waits for it; a second writer is
 * refused after its wait. The pid-file fallback is covered in pid-lock.test.ts.
 */
import { existsSync, readFileSync, writeFileSync } from 'node:fs'
import { hostname } from 'node:os'
import { join } from 'node:path'
import { loadSendfile } from '@sluice/sendfile'
import { spawnNode, useTempDir } from '@sluice/test-utils'
import { describe, expect, it } from 'vitest'
import { openFileLogStore } from '../src/index.js'

const tempDirs = useTempDir()
const HOLDER = join(import.meta.dirname, 'fixtures/lock-holder.ts')

function kernelLock(): (fd: number) => boolean {
  const loaded = loadSendfile()
  if (!loaded.available) throw new Error(`the native addon is needed for these tests: ${loaded.reason}`)
  const lockFile = loaded.sendfile.lockFile
  if (lockFile === undefined) throw new Error('the native addon was built before lockFile: rebuild it (pnpm --filter @sluice/sendfile run build:addon)')
  return lockFile
}

describe('writer lock (flock)', () => {
  it('refuses a second writer in the same process at once, waiting or not', async () => {
    const dir = await tempDirs.make('lock-same')
    const lockFile = kernelLock()
    const s = await openFileLogStore({ dir, lock: { lockFile } })
    await expect(openFileLogStore({ dir, lock: { lockFile, waitMs: 60_000 } })).rejects.toMatchObject({
      code: 'store_locked',
      message: expect.stringContaining('this process'),
    })
    await s.close()
    // The file stays (a waiter may hold it open); the next writer locks the same file.
    expect(existsSync(join(dir, 'LOCK'))).toBe(true)
    const again = await openFileLogStore({ dir, lock: { lockFile } })
    expect(readFileSync(join(dir, 'LOCK'), 'utf8').split('\n').slice(0, 2)).toEqual([String(process.pid), hostname()])
    await again.close()
  })

  it('opens a store whose LOCK names a live process that holds no lock (a pid file would refuse)', async () => {
    const dir = await tempDirs.make('lock-stale')
    // Left by a writer killed before it could remove it, its pid now some other live process's.
    writeFileSync(join(dir, 'LOCK'), String(process.ppid))
    await expect(openFileLogStore({ dir })).rejects.toMatchObject({ code: 'store_locked' })
    const s = await openFileLogStore({ dir, lock: { lockFile: kernelLock() } })
    expect(readFileSync(join(dir, 'LOCK'), 'utf8').split('\n').slice(0, 2)).toEqual([String(process.pid), hostname()])
    await s.close()
  })

  it('refuses a second writer after its wait, names the holder, and lets a standby in when the holder is killed', async () => {
    const dir = await tempDirs.make('lock-standby')
    const lockFile = kernelLock()
    const holder = spawnNode(HOLDER, [dir])
    await holder.waitForLine('locked', { timeoutMs: 60_000 })
    await expect(openFileLogStore({ dir, lock: { lockFile, waitMs: 300 } })).rejects.toMatchObject({
      code: 'store_locked',
      message: expect.stringContaining(`process ${holder.pid}`),
    })
    const waits: string[] = []
    let opened = false
    const standby = openFileLogStore({ dir, lock: { lockFile, waitMs: Number.POSITIVE_INFINITY, onWait: (h) => waits.push(h) } }).then((s) => {
      opened = true
      return s
    })
    // Still waiting while the holder lives.
    await new Promise((resolve) => setTimeout(resolve, 500))
    expect(opened).toBe(false)
    expect(waits).toEqual([`process ${holder.pid}`])
    await holder.kill('SIGKILL')
    const s = await standby
    expect(readFileSync(join(dir, 'LOCK'), 'utf8').split('\n').slice(0, 2)).toEqual([String(process.pid), hostname()])
    await s.close()
  })

  it('takes over from a writer killed mid-run on every one of many restarts', async () => {
    const dir = await tempDirs.make('lock-restarts')
    const rounds = process.env.SOAK === '1' ? 100 : 10
    for (let i = 0; i < rounds; i++) {
      // Each child takes the lock its killed predecessor held, waiting for it to finish exiting if need be.
      const child = spawnNode(HOLDER, [dir, '10000'])
      await child.waitForLine('locked', { timeoutMs: 60_000 })
      child.child.kill('SIGKILL')
    }
    const s = await openFileLogStore({ dir, lock: { lockFile: kernelLock(), waitMs: 10_000 } })
    await s.close()
  })
})
