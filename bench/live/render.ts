/**
 * Re-renders `results/<name>.md` from `results/<name>.json` (after notes were
 * added to the JSON, or the formatting changed): `node --import tsx live/render.ts results/live.json`.
 */
import { readFileSync } from 'node:fs'
import type { Report } from './report.js'
import { writeReport } from './report.js'

const path = process.argv[2]
if (path === undefined || !path.endsWith('.json')) throw new Error('usage: render.ts <results/name.json>')
writeReport(JSON.parse(readFileSync(path, 'utf8')) as Report, path.slice(0, -'.json'.length))
