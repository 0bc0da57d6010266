import { existsSync, statSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { makeTempDirSync, tempDir, useTempDir } from '../src/index.js'

describe('tempDir', () => {
  it('creates a real directory and removes it with its contents', async () => {
    const dir = await tempDir('unit')
    expect(dir.path.startsWith(join(tmpdir(), 'sluice-unit-'))).toBe(true)
    expect(statSync(dir.path).isDirectory()).toBe(true)
    writeFileSync(join(dir.path, 'file'), 'x')
    await dir.remove()
    expect(existsSync(dir.path)).toBe(false)
    await dir.remove()
  })

  it('has a synchronous twin', () => {
    const dir = makeTempDirSync('sync')
    expect(statSync(dir.path).isDirectory()).toBe(true)
    dir.removeSync()
    expect(existsSync(dir.path)).toBe(false)
  })

  it('keeps odd prefixes inside the temp dir', async () => {
    const dir = await tempDir('../a b')
    expect(dir.path.startsWith(join(tmpdir(), 'sluice-.._a_b-'))).toBe(true)
    await dir.remove()
  })
})

const seen: { perTest?: string; perSuite?: string } = {}

describe('useTempDir', () => {
  const tmp = useTempDir('scoped')
  beforeAll(async () => {
    seen.perSuite = await tmp.make()
  })

  it('makes directories inside a test', async () => {
    seen.perTest = await tmp.make()
    writeFileSync(join(seen.perTest, 'data'), 'x')
    expect(existsSync(seen.perTest)).toBe(true)
    expect(tmp.makeSync('other')).toMatch(/sluice-other-/)
  })

  it('removes a test’s directories after it, and keeps the suite’s until the end', () => {
    expect(existsSync(seen.perTest as string)).toBe(false)
    expect(existsSync(seen.perSuite as string)).toBe(true)
  })
})

describe('after a useTempDir suite', () => {
  it('its suite-level directories are gone', () => {
    expect(seen.perSuite).toBeDefined()
    expect(existsSync(seen.perSuite as string)).toBe(false)
  })
})

afterAll(() => {
  expect(existsSync(seen.perTest as string)).toBe(false)
})
