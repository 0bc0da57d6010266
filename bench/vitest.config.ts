import { defineConfig } from 'vitest/config'
import { sharedTestConfig } from '../vitest.shared.js'

const shared = sharedTestConfig(import.meta.dirname)

// The benches keep their tests beside the code they check (storage/peers.test.ts, http/http-bench.pg.test.ts, live/live-bench.pg.test.ts, fanout/fanout-bench.pg.test.ts, client/client-bench.pg.test.ts, large/large-bench.pg.test.ts, chunks/chunks-bench.pg.test.ts, cdn/cdn-bench.pg.test.ts, overlap/overlap-bench.pg.test.ts, lifecycle/lifecycle-bench.pg.test.ts, subquery/subquery-bench.pg.test.ts, compaction/compaction-bench.pg.test.ts, report/build.test.ts).
export default defineConfig({ ...shared, test: { ...shared.test, include: ['storage/**/*.test.ts', 'http/**/*.test.ts', 'live/**/*.test.ts', 'fanout/**/*.test.ts', 'client/**/*.test.ts', 'large/**/*.test.ts', 'chunks/**/*.test.ts', 'cdn/**/*.test.ts', 'overlap/**/*.test.ts', 'lifecycle/**/*.test.ts', 'subquery/**/*.test.ts', 'compaction/**/*.test.ts', 'report/**/*.test.ts'] } })
