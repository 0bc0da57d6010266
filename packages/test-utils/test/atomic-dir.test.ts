import { existsSync, readdirSync, readFileSync } from 'node:fs'
import { writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { describe, expect, it } from 'vitest'
import { ensureDirAtomically } from '../src/atomic-dir.js'
import { useTempDir } from '../src/index.js'

describe('ensureDirAtomically (how the template cluster is shared between racing workers)', () => {
  const tmp = useTempDir('atomic')

  it('lets exactly one of many racing builders publish, and leaves no scraps', async () => {
    const parent = await tmp.make()
    const finalDir = join(parent, 'template')
    let builds = 0
    const build = async (dir: string): Promise<void> => {
      const id = ++builds
      await sleep(20 + Math.random() * 30)
      await writeFile(join(dir, 'payload'), `build ${id}`)
      await writeFile(join(dir, 'ready'), '')
    }
    const isComplete = (dir: string): boolean => existsSync(join(dir, 'ready'))
    const results = await Promise.all(Array.from({ length: 8 }, () => ensureDirAtomically(finalDir, isComplete, build)))
    expect(new Set(results)).toEqual(new Set([finalDir]))
    expect(readFileSync(join(finalDir, 'payload'), 'utf8')).toMatch(/^build \d$/)
    expect(readdirSync(parent)).toEqual(['template'])
    // Once published it is reused, never rebuilt.
    const before = builds
    await ensureDirAtomically(finalDir, isComplete, build)
    expect(builds).toBe(before)
  })

  it('rebuilds a published directory that was damaged', async () => {
    const parent = await tmp.make()
    const finalDir = join(parent, 'template')
    const isComplete = (dir: string): boolean => existsSync(join(dir, 'ready'))
    const build = (dir: string): Promise<void> => writeFile(join(dir, 'ready'), '')
    await ensureDirAtomically(finalDir, isComplete, build)
    const { rmSync } = await import('node:fs')
    rmSync(join(finalDir, 'ready'))
    await ensureDirAtomically(finalDir, isComplete, build)
    expect(isComplete(finalDir)).toBe(true)
    expect(readdirSync(parent)).toEqual(['template'])
  })

  it('discards a failed build', async () => {
    const parent = await tmp.make()
    const finalDir = join(parent, 'template')
    await expect(
      ensureDirAtomically(finalDir, () => false, () => Promise.reject(new Error('initdb failed'))),
    ).rejects.toThrow('initdb failed')
    expect(readdirSync(parent)).toEqual([])
  })
})
