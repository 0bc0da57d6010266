/**
 * Re-renders `results/overlap.md` (or the file given) from its JSON, after
 * notes were added to it: `node --import tsx overlap/render.ts [results/overlap]`.
 */
import { readFileSync } from 'node:fs'
import { type Report, writeReport } from './report.js'

const base = process.argv[2] ?? new URL('../results/overlap', import.meta.url).pathname
const report = JSON.parse(readFileSync(`${base}.json`, 'utf8')) as Report
writeReport(report, base, report.quick ? 'quick' : report.partial ? 'partial' : 'full')
