/**
 * The one thing the slot and publication managers need from a connection: a
 * query. `pg.Client`, `pg.Pool` and the test cluster all fit, so callers pick
 * their own pooling and the managers own no connection.
 */
export interface Queryable {
  // Rows come back from the driver untyped; each query names its columns with `AS` and casts to text.
  query(text: string, values?: unknown[]): Promise<{ rows: Array<Record<string, unknown>> }>
}
