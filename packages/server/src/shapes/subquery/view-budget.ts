/**
 * The bound on what subquery shapes keep in memory: the values of their views
 * (each subquery's result set, one entry per distinct tuple), summed over
 * every shape (`--max-subquery-view-entries`, docs/operations.md). A shape
 * whose views would take the sum past it is refused while it is being made
 * (503 `subquery_views_full`), and a live shape whose views grow past it is
 * invalidated (409), so memory never grows without bound.
 */
export class ViewBudget {
  private usedEntries = 0

  /** `limit` 0: no bound. */
  constructor(readonly limit: number) {}

  /** View entries held now, over every subquery shape (and views being loaded). */
  get used(): number {
    return this.usedEntries
  }

  /** Whether `more` entries fit. */
  fits(more: number): boolean {
    return this.limit === 0 || this.usedEntries + more <= this.limit
  }

  charge(delta: number): void {
    this.usedEntries += delta
  }
}
