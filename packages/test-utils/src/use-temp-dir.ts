import { afterAll, afterEach, beforeEach } from 'vitest'
import { makeTempDirSync, tempDir, type TempDir } from './temp-dir.js'

/** Makes temp dirs whose lifetime follows the vitest scope they were made in. */
export interface TempDirFactory {
  /** A fresh directory; removed after the current test, or after the suite when made outside a test. */
  make(prefix?: string): Promise<string>
  makeSync(prefix?: string): string
}

/**
 * Registers vitest hooks that remove every directory made through the returned
 * factory: dirs made inside a test (or its beforeEach) go in afterEach, dirs
 * made in beforeAll go in afterAll. Removal happens whether the test passed or not.
 */
export function useTempDir(prefix = 'test'): TempDirFactory {
  const perTest: TempDir[] = []
  const perSuite: TempDir[] = []
  let inTest = false

  const removeAll = async (dirs: TempDir[]): Promise<void> => {
    const batch = dirs.splice(0)
    await Promise.all(batch.map((dir) => dir.remove()))
  }
  const keep = (dir: TempDir): string => {
    ;(inTest ? perTest : perSuite).push(dir)
    return dir.path
  }

  beforeEach(() => {
    inTest = true
  })
  afterEach(async () => {
    inTest = false
    await removeAll(perTest)
  })
  afterAll(async () => {
    await removeAll(perTest)
    await removeAll(perSuite)
  })

  return {
    async make(name = prefix) {
      return keep(await tempDir(name))
    },
    makeSync(name = prefix) {
      return keep(makeTempDirSync(name))
    },
  }
}
