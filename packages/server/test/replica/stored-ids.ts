import { readdirSync } from 'node:fs'
import { isBucketName } from '@sluice/storage'

/** The ids of the logs a store directory (`<storage>/logs`) holds, read off its buckets. */
export function storedIds(store: string): string[] {
  const ids: string[] = []
  for (const name of readdirSync(`${store}/shapes`)) {
    if (isBucketName(name)) ids.push(...readdirSync(`${store}/shapes/${name}`))
    else ids.push(name)
  }
  return ids
}
