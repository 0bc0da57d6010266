#!/usr/bin/env node
// Runs one benchmark command alternately in two checkouts of this repository (a
// "base" and a "head", e.g. two git worktrees), so that a shared machine's
// changing load falls on both alike, and keeps each run's result file.
//
//   node bench/ab/ab.mjs --base <checkout> --head <checkout> --runs 3 \
//     --result pipeline.partial.json --out /tmp/ab-pipeline -- \
//     env ONLY=throughput SETS=eq100k BENCH_TX=1 BENCH_FIXTURE=/tmp/fx pnpm run bench:pipeline
//
// The command runs in each checkout's bench/ folder; after each run
// bench/results/<result> is copied to <out>/<base|head>-<n>.json. Round n runs
// base then head when n is odd, head then base when it is even. What to compare
// in the files is the caller's business (each benchmark's JSON differs).
import { spawnSync } from 'node:child_process'
import { copyFileSync, mkdirSync } from 'node:fs'
import { join, resolve } from 'node:path'

function parse(argv) {
  const at = argv.indexOf('--')
  if (at < 0) throw new Error('usage: ab.mjs --base DIR --head DIR --runs N --result FILE --out DIR -- command...')
  const flags = {}
  for (let i = 0; i < at; i += 2) flags[argv[i].replace(/^--/, '')] = argv[i + 1]
  for (const name of ['base', 'head', 'result', 'out']) if (flags[name] === undefined) throw new Error(`--${name} is required`)
  return { ...flags, runs: Number(flags.runs ?? 3), command: argv.slice(at + 1) }
}

const options = parse(process.argv.slice(2))
mkdirSync(options.out, { recursive: true })
for (let round = 1; round <= options.runs; round++) {
  const order = round % 2 === 1 ? ['base', 'head'] : ['head', 'base']
  for (const side of order) {
    const bench = join(resolve(options[side]), 'bench')
    const started = new Date().toISOString()
    console.log(`[ab] round ${round}/${options.runs}: ${side} (${bench}) at ${started}`)
    const [cmd, ...args] = options.command
    const run = spawnSync(cmd, args, { cwd: bench, stdio: 'inherit' })
    if (run.status !== 0) {
      console.error(`[ab] ${side} round ${round} failed (exit ${run.status}); stopping`)
      process.exit(1)
    }
    copyFileSync(join(bench, 'results', options.result), join(options.out, `${side}-${round}.json`))
  }
}
console.log(`[ab] done: ${options.out}`)
