// Where clauses: parse (libpg_query), type-check, fold and compile a shape's
// WHERE into a pure evaluator over rows of Postgres text values, plus what the
// shape router needs to index it. See README.md, "Where clauses".
export {
  compileWhere,
  compileWhereSync,
  type CompileWhereOptions,
  type WhereClause,
  type WhereColumn,
  type WhereResult,
  type WhereVerdict,
} from './where-clause.js'
export { loadWhereParser } from './parse-clause.js'
export { type ClauseText, ROUTE_SUMMARY_VERSION, RestoredClause, type RouteSummary, routeSummaryOf, sameRoute } from './route-summary.js'
export type { IndexableConjunct } from './conjuncts.js'
export { interned, isCanonicalInt } from './conjuncts.js'
export { DEFAULT_WHERE_LIMITS, type WhereLimits } from './limits.js'
export {
  type EvaluationErrorCode,
  EvaluationFailure,
  WhereClauseError,
  type WhereErrorField,
  type WhereErrorReason,
} from './where-error.js'
export { SubqueryView, withViews, SUBQUERY_VIEWS, type ViewWatcher } from './subquery-view.js'
export type { SubqueryDependency, SubqueryInnerClause, SubqueryPlan, SubqueryPosition } from './subquery-clause.js'
