import { INVALID_OFFSET_MESSAGE } from './offset.js'

/**
 * The vocabulary of `/v1/shape`'s query (docs/protocol.md §2): parameter names, the
 * values of the enumerated ones, and the error texts clients see, in Electric's
 * wording. The parser (params.ts) and its casts and subset handling share them.
 */

export const QueryParam = {
  table: 'table',
  offset: 'offset',
  handle: 'handle',
  live: 'live',
  liveSse: 'live_sse',
  experimentalLiveSse: 'experimental_live_sse',
  cursor: 'cursor',
  where: 'where',
  params: 'params',
  columns: 'columns',
  queryableColumns: 'queryable_columns',
  replica: 'replica',
  log: 'log',
  secret: 'secret',
  apiSecret: 'api_secret',
  cacheBuster: 'cache-buster',
  expiredHandle: 'expired_handle',
  subsetWhere: 'subset__where',
  subsetParams: 'subset__params',
  subsetLimit: 'subset__limit',
  subsetOffset: 'subset__offset',
  subsetOrderBy: 'subset__order_by',
  subsetWhereExpr: 'subset__where_expr',
  subsetOrderByExpr: 'subset__order_by_expr',
} as const

/** Any query key with this prefix turns a request into a subset snapshot (§6). */
export const SUBSET_PREFIX = 'subset__'

export const REPLICA_MODES = ['default', 'full'] as const
export type ReplicaMode = (typeof REPLICA_MODES)[number]

export const LOG_MODES = ['full', 'changes_only'] as const
export type LogMode = (typeof LOG_MODES)[number]

/** Error texts that reach clients; Electric's wording. */
export const ParamMessage = {
  blank: "can't be blank",
  invalid: 'is invalid',
  invalidOffset: INVALID_OFFSET_MESSAGE,
  handleRequired: "can't be blank when offset != -1",
  handleOrShapeRequired: "can't be blank when shape definition is missing",
  liveWithBeforeAll: "can't be true when offset == -1",
  liveWithNow: "can't be true when offset is 'now'",
  liveSseWithoutLive: "can't be true unless live is also true",
  paramKeysNotNumbers: 'Parameters can only use numbers as keys',
  paramKeysNotSequential: 'Parameters must be numbered sequentially, starting from 1',
  zeroLengthColumn: 'Invalid zero-length identifier',
  limitNotPositive: 'must be greater than 0',
  offsetNegative: 'must be greater than or equal to 0',
  orderByRequired: 'order_by is required when limit or offset is present',
  subsetParamsNotJson: 'params must be valid JSON',
  subsetParamsNotObject: 'params must be a JSON object',
  notInBody: "can't be set in a request body: the shape and the request's position come from the URL; a body carries subset parameters only",
  inUrlAndBody: 'is given both in the URL and in the request body',
  twiceInBody: 'is given twice in the request body',
} as const
