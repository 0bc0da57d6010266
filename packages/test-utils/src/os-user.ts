import { type OsUser, postgresOsUser as find } from '@sluice/server/postgres-binaries'

export type { OsUser } from '@sluice/server/postgres-binaries'

/**
 * The user the Postgres binaries must run as: undefined means "as ourselves";
 * as root, the `postgres` user.
 */
export function postgresOsUser(): OsUser | undefined {
  return find(
    'create one (for example `useradd --system --user-group --home-dir /var/lib/postgresql --shell /bin/bash postgres`, ' +
      'or `apt-get install postgresql` which creates it), or run the tests as a non-root user.',
  )
}
