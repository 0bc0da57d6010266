// `Pipeline` is not (yet) exported from @sluice/server's public entry point
// (packages/server/src/index.ts re-exports replication/, where/ and shapes/
// only), so the benchmark reaches it by path, here and nowhere else. Once the
// package exports it, this becomes `export { Pipeline } from '@sluice/server'`.
export { Pipeline, type PipelineOptions } from '../../packages/server/src/pipeline.js'
