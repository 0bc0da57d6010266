/**
 * Chart specs and their rendering to SVG. A section describes a chart by its
 * axes and points; this module turns that into a Vega-Lite line chart (one
 * line per series, a point per measurement) and renders it headlessly with
 * Vega, so no chart is drawn by hand and no browser is needed.
 */
import * as vega from 'vega'
import { compile, type TopLevelSpec } from 'vega-lite'

export interface Axis {
  readonly title: string
  /** A log scale, for axes that span decades (1 to 10,000 shapes). */
  readonly log?: boolean
  /** A continuous measure (seconds of a time line): Vega's own ticks rather than one at each measured value. */
  readonly continuous?: boolean
}

export interface Series {
  readonly name: string
  /** Drawn dashed: the ceilings and baselines, so Sluice's own lines stand out. */
  readonly dashed?: boolean
}

export interface Point {
  readonly series: string
  readonly x: number
  readonly y: number
}

export interface ChartSpec {
  /** File name without `.svg`; unique in the report. */
  readonly id: string
  readonly title: string
  readonly x: Axis
  readonly y: Axis
  /** Legend order; every point's series must be one of these. */
  readonly series: readonly Series[]
  readonly points: readonly Point[]
}

const WIDTH = 460
const HEIGHT = 260
const DASH: readonly number[] = [6, 4]
/** Below the plot, with series names in full (labelLimit 0: Vega estimates text widths without a canvas, generously, and would cut long names); a stroke symbol shows which lines are dashed. */
const LEGEND = { orient: 'bottom', columns: 2, labelLimit: 0, symbolType: 'stroke', symbolStrokeWidth: 2 } as const

/** Points a chart can draw: finite, and positive on a log axis. */
export function drawable(spec: ChartSpec): Point[] {
  return spec.points.filter(
    (p) => Number.isFinite(p.x) && Number.isFinite(p.y) && (!spec.x.log || p.x > 0) && (!spec.y.log || p.y > 0),
  )
}

export function vegaLiteSpec(spec: ChartSpec): TopLevelSpec {
  const names = spec.series.map((s) => s.name)
  const unknown = spec.points.find((p) => !names.includes(p.series))
  if (unknown !== undefined) throw new Error(`chart ${spec.id}: point of series "${unknown.series}", which the chart does not declare`)
  const xs = [...new Set(drawable(spec).map((p) => p.x))].sort((a, b) => a - b)
  return {
    $schema: 'https://vega.github.io/schema/vega-lite/v6.json',
    title: spec.title,
    width: WIDTH,
    height: HEIGHT,
    background: 'white',
    data: { values: drawable(spec).map((p) => ({ ...p })) },
    mark: { type: 'line', point: true, strokeWidth: 2 },
    encoding: {
      x: {
        field: 'x',
        type: 'quantitative',
        title: spec.x.title,
        scale: spec.x.log ? { type: 'log' } : { zero: false },
        // Ticks at the measured values: a benchmark has few, and in-between ticks suggest measurements that were not made.
        axis: spec.x.continuous ? { format: '~s' } : { values: xs, format: '~s', labelOverlap: true },
      },
      y: {
        field: 'y',
        type: 'quantitative',
        title: spec.y.title,
        scale: spec.y.log ? { type: 'log' } : { zero: true },
        // Vega puts a tick at every 1-2-5 step of a log scale; a few per decade keep the labels legible.
        axis: { format: '~s', ...(spec.y.log ? { tickCount: 4 } : {}) },
      },
      color: { field: 'series', type: 'nominal', title: null, scale: { domain: names }, legend: LEGEND },
      strokeDash: {
        field: 'series',
        type: 'nominal',
        title: null,
        scale: { domain: names, range: spec.series.map((s) => (s.dashed ? [...DASH] : [1, 0])) },
        legend: LEGEND,
      },
      order: { field: 'x', type: 'quantitative' },
      tooltip: [{ field: 'series' }, { field: 'x' }, { field: 'y' }],
    },
  }
}

export async function renderSvg(spec: ChartSpec): Promise<string> {
  const view = new vega.View(vega.parse(compile(vegaLiteSpec(spec)).spec), { renderer: 'none' })
  try {
    return await view.toSVG()
  } finally {
    view.finalize()
  }
}
