/**
 * Where a log's directory lives: `shapes/<bucket>/<id>/`, the bucket one of
 * `SHAPE_BUCKETS` chosen by a stable hash of the id. ext4, like most file
 * systems, never gives back a directory's blocks when its entries go, so one
 * flat `shapes/` that once held 20,000 logs kept ~1.3 MiB for good after they
 * were deleted. A bucket is removed by the writer when its last log leaves, so a
 * drained store's `shapes/` is back to a block, and a partly drained one holds
 * about what its live logs need; `shapes/` itself never holds more than
 * `SHAPE_BUCKETS` names.
 *
 * Bucket names (`b.00` .. `b.ff`) hold a `.`, which no shape id may, so a log
 * of the flat layout that came before (`shapes/<id>/`) is told apart by its
 * name: the writer moves those into their buckets at open
 * (`migrateFlatLayout`), and a read-only store finds logs in either place, for a
 * writer that has not moved them yet.
 *
 * The bucket depends on the id alone, so any id (a compacted log's
 * `<handle>_c<n>` too) is found by whoever knows it, without a listing.
 */
import { checkShapeId } from '../defaults.js'
import type { FsPort } from '../fs-port.js'
import { syncDirectory } from './watermark.js'

/** How many bucket directories `shapes/` may hold. Fixed: a log's place depends on it. */
export const SHAPE_BUCKETS = 256

const BUCKET_NAME = /^b\.[0-9a-f]{2}$/

/** Whether `name`, an entry of `shapes/`, is a bucket (else a log of the flat layout, or junk). */
export function isBucketName(name: string): boolean {
  return BUCKET_NAME.test(name)
}

/** The bucket of `id` as a number: FNV-1a of its characters, folded to a byte. */
export function bucketIndex(id: string): number {
  let h = 0x811c9dc5
  for (let i = 0; i < id.length; i++) h = Math.imul(h ^ id.charCodeAt(i), 0x01000193)
  return (h ^ (h >>> 8) ^ (h >>> 16) ^ (h >>> 24)) & (SHAPE_BUCKETS - 1)
}

const BUCKET_NAMES: readonly string[] = Array.from({ length: SHAPE_BUCKETS }, (_, b) => `b.${b.toString(16).padStart(2, '0')}`)

/** The name of bucket `b` (`b.00` .. `b.ff`). */
export function bucketName(b: number): string {
  return BUCKET_NAMES[b]!
}

/** The bucket of `id`. */
export function bucketOf(id: string): string {
  return BUCKET_NAMES[bucketIndex(id)]!
}

/** `shapes/`: its entries are the buckets (made with their first log, removed with their last), and logs of the flat layout. */
export function shapesRoot(root: string): string {
  return `${root}/shapes`
}

/**
 * `shapes/` with its trailing slash, as one flat string: a log's directory is
 * this joined to its `<bucket>/<id>`, so the 100k directories of an open
 * share one prefix instead of each holding a join of its own to it.
 */
export function dirPrefix(root: string): string {
  return Buffer.from(`${shapesRoot(root)}/`, 'utf8').toString('utf8')
}

/** The directory of the bucket named `name` (an entry of `shapes/` that `isBucketName` accepts); its entries are its logs. */
export function bucketPath(root: string, name: string): string {
  return `${root}/shapes/${name}`
}

/**
 * The names of the buckets `shapes/` holds now. With `shapesRoot` and
 * `bucketPath`, what a process that follows the store from outside (a read
 * replica) watches or stamps to learn that a log came or went: a log is
 * renamed into its bucket when created and out of it when deleted, and a
 * bucket comes and goes in `shapes/`.
 */
export function listBuckets(fs: Pick<FsPort, 'readdirSync'>, root: string): string[] {
  return fs.readdirSync(shapesRoot(root)).filter(isBucketName)
}

export function bucketDir(root: string, id: string): string {
  return `${root}/shapes/${bucketOf(id)}`
}

/** The directory of log `id`. */
export function shapeDir(root: string, id: string): string {
  return `${root}/shapes/${bucketOf(id)}/${id}`
}

/** Where the flat layout kept log `id` (read-only stores look there too). */
export function flatShapeDir(root: string, id: string): string {
  return `${root}/shapes/${id}`
}

