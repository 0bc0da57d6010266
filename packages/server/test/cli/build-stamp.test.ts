// bin/build-stamp.js: when `sluice` may run a package's dist/ (built from the sources it has now) and
// when it must not (a source changed since the build), on real files.
import { mkdirSync, readFileSync, rmSync, utimesSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { useTempDir } from '@sluice/test-utils'
import { describe, expect, it } from 'vitest'
import { BUNDLE, BUNDLE_SOURCES, sourceDigest, staleBundle, staleReason, writeBundleSources, writeStamp } from '../../bin/build-stamp.js'

const dirs = useTempDir('build-stamp')


async function packageWithSources(): Promise<string> {
  const dir = await dirs.make('pkg')
  mkdirSync(join(dir, 'src', 'sub'), { recursive: true })
  mkdirSync(join(dir, 'dist'))
  writeFileSync(join(dir, 'src', 'index.ts'), 'export const a = 1\n')
  writeFileSync(join(dir, 'src', 'sub', 'b.ts'), 'export const b = 2\n')
  return dir
}

/** Sets a file's modification time `seconds` from now. */
function age(path: string, seconds: number): void {
  const at = Date.now() / 1000 + seconds
  utimesSync(path, at, at)
}

describe('build stamp', () => {
  it('a package never built (no stamp) is stale', async () => {
    const dir = await packageWithSources()
    expect(staleReason(dir)).toMatch(/missing or was not built/)
  })

  it('fresh right after the build; a source touched later with the same bytes (a checkout, a cache restore) stays fresh', async () => {
    const dir = await packageWithSources()
    writeStamp(dir)
    expect(staleReason(dir)).toBeUndefined()
    age(join(dir, 'dist', '.source-digest'), -60)
    age(join(dir, 'src', 'sub', 'b.ts'), 0)
    expect(staleReason(dir)).toBeUndefined()
  })

  it('a source edited, added or removed after the build makes it stale; test files do not count', async () => {
    const dir = await packageWithSources()
    writeStamp(dir)
    age(join(dir, 'dist', '.source-digest'), -60)
    writeFileSync(join(dir, 'src', 'sub', 'b.ts'), 'export const b = 3\n')
    expect(staleReason(dir)).toMatch(/src changed after the last build/)

    writeStamp(dir)
    age(join(dir, 'dist', '.source-digest'), -60)
    writeFileSync(join(dir, 'src', 'c.ts'), 'export const c = 4\n')
    expect(staleReason(dir)).toMatch(/src changed after the last build/)

    writeStamp(dir)
    const before = sourceDigest(dir)
    age(join(dir, 'dist', '.source-digest'), -60)
    writeFileSync(join(dir, 'src', 'c.test.ts'), 'it("x", () => {})\n')
    expect(staleReason(dir)).toBeUndefined()
    expect(sourceDigest(dir)).toBe(before)
  })

  it('the digest covers paths as well as bytes: a file moved to another folder changes it', async () => {
    const dir = await packageWithSources()
    const before = sourceDigest(dir)
    writeFileSync(join(dir, 'src', 'b.ts'), 'export const b = 2\n')
    rmSync(join(dir, 'src', 'sub', 'b.ts'))
    expect(sourceDigest(dir)).not.toBe(before)
  })
})

describe('bundle sources', () => {
  /** A package that bundles a dependency: both built and stamped, the bundle written and its sources recorded. */
  async function bundled(): Promise<{ server: string; dep: string; packages: Map<string, string> }> {
    const server = await packageWithSources()
    const dep = await packageWithSources()
    writeStamp(server)
    writeStamp(dep)
    writeFileSync(join(server, BUNDLE), 'export {}\n')
    const packages = new Map([
      ['@x/server', server],
      ['@x/dep', dep],
    ])
    writeBundleSources(server, packages)
    return { server, dep, packages }
  }

  it('current while every bundled package has the build it was bundled from', async () => {
    const { server, packages } = await bundled()
    expect(staleBundle(server, packages)).toBeUndefined()
    expect(Object.keys(JSON.parse(readFileSync(join(server, BUNDLE_SOURCES), 'utf8')) as object)).toEqual(['@x/dep', '@x/server'])
  })

  it('stale when a bundled package is built again from other sources, whatever the file times', async () => {
    const { server, dep, packages } = await bundled()
    writeFileSync(join(dep, 'src', 'index.ts'), 'export const a = 2\n')
    writeStamp(dep)
    age(join(server, BUNDLE), 60)
    expect(staleBundle(server, packages)).toMatch(/@x\/dep was built again after the bundle/)
  })

  it('stale without the bundle, without its record, with a garbled or empty record, or with a bundled package not installed', async () => {
    const { server, packages } = await bundled()
    expect(staleBundle(server, new Map([['@x/server', server]]))).toMatch(/@x\/dep is in the bundle but not installed/)
    writeFileSync(join(server, BUNDLE_SOURCES), '{"@x/server": ')
    expect(staleBundle(server, packages)).toMatch(/missing or unreadable/)
    writeFileSync(join(server, BUNDLE_SOURCES), '{}')
    expect(staleBundle(server, packages)).toMatch(/lists no package/)
    rmSync(join(server, BUNDLE_SOURCES))
    expect(staleBundle(server, packages)).toMatch(/missing or unreadable/)
    rmSync(join(server, BUNDLE))
    expect(staleBundle(server, packages)).toMatch(/sluice\.mjs is missing/)
  })

  it('refuses to record a package that was never built', async () => {
    const server = await packageWithSources()
    writeStamp(server)
    const dep = await packageWithSources()
    expect(() => writeBundleSources(server, new Map([['@x/server', server], ['@x/dep', dep]]))).toThrow(/@x\/dep .* has no build stamp/)
  })
})
