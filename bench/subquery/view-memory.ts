/**
 * Memory per view entry, measured in a process of its own with `--expose-gc`:
 * the server's own SubqueryView (a subquery's result set) and ViewIndex (the
 * router's filing of a shape under each value of its view), filled as the
 * benchmark's shapes fill them, the V8 heap in use measured after a full
 * collection before and after each. Two layouts: every value in one shape's
 * view (each bucket a bare reference), and every value in 100 shapes' views
 * (each bucket a Set). Prints one JSON line. Argument: entries per layout.
 */
import type { RowValues } from '@sluice/protocol'
import { ViewIndex, type ViewRouting, type ViewSink } from '../../packages/server/src/shapes/view-index.js'
import { scalar } from '../../packages/server/src/where/sql-type.js'
import { SubqueryView } from '../../packages/server/src/where/subquery-view.js'

const gc = (globalThis as { gc?: () => void }).gc
if (gc === undefined) throw new Error('run with --expose-gc')

function heap(): number {
  gc!()
  gc!()
  return process.memoryUsage().heapUsed
}

export interface Layout {
  readonly shapes: number
  readonly perShape: number
  /** How many shapes' views each value is in. */
  readonly sharing: number
  readonly entries: number
  readonly viewBytesPerEntry: number
  readonly indexBytesPerEntry: number
}

function measure(shapes: number, perShape: number, sharing: number): Layout {
  const int4 = scalar('int4')
  const keep: unknown[] = []
  const h0 = heap()
  const views: SubqueryView[] = []
  for (let s = 0; s < shapes; s++) {
    const view = new SubqueryView([int4])
    // Shape s holds values s·perShape/sharing … : each value lands in `sharing` consecutive shapes' views.
    const first = Math.floor((s * perShape) / sharing)
    for (let k = 0; k < perShape; k++) view.add(view.parse([String(first + k)]))
    views.push(view)
  }
  const h1 = heap()
  const index = new ViewIndex<number>()
  const rowKey = (row: RowValues): string | undefined => row['list_id'] ?? undefined
  views.forEach((view, s) => {
    const routing: ViewRouting = {
      filings: [{ domain: 'list_id', rowKey }],
      connect(sink: ViewSink) {
        for (const [key] of view.entries()) sink.file(0, key)
        sink.broad(false)
      },
      keys: () => [...view.entries()].map(([key]) => key),
      disconnect() {},
    }
    index.add(s, routing)
  })
  const h2 = heap()
  keep.push(views, index)
  const entries = shapes * perShape
  return { shapes, perShape, sharing, entries, viewBytesPerEntry: (h1 - h0) / entries, indexBytesPerEntry: (h2 - h1) / entries }
}

/** Entries per layout (argv[2]; default a million). */
const entries = Number(process.argv[2] ?? 1_000_000)
const layouts = [measure(entries / 10, 10, 1), measure(entries / 100, 100, 100)]
process.stdout.write(`${JSON.stringify(layouts)}\n`)
