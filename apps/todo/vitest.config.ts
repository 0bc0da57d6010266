import { defineConfig, mergeConfig } from 'vitest/config'
import { sharedTestConfig } from '../../vitest.shared.js'

export default defineConfig(
  mergeConfig(sharedTestConfig(import.meta.dirname), {
    test: {
      globalSetup: ['test/global-setup.ts'],
      // Each browser file runs Postgres, Sluice, nginx and Chromium: on two cores, one file at a time.
      fileParallelism: false,
    },
  }),
)
