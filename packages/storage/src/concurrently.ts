/**
 * Calls `fn` for each item, in order, with at most `limit` calls in flight.
 * The first failure rejects the whole run and stops workers from taking more
 * items (calls already in flight run to their end): a checkpoint or flush
 * that failed for one log has failed, and syncing the rest would only delay
 * the retry.
 */
export async function forEachConcurrently<T>(items: readonly T[], limit: number, fn: (item: T) => Promise<void>): Promise<void> {
  let next = 0
  let failed = false
  const worker = async (): Promise<void> => {
    while (next < items.length && !failed) {
      try {
        await fn(items[next++]!)
      } catch (err) {
        failed = true
        throw err
      }
    }
  }
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker))
}
