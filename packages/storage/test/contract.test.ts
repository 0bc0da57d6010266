import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { MemoryLogStore, openFileLogStore } from '../src/index.js'
import { describeContract } from './contract-suite.js'

describeContract('memory', async ({ chunkBytes }) => {
  const store = new MemoryLogStore({ chunkBytes })
  return { store, close: () => store.close() }
})

describeContract('file', async ({ chunkBytes }) => {
  const dir = mkdtempSync(join(tmpdir(), 'sluice-contract-'))
  const store = await openFileLogStore({ dir, chunkBytes, flushIntervalMs: 1000 })
  return {
    store,
    close: async () => {
      try {
        await store.close()
      } finally {
        rmSync(dir, { recursive: true, force: true })
      }
    },
  }
})
