import type { AdmissionStats } from './admission.js'
import type { BodyPathName } from './body-path.js'
import type { RangeCacheStats } from './range-cache.js'

/**
 * The figures the HTTP layer reports, given to `buildApp` as an object (the
 * server passes its `ServerMetrics`); without one nothing is counted.
 */
export interface HttpMetrics {
  /** Bytes of a shape response body sent (HEAD and 304 send none), and which path sent them. */
  addBytesServed(bytes: number, path: BodyPathName): void
  /** Live requests (long-polls and SSE streams) waiting for new data right now. */
  setLiveWaiters(count: number): void
  /** A range of a shape log read to answer requests (one read may serve many live requests). */
  addLogRead(): void
  /** Reports the range cache's figures (read when metrics are collected); called once per app. */
  watchRangeCache?(stats: () => RangeCacheStats): void
  /** Reports admission control's figures (requests in flight, queued, refused; read when metrics are collected); called once per app. */
  watchAdmission?(stats: () => AdmissionStats): void
}
