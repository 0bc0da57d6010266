import { useTempDir, usePostgres } from '@sluice/test-utils'
import { describe, expect, it } from 'vitest'
import { startPipeline, usePipelines } from './harness.js'

/**
 * A start that cannot finish: replication is refused for as long as another
 * process streams from the slot, and the client retries for ever. A stop
 * signal during that wait (the server's `signal`) must end the start.
 */

const cluster = usePostgres()
const dirs = useTempDir('pipeline-start-abort')
const { start } = usePipelines(cluster, dirs)

describe('a start waiting for its replication slot', () => {
  it('ends with start_stopped when its signal aborts, instead of retrying for ever', async () => {
    // The slot is in use by another pipeline (another server on the same slot).
    await start()
    const dir = await dirs.make('second')
    const controller = new AbortController()
    let settled = false
    const second = startPipeline(cluster, dir, { signal: controller.signal }).finally(() => (settled = true))
    second.catch(() => {})
    await new Promise((resolve) => setTimeout(resolve, 1_500))
    expect(settled).toBe(false)
    const aborted = performance.now()
    controller.abort()
    await expect(second).rejects.toMatchObject({ code: 'start_stopped' })
    expect(performance.now() - aborted).toBeLessThan(10_000)
  })
})
