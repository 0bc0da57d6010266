/**
 * `npm run test:unit` sets SLUICE_TEST_SCOPE=unit and runs only test files not
 * named `*.pg.test.ts`. A test that starts Postgres, nginx or Chromium there
 * is misnamed: it fails here at once, naming the rule, rather than quietly
 * making the fast run slow (or failing on a machine without those services).
 */
export function assertServiceAllowed(service: 'Postgres' | 'nginx' | 'Chromium'): void {
  if (process.env['SLUICE_TEST_SCOPE'] !== 'unit') return
  throw new Error(`this test needs ${service}, which the unit run (SLUICE_TEST_SCOPE=unit) does not start: name its file *.pg.test.ts`)
}
