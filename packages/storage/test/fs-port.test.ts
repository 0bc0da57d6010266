/** The filesystem port's syncfs: when it is offered, and what its failures say. */
import { release } from 'node:os'
import { useTempDir } from '@sluice/test-utils'
import { describe, expect, it } from 'vitest'
import { nodeFs, syncfsReportsErrors } from '../src/fs-port.js'

const tempDirs = useTempDir()

describe('syncfs', () => {
  it('is offered only where it reports writeback errors (Linux 5.8 on)', () => {
    expect(syncfsReportsErrors('linux', '6.18.44-fc-v782')).toBe(true)
    expect(syncfsReportsErrors('linux', '5.8.0')).toBe(true)
    expect(syncfsReportsErrors('linux', '5.15.0-91-generic')).toBe(true)
    expect(syncfsReportsErrors('linux', '5.4.0-150-generic')).toBe(false)
    expect(syncfsReportsErrors('linux', '4.19.0-26-amd64')).toBe(false)
    expect(syncfsReportsErrors('linux', 'garbage')).toBe(false)
    expect(syncfsReportsErrors('darwin', '23.1.0')).toBe(false)
    expect(nodeFs.syncFilesystem !== undefined).toBe(syncfsReportsErrors(process.platform, release()))
  })

  it.runIf(nodeFs.syncFilesystem !== undefined)('syncs a directory, and names the problem when it cannot', async () => {
    const dir = await tempDirs.make('syncfs')
    await expect(nodeFs.syncFilesystem!(dir)).resolves.toBeUndefined()
    await expect(nodeFs.syncFilesystem!(`${dir}/missing`)).rejects.toMatchObject({ code: 'EIO', message: expect.stringContaining(`${dir}/missing`) })
  })
})
