import { linkSync, mkdirSync, renameSync, statSync, truncateSync, writeFileSync } from 'node:fs'
import { createRequire } from 'node:module'
import { join } from 'node:path'
import { useTempDir } from '@sluice/test-utils'
import { SeededRandom } from '@sluice/test-utils/seeded-random'
import { describe, expect, it } from 'vitest'
import { ADDON_PATH, loadSendfile } from '../src/index.js'
import type { NativeAddon } from '../src/native.js'

// The batched stat the storage engine's open uses after a clean stop: real files, the real addon.

const temp = useTempDir('stat-files')
const COUNT = process.env['SOAK'] === '1' ? 2_000 : 200

function statFiles(): (base: string, dirs: readonly string[], names: readonly string[], out: Float64Array) => Promise<void> {
  const load = loadSendfile()
  if (!load.available) throw new Error(`the addon is not available: ${load.reason}`)
  const batch = load.sendfile.statFiles
  if (batch === undefined) throw new Error('the addon has no statFiles: rebuild it (pnpm --filter @sluice/sendfile run build:addon)')
  return batch
}

describe('statFiles', () => {
  it("gives every file's size and inode as statSync does, and size -1 for a file that is not there", async () => {
    const base = temp.makeSync()
    const random = new SeededRandom(Number(process.env['SEED'] ?? 308))
    const names = ['log.dat', 'entries.idx', 'chunks.idx']
    const dirs: string[] = []
    writeFileSync(join(base, 'shared'), 'one inode, many names')
    for (let d = 0; d < COUNT; d++) {
      const dir = `d${d}`
      dirs.push(dir)
      mkdirSync(join(base, dir))
      for (const name of names) {
        // Some files missing, some empty, some hard links (two names, one inode), the rest of random sizes.
        const roll = random.int(0, 9)
        if (roll === 0) continue
        if (roll === 1) linkSync(join(base, 'shared'), join(base, dir, name))
        else writeFileSync(join(base, dir, name), Buffer.alloc(roll === 2 ? 0 : random.int(1, 70_000), d))
      }
    }
    // Also a replaced file (a new inode at the old name) and a truncated one, as a restore from a backup leaves them.
    writeFileSync(join(base, 'replacement'), 'new')
    renameSync(join(base, 'replacement'), join(base, dirs[3]!, 'entries.idx'))
    writeFileSync(join(base, dirs[4]!, 'log.dat'), Buffer.alloc(1000))
    truncateSync(join(base, dirs[4]!, 'log.dat'), 10)
    const listed = [...dirs, 'no-such-dir']

    const out = new Float64Array(listed.length * names.length * 2)
    await statFiles()(base, listed, names, out)

    listed.forEach((dir, d) => {
      names.forEach((name, n) => {
        const at = 2 * (d * names.length + n)
        let expected: [number, number]
        try {
          const s = statSync(join(base, dir, name))
          expected = [s.size, s.ino]
        } catch (error) {
          expect((error as NodeJS.ErrnoException).code).toBe('ENOENT')
          // size -1, and ENOENT's number where the inode would be.
          expected = [-1, 2]
        }
        expect([out[at], out[at + 1]], `${dir}/${name}`).toEqual(expected)
      })
    })
  })

  it('takes the directories as an array or joined into one string (each followed by a NUL), with the same answer', async () => {
    const native = createRequire(import.meta.url)(ADDON_PATH) as NativeAddon
    expect(native.statFilesJoined).toBe(true)
    const base = temp.makeSync()
    const names = ['a', 'b']
    // Names past ASCII cross as UTF-8 either way.
    const dirs = ['plain', 'ünï-cödé', 'missing', 'x']
    for (const dir of dirs.filter((d) => d !== 'missing')) {
      mkdirSync(join(base, dir))
      writeFileSync(join(base, dir, 'a'), dir)
    }
    const viaArray = new Float64Array(dirs.length * names.length * 2)
    const viaJoined = new Float64Array(dirs.length * names.length * 2)
    native.statFiles!(base, dirs, names, viaArray)
    native.statFiles!(base, `${dirs.join('\0')}\0`, names, viaJoined)
    expect([...viaJoined]).toEqual([...viaArray])
    expect(viaArray[2 * 2]).toBe(Buffer.byteLength('ünï-cödé'))
    // A joined list must end with its NUL; its count bounds the output like an array's.
    expect(() => native.statFiles!(base, 'plain', names, viaJoined)).toThrow(/NUL/)
    expect(() => native.statFiles!(base, 'plain\0x\0', names, new Float64Array(7))).toThrow(/fewer than/)
  })

  it('rejects when the base directory cannot be opened, or the output array is too small for the answer', async () => {
    const batch = statFiles()
    const missing = join(temp.makeSync(), 'gone')
    await expect(batch(missing, ['a'], ['b'], new Float64Array(2))).rejects.toMatchObject({ errno: 2 })
    await expect(batch(temp.makeSync(), ['a', 'b'], ['c'], new Float64Array(3))).rejects.toThrow(/fewer than/)
  })
})
