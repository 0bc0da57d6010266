// The server's public API. Each stage of the data flow lives in its own folder
// (replication/, where/, shapes/, http/); this file re-exports what embedders use.
export { SERVER_ERRORS, ServerError, httpStatusOf, isServerErrorCode } from './errors.js'
export type { ServerErrorCode, ServerErrorSpec } from './errors.js'
export * from './replication/index.js'
export * from './where/index.js'
export * from './shapes/index.js'
export * from './pipeline.js'
export * from './http/index.js'
export { createServer } from './server.js'
export * from './config.js'
export { onShutdownSignals, REPEAT_WINDOW_MS, type ShutdownSignalHandlers } from './shutdown-signals.js'
export { configureYoungGc, type YoungGcSetting } from './young-gc.js'
