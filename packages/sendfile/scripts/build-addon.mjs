#!/usr/bin/env node
// The package's install step: builds the sendfile addon with node-gyp.
// The addon is optional (the server falls back to pread), so a failed build
// (no compiler, no Python, another OS) must not fail the install: it warns and
// exits 0. `--strict` (npm run build:addon) fails instead, for CI and debugging.
import { spawnSync } from 'node:child_process'
import { existsSync } from 'node:fs'
import { createRequire } from 'node:module'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'

const strict = process.argv.includes('--strict')
const packageDir = join(dirname(fileURLToPath(import.meta.url)), '..')

function skip(reason) {
  const message = `@sluice/sendfile: the sendfile addon was not built (${reason}); the server will serve bodies with pread`
  if (strict) {
    console.error(message)
    process.exit(1)
  }
  console.warn(message)
  process.exit(0)
}

if (process.platform !== 'linux') skip(`sendfile(2) support is Linux-only, this is ${process.platform}`)
if (process.env['SLUICE_SKIP_SENDFILE_BUILD'] === '1') skip('SLUICE_SKIP_SENDFILE_BUILD=1')

let nodeGyp
try {
  nodeGyp = createRequire(import.meta.url).resolve('node-gyp/bin/node-gyp.js')
} catch {
  skip('node-gyp is not installed')
}

// node-gyp downloads Node's headers unless told where they are; a Node installed
// with its headers (Debian's nodejs, the official tarballs) has them next to its binary.
const args = [nodeGyp, 'rebuild', '--release', '--loglevel=warn']
const nodePrefix = join(dirname(process.execPath), '..')
if (!process.env['npm_config_nodedir'] && existsSync(join(nodePrefix, 'include', 'node', 'node_api.h'))) args.push(`--nodedir=${nodePrefix}`)

const result = spawnSync(process.execPath, args, { cwd: packageDir, stdio: 'inherit' })
if (result.error) skip(result.error.message)
if (result.status !== 0) skip(`node-gyp exited with ${result.status}`)
