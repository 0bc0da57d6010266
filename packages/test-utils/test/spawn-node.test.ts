import { fileURLToPath } from 'node:url'
import { describe, expect, it } from 'vitest'
import { spawnNode } from '../src/index.js'

const fixture = fileURLToPath(new URL('./fixtures/echo-lines.ts', import.meta.url))

describe('spawnNode', () => {
  it('runs a TypeScript file that imports workspace packages from source', async () => {
    const child = spawnNode(fixture, ['serve'], { env: { FIXTURE_GREETING: 'hi there' } })
    try {
      const resolved = await child.waitForLine(/^resolved /)
      expect(resolved).toMatch(/\/packages\/test-utils\/src\/index\.ts$/)
      expect(await child.waitForLine('createFaultyFs is a')).toBe('createFaultyFs is a function')
      expect(await child.waitForLine(/^env /)).toBe('env hi there')
      await child.waitForLine('ready')
      child.send('hello')
      expect(await child.waitForLine((line) => line.startsWith('got:'))).toBe('got: hello')
    } finally {
      await child.kill()
    }
  })

  it('SIGKILLs the child and reports the signal', async () => {
    const child = spawnNode(fixture)
    await child.waitForLine('tick 3')
    const status = await child.kill('SIGKILL')
    expect(status).toEqual({ code: null, signal: 'SIGKILL' })
    expect(child.exitStatus).toEqual(status)
    expect(await child.exited).toBe(status)
    // Killing again is harmless.
    expect(await child.kill()).toBe(status)
  })

  it('waits for lines in order and iterates every stdout line', async () => {
    const child = spawnNode(fixture, ['serve'])
    await child.waitForLine('tick 1')
    const next = await child.waitForLine(/^tick \d+$/)
    expect(next).toBe('tick 2')
    child.send('quit')
    const all: string[] = []
    for await (const line of child) all.push(line)
    expect(all[0]).toMatch(/^resolved /)
    expect(all).toContain('got: quit')
    expect(all).toEqual(child.lines)
    expect(await child.exited).toEqual({ code: 0, signal: null })
  })

  it('reports the exit code, and waitForLine rejects once the process is gone', async () => {
    const child = spawnNode(fixture, ['exit', '3'])
    expect(await child.exited).toEqual({ code: 3, signal: null })
    expect(child.lines).toContain('bye')
    await expect(child.waitForLine('never printed')).rejects.toThrow(/exited before a matching line/)
  })

  it('times out waiting for a line that never comes', async () => {
    const child = spawnNode(fixture)
    try {
      await expect(child.waitForLine('never printed', { timeoutMs: 300 })).rejects.toThrow(/within 300 ms/)
    } finally {
      await child.kill()
    }
  })
})
