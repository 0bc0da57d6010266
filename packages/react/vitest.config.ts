import { defineConfig } from 'vitest/config'
import { sharedTestConfig } from '../../vitest.shared.js'

const shared = sharedTestConfig(import.meta.dirname)

export default defineConfig({
  ...shared,
  test: {
    ...shared.test,
    include: ['test/**/*.test.ts', 'test/**/*.test.tsx'],
    // A DOM over Node's globals (see the file); server-rendering tests opt out with `@vitest-environment node`.
    environment: './test/dom-environment.ts',
  },
})
