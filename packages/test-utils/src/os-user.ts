import { type OsUser, lookupUser } from '@sluice/server/postgres-binaries'

export type { OsUser } from '@sluice/server/postgres-binaries'

/**
 * The user the Postgres binaries must run as: undefined means "as ourselves".
 * Postgres refuses to run as root, so root hands the work to the `postgres` user.
 */
export function postgresOsUser(): OsUser | undefined {
  if (process.getuid?.() !== 0) return undefined
  const user = lookupUser('postgres')
  if (user === undefined) {
    throw new Error(
      'startPostgres: running as root, but Postgres refuses to run as root and there is no `postgres` OS user ' +
        'to run it as. Create one (for example `useradd --system --user-group --home-dir /var/lib/postgresql ' +
        '--shell /bin/bash postgres`, or `apt-get install postgresql` which creates it), or run the tests as a non-root user.',
    )
  }
  return user
}
