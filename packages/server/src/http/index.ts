// The HTTP layer's public API (docs/protocol.md): the app, its settings, and the pieces its tests and embedders use.
export { type BuildAppOptions, buildApp, normalizeUrl, sendError } from './app.js'
export { DEFAULT_HTTP_OPTIONS, ELECTRIC_SERVER_VALUE, type HttpOptions } from './options.js'
export type { HttpMetrics } from './http-metrics.js'
export { Admission, type RequestKind } from './admission.js'
export { type LogBody, POOLED_BUFFER_BYTES, logBody } from './log-body.js'
export { columnSchema, schemaHeader, shapeSchema } from './schema-header.js'
export { missingTableMessage, toSluiceError } from './http-errors.js'
export type { ShapeWaiters } from './shape-routes.js'