/** The entries of bucket `name` (its logs); none when the bucket was removed meanwhile. */
export function listBucket(fs: FsPort, root: string, name: string): string[] {
  try {
    return fs.readdirSync(bucketPath(root, name))
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT' || (err as NodeJS.ErrnoException).code === 'ENOTDIR') return []
    throw err
  }
}

/**
 * The ids of every entry under `shapes/`: each bucket's logs, then anything
 * else `shapes/` itself holds (flat-layout logs, or junk). A bucket removed
 * while listed is skipped.
 */
export function listLogs(fs: FsPort, root: string): string[] {
  const ids: string[] = []
  const flat: string[] = []
  for (const name of fs.readdirSync(shapesRoot(root))) {
    if (isBucketName(name)) ids.push(...listBucket(fs, root, name))
    else flat.push(name)
  }
  return flat.length === 0 ? ids : ids.concat(flat)
}

/**
 * Renames the directory at `from` to `id`'s place, making its bucket first if
 * needed; returns the bucket's path when this made it. The mkdir and the
 * rename run in one synchronous step, so no removal of an emptied bucket (also
 * synchronous, `dropBucketIfEmpty`) falls between them in this process; a
 * bucket gone anyway (by hand) is made again, once.
 */
export function placeLog(fs: FsPort, root: string, id: string, from: string): string | undefined {
  const bucket = bucketDir(root, id)
  let made: string | undefined
  if (!fs.existsSync(bucket)) {
    fs.mkdirSync(bucket, { recursive: true })
    made = bucket
  }
  try {
    fs.renameSync(from, `${bucket}/${id}`)
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT' || fs.existsSync(bucket) || !fs.existsSync(from)) throw err
    fs.mkdirSync(bucket, { recursive: true })
    made = bucket
    fs.renameSync(from, `${bucket}/${id}`)
  }
  return made
}

/**
 * Removes `id`'s bucket if no log is left in it (the writer, after moving a log
 * out). Returns the directory to sync so that what just happened is durable:
 * `shapes/` when the bucket went, else the bucket. Its descriptor is opened
 * here, before the caller's first await, so a bucket removed by a later
 * deletion cannot make that sync fail.
 */
export function dropBucketIfEmpty(fs: FsPort, root: string, id: string): Promise<void> {
  const bucket = bucketDir(root, id)
  try {
    fs.rmdirSync(bucket)
  } catch {
    // Not empty (the usual case) or already gone.
    return syncDirectory(fs, fs.existsSync(bucket) ? bucket : shapesRoot(root))
  }
  return syncDirectory(fs, shapesRoot(root))
}

/**
 * Removes the buckets left empty (at open: a log set aside, or a creation whose
 * directory sync failed and was moved back out). Not synced: an empty bucket
 * that comes back after a crash is removed again next time.
 */
export function dropEmptyBuckets(fs: FsPort, root: string, holding?: ReadonlySet<string>): void {
  const top = shapesRoot(root)
  for (const name of fs.readdirSync(top)) {
    if (!isBucketName(name) || holding?.has(name) === true) continue
    try {
      fs.rmdirSync(`${top}/${name}`)
    } catch {
      // Holds logs.
    }
  }
}

/**
 * Moves every log of the flat layout (`shapes/<id>/`) into its bucket, then
 * syncs what changed. Each move is one rename, so a crash at any point leaves
 * every log in one place or the other, and the next open finishes the job. A
 * flat name that is no valid id is left for the open to set aside, as before;
 * one whose place is taken (which no writer makes) is moved to quarantine/.
 * Returns how many logs moved.
 */
export async function migrateFlatLayout(fs: FsPort, root: string): Promise<number> {
  const top = shapesRoot(root)
  const touched = new Set<string>()
  let moved = 0
  for (const name of fs.readdirSync(top)) {
    if (isBucketName(name)) continue
    try {
      checkShapeId(name)
    } catch {
      continue
    }
    try {
      placeLog(fs, root, name, `${top}/${name}`)
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code
      if (code !== 'ENOTEMPTY' && code !== 'EEXIST') throw err
      fs.renameSync(`${top}/${name}`, `${root}/quarantine/${name}.${Date.now()}`)
    }
    touched.add(bucketDir(root, name))
    moved++
  }
  if (moved === 0) return 0
  // The buckets first: a bucket's entry made durable in shapes/ must not name one whose logs are not.
  await Promise.all([...touched].map((dir) => syncDirectory(fs, dir)))
  await syncDirectory(fs, top)
  return moved
}
