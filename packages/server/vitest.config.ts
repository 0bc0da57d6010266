import { defineConfig } from 'vitest/config'
import { sharedTestConfig } from '../../vitest.shared.js'

const shared = sharedTestConfig(import.meta.dirname)

// Three test files at a time here, one more than the shared setting: this package's files spend most of their
// time waiting on Postgres, child processes and timers (about 70% of two cores busy with three), and it is the
// longest package of the suite (10 min with two, under 8 with three).
export default defineConfig({ ...shared, test: { ...shared.test, maxWorkers: Math.max(3, Number(shared.test?.maxWorkers ?? 0)) } })
