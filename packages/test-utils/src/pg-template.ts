import { createHash } from 'node:crypto'
import { existsSync } from 'node:fs'
import { appendFile, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { ensureDirAtomically } from './atomic-dir.js'
import type { OsUser } from './os-user.js'
import type { PostgresBinaries } from './pg-binaries.js'
import { formatSettings, TEST_CLUSTER_SETTINGS } from './pg-settings.js'
import { mustRun } from './run-command.js'

const building = new Map<string, Promise<string>>()

function initdbArgs(major: number): string[] {
  return [
    '--auth=trust',
    '-U',
    'postgres',
    '--encoding=UTF8',
    '--locale=C',
    // Nothing to make durable: the template is copied, never crash-recovered.
    '--no-sync',
    ...(major >= 14 ? ['--no-instructions'] : []),
    // Checksums became initdb's default in 18; they only slow tests down.
    ...(major >= 18 ? ['--no-data-checksums'] : []),
  ]
}

function isComplete(dir: string): boolean {
  return ['template.json', 'data/PG_VERSION', 'data/global/pg_control', 'data/postgresql.conf'].every((f) =>
    existsSync(join(dir, f)),
  )
}

/**
 * Returns the data dir of an initdb'd template cluster for these binaries,
 * building it once per machine (initdb costs about a second, a copy a tenth of
 * that). The directory name hashes everything that shapes its content, so
 * different binaries, settings or owners never share one.
 */
export function ensureTemplate(binaries: PostgresBinaries, owner: OsUser | undefined): Promise<string> {
  const args = initdbArgs(binaries.major)
  const conf = formatSettings(TEST_CLUSTER_SETTINGS)
  const uid = owner?.uid ?? process.getuid?.() ?? 0
  const key = createHash('sha256')
    .update(JSON.stringify({ binDir: binaries.binDir, version: binaries.version, args, conf, uid, layout: 1 }))
    .digest('hex')
    .slice(0, 12)
  const finalDir = `/tmp/sluice-pg-template-${binaries.major}-${key}`
  if (isComplete(finalDir)) return Promise.resolve(join(finalDir, 'data'))
  // Only the build in flight is shared: a template removed later is noticed and rebuilt.
  let pending = building.get(finalDir)
  if (pending === undefined) {
    pending = ensureDirAtomically(
      finalDir,
      isComplete,
      async (tmp) => {
        const dataDir = join(tmp, 'data')
        await mustRun(join(binaries.binDir, 'initdb'), ['-D', dataDir, ...args], { as: owner })
        await appendFile(join(dataDir, 'postgresql.conf'), `\n# @sluice/test-utils template settings\n${conf}`)
        // Written last: its presence marks a finished template.
        await writeFile(join(tmp, 'template.json'), JSON.stringify({ ...binaries, args }, null, 2))
      },
      owner,
    ).then((dir) => join(dir, 'data'))
    building.set(finalDir, pending)
    pending.then(
      () => building.delete(finalDir),
      () => building.delete(finalDir),
    )
  }
  return pending
}
