// The pipeline as users get it: through @sluice/server's entry point, so that
// a worker runs the compiled package (dist/) unless BENCH_SOURCE=1 adds the
// `sluice-source` condition. (Importing src/ by path here once made every run
// load the server's TypeScript through tsx, whose transform names each closure
// at run time and costs the heap and the hot path.)
export { Pipeline, type PipelineOptions, configureYoungGc } from '@sluice/server'
