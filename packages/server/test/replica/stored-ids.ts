import { readdirSync } from 'node:fs'
import { bucketPath, isBucketName, listBuckets, shapesRoot } from '@sluice/storage'

/** The ids of the logs a store directory (`<storage>/logs`) holds, read off its buckets (and flat-layout entries). */
export function storedIds(store: string): string[] {
  const ids: string[] = []
  for (const name of readdirSync(shapesRoot(store))) {
    if (!isBucketName(name)) ids.push(name)
  }
  for (const name of listBuckets({ readdirSync }, store)) ids.push(...readdirSync(bucketPath(store, name)))
  return ids
}
