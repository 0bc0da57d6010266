// GET /metrics: the Prometheus text exposition of the server's own registry.
// An encapsulated plugin; `server.ts` registers it next to the shape API.
import type { FastifyInstance, FastifyPluginAsync } from 'fastify'
import type { ServerMetrics } from '../metrics.js'

export interface MetricsRouteOptions {
  readonly metrics: ServerMetrics
}

export const metricsRoute: FastifyPluginAsync<MetricsRouteOptions> = async (app: FastifyInstance, options) => {
  app.get('/metrics', async (_request, reply) => {
    const body = await options.metrics.metrics()
    return reply.header('content-type', options.metrics.contentType).header('cache-control', 'no-store').send(body)
  })
}
