export { startPostgres } from './start-postgres.js'
export { assertServiceAllowed } from './test-scope.js'
export type { PostgresCluster, StartPostgresOptions, StopReport } from './start-postgres.js'
export { usePostgres } from './use-postgres.js'
export { findPostgresBinaries } from './pg-binaries.js'
export type { FindPostgresBinariesOptions, PostgresBinaries, PostgresBinarySource } from './pg-binaries.js'
export { TEST_CLUSTER_SETTINGS } from './pg-settings.js'
export type { PostgresSettings, PostgresSettingValue } from './pg-settings.js'
export { ephemeralPortRange, freePort, stablePort } from './free-port.js'
export { SeededRandom, seededRandom } from './seeded-random.js'
export { tempDir, makeTempDirSync } from './temp-dir.js'
export type { TempDir } from './temp-dir.js'
export { useTempDir } from './use-temp-dir.js'
export type { TempDirFactory } from './use-temp-dir.js'
export { createFaultyFs } from './faulty-fs.js'
export type {
  ArgsMatcher,
  FailOptions,
  FaultCode,
  FaultRule,
  FaultRules,
  FaultyFs,
  FsMethodName,
  TornWriteOptions,
} from './faulty-fs.js'
export { systemError, isInjectedFault } from './system-error.js'
export type { SystemError } from './system-error.js'
export { spawnNode } from './spawn-node.js'
export type { ExitStatus, LinePredicate, NodeProcess, SpawnNodeOptions } from './spawn-node.js'
export { onProcessExit } from './exit-hooks.js'
export { findNginx, nginxCacheDir } from './nginx-binary.js'
export type { FindNginxOptions, NginxBinary } from './nginx-binary.js'
export { startNginx } from './start-nginx.js'
export type { NginxAccessEntry, NginxConfigContext, NginxServer, StartNginxOptions } from './start-nginx.js'
export { withFileLock } from './file-lock.js'
export { CHROMIUM_ARGS, findChromium } from './chromium.js'
export type { ChromiumBinary, FindChromiumOptions } from './chromium.js'
