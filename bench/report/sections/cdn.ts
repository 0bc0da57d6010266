/** The CDN benchmark's section: one shape, thousands of long-poll clients through nginx or Varnish in front of Sluice. */
import { CACHE_LABEL, CEILING_SUFFIX, type CacheKind, type Report, type Run, isTargetRun, runLabel, targetChecks } from '../../cdn/report.js'
import type { ChartSpec } from '../chart.js'
import { loadLine, machineLines, ms, num, plural, pressureLine, ratio } from '../format.js'
import type { ReportSection, SectionContent, Table } from '../section.js'

const CACHES: readonly CacheKind[] = ['nginx', 'varnish', 'none']

const label = runLabel

/** A chart series: the cache, and the ceiling's own series next to it. */
function series(run: Run): string {
  return `${CACHE_LABEL[run.cache]}${run.origin === 'ceiling' ? CEILING_SUFFIX : ''}`
}

function render(report: Report): SectionContent {
  const runs = [...report.runs].sort(
    (a, b) => a.clients - b.clients || CACHES.indexOf(a.cache) - CACHES.indexOf(b.cache) || Number(a.origin === 'ceiling') - Number(b.origin === 'ceiling'),
  )
  const liveTable: Table = {
    title: `Live: one write, every client (${report.runs[0]?.live.writes.length ?? '?'} writes per run)`,
    headers: ['clients', 'cache', 'last client p50', 'last client p99', 'last client max', 'median client (p50 of writes)', 'first client (p50 of writes)', 'origin live requests per window', 'origin live requests / writes', 'incomplete writes', 'cache CPU per write', 'client CPU per write', 'load'],
    align: ['r', 'l', 'r', 'r', 'r', 'r', 'r', 'r', 'r', 'r', 'r', 'r', 'r'],
    rows: runs.map((r) => [
      num(r.clients),
      label(r),
      ms(r.live.lastClient.p50),
      ms(r.live.lastClient.p99),
      ms(r.live.lastClient.max),
      ms(r.live.medianClient.p50),
      r.live.firstClient === undefined ? '-' : ms(r.live.firstClient.p50),
      r.cache === 'none' ? 'n/a' : num(r.live.originPerWindow, 2),
      `${num(r.live.originLiveRequests)} / ${num(r.live.writes.length)}`,
      num(r.live.incomplete),
      r.cache === 'none' ? '-' : ms(r.live.cacheCpuMsPerWrite),
      ms(r.live.clientCpuMsPerWrite),
      num(r.live.loadavg1, 1),
    ]),
    note: 'Last client: from the writer sending the update until the last of the clients holds the whole response, one figure per write; p50/p99/max over the writes. The first client\'s figure is the origin\'s answer through the cache before any fan-out. Origin requests are counted by the origin process itself; a window is a distinct live URL (each write and each long-poll timeout starts one). Without a cache every client has its own cursor, so only requests per write compare. CPU per write: all the cache\'s processes, and all the client processes, over the writes.',
  }
  const syncTable: Table = {
    title: `Initial sync (${num(report.shape.rows)} rows, chunks of ${num(report.shape.chunkBytes / 1024)} KiB)`,
    headers: ['clients', 'cache', 'wall time', 'per client p50', 'per client p99', 'origin requests', 'origin responses', 'URLs', 'most 200s for one URL', 'errors'],
    align: ['r', 'l', 'r', 'r', 'r', 'r', 'l', 'r', 'r', 'r'],
    rows: runs.map((r) => [
      num(r.clients),
      label(r),
      ms(r.sync.wallMs),
      ms(r.sync.perClientMs.p50),
      ms(r.sync.perClientMs.p99),
      num(r.sync.originRequests),
      Object.entries(r.sync.originServed.byStatus).map(([k, v]) => `${num(v)}x ${k}`).join(', '),
      num(r.sync.originUrls),
      num(r.sync.originServed.max200PerUrl),
      num(r.sync.errors),
    ]),
    note: `Every client asks \`offset=-1\`, then each offset it is given until up-to-date (${syncConcurrencyText(report)}). 1 in the last-but-one column: every chunk body was served by the origin once; a 304 is a cache revalidating an entry older than its max-age (60 s), which Sluice answers without reading the log.`,
  }
  const targetsTable: Table = {
    title: 'Targets (issue 31, item 10)',
    headers: ['clients', 'cache', 'target', 'figure', 'met'],
    align: ['r', 'l', 'l', 'r', 'l'],
    rows: runs.filter(isTargetRun).flatMap((r) => targetChecks(r).map((t) => [num(r.clients), label(r), t.what, t.figure, t.met ? 'met' : 'missed'])),
  }
  const charts: ChartSpec[] = []
  const latencySeries = (['nginx', 'varnish'] as const).flatMap((c) => [`${CACHE_LABEL[c]} p50`, `${CACHE_LABEL[c]} p99`])
  const ceilingSeries = [...new Set(runs.filter((r) => r.origin === 'ceiling').map(series))].flatMap((s) => [`${s} p50`, `${s} p99`])
  charts.push({
    id: 'cdn-last-client',
    title: 'Through a cache: time until the last client has a write',
    x: { title: 'clients following one shape', log: true },
    y: { title: 'ms (over the writes; log scale)', log: true },
    series: [
      ...latencySeries.map((name) => ({ name })),
      ...ceilingSeries.map((name) => ({ name, dashed: true })),
      { name: `${CACHE_LABEL.none} p50`, dashed: true },
      { name: `${CACHE_LABEL.none} p99`, dashed: true },
    ],
    points: runs.flatMap((r) => [
      { series: `${series(r)} p50`, x: r.clients, y: r.live.lastClient.p50 },
      { series: `${series(r)} p99`, x: r.clients, y: r.live.lastClient.p99 },
    ]),
  })
  charts.push({
    id: 'cdn-origin-requests',
    title: 'Live requests reaching the origin per write',
    x: { title: 'clients following one shape', log: true },
    y: { title: 'origin live requests per write (log scale)', log: true },
    series: [{ name: CACHE_LABEL.nginx }, { name: CACHE_LABEL.varnish }, { name: CACHE_LABEL.none, dashed: true }],
    points: runs.filter((r) => r.origin !== 'ceiling').map((r) => ({ series: CACHE_LABEL[r.cache], x: r.clients, y: r.live.originLiveRequests / Math.max(1, r.live.writes.length) })),
  })
  const headline: string[] = []
  const top = Math.max(...runs.map((r) => r.clients))
  const least = Math.min(...runs.map((r) => r.clients))
  const at = (cache: CacheKind, clients: number): Run | undefined => runs.find((r) => r.cache === cache && r.clients === clients && r.origin !== 'ceiling')
  const nginx = at('nginx', top)
  const varnish = at('varnish', top)
  if (nginx !== undefined && varnish !== undefined) {
    headline.push(
      `${plural(top, 'client')} following one shape through a cache: the last client has each write after ${ms(varnish.live.lastClient.p50)} (p99 ${ms(varnish.live.lastClient.p99)}) with Varnish and ${ms(nginx.live.lastClient.p50)} (p99 ${ms(nginx.live.lastClient.p99)}) with nginx, at load average ${num(varnish.live.loadavg1)} and ${num(nginx.live.loadavg1)} on 2 cores shared with the clients; the origin answers ${num(varnish.live.originPerWindow, 2)} (Varnish) and ${num(nginx.live.originPerWindow, 2)} (nginx) live requests per window and serves each initial-sync chunk at most ${num(Math.max(varnish.sync.originServed.max200PerUrl, nginx.sync.originServed.max200PerUrl))} time(s).`,
    )
  }
  const smallNginx = at('nginx', least)
  const smallVarnish = at('varnish', least)
  if (least !== top && smallNginx !== undefined && smallVarnish !== undefined) {
    headline.push(
      `With ${plural(least, 'client')}: last client after ${ms(smallVarnish.live.lastClient.p50)} (p99 ${ms(smallVarnish.live.lastClient.p99)}) with Varnish, ${ms(smallNginx.live.lastClient.p50)} (p99 ${ms(smallNginx.live.lastClient.p99)}) with nginx, ${ratio(smallNginx.live.lastClient.p50 / smallVarnish.live.lastClient.p50)}: nginx's waiting requests re-check the cache lock every 500 ms, Varnish wakes them when the response arrives.`,
    )
  }
  const s = report.settings
  const loads = runs.map((r) => r.live.cpuPressurePercent)
  return {
    measures: `One shape (${num(report.shape.rows)} rows) followed by ${counts(s['clients'])} long-poll clients through a real HTTP cache in front of Sluice: nginx ${report.versions.nginx} with \`packages/server/deploy/nginx.conf\` and Varnish ${report.versions.varnish} with \`packages/server/deploy/varnish.vcl\`, next to the same clients talking to Sluice directly (up to ${num(Number(s['directMaxClients']))} clients). For each: the initial sync of every client and how often the origin served each chunk URL, then the time until the last client has each of ${String(s['writes'])} single-row commits, and how many live requests reached the origin.`,
    doesNotMeasure:
      'A network or machines between clients, cache and origin (all share 2 cores here, so client-side CPU is part of every figure), TLS, SSE through a cache, many shapes, commercial CDNs (their collapsing differs), browsers.',
    method: [
      `Sluice runs as \`createServer\` builds it, in its own process, with a listener on its HTTP server that counts every request by URL (the origin's own count). Flags: \`${report.originFlags.join(' ')}\`.`,
      `Clients: ${s['clientEngine'] === 'c' ? 'C (`cdn/epoll-clients.c`, one epoll loop per process)' : 'Node'}, HTTP/1.1 on raw sockets (Node's http client costs several times the caches' CPU per response), one keep-alive connection each, up to ${num(Number(s['perProcess']))} per process, each process from its own 127.0.0.x; at most ${num(Number(s['syncConcurrency']))} clients of a process in their initial sync at once. They build URLs with the same parameter order, as the official client does.`,
      `Writes: one \`UPDATE\` of one row, stamped with CLOCK_MONOTONIC just before it is sent; the next one ${num(Number(s['writeGapMs']))} ms after every client has the previous one (so the clients' next long-polls are parked). ${Number(s['idleSeconds']) > 0 ? `Then ${String(s['idleSeconds'])} s without writes, so one long-poll times out and a new window starts.` : ''}`,
      `nginx: ${String(s['nginxWorkers'])} workers (each has its own open-file limit), \`listen ... reuseport backlog=4096\`, everything else as the deploy file. Varnish: \`${Object.entries((s['varnishParams'] as Record<string, string>) ?? {}).map(([k, v]) => `-p ${k}=${v}`).join(' ')}\`; above ${num(Number(s['varnishClientsPerEdge']))} clients (one varnishd cannot hold more sockets than the ${report.machine.fdLimit}-descriptor limit) two edge varnishds share the clients in front of one shield varnishd, all with the same VCL.`,
      'A fresh cache for every run; the shape exists before the first run, so runs measure serving, not creation.',
      `Ceiling (rows "${CEILING_SUFFIX.slice(2)}"): the same cache and clients in front of a bare node:http origin (\`cdn/ceiling-origin.ts\`) that answers every parked live request from one buffer the moment it is told of the write, with Sluice's live headers; the initial sync still goes to Sluice. No Postgres, no log, no fsync: what is left is the cache's and the clients' fan-out on this machine.`,
    ],
    machine: machineLines(report.machine, [`Postgres ${report.postgres.version}, nginx ${report.versions.nginx}, Varnish ${report.versions.varnish}, ulimit -n ${report.machine.fdLimit}; run took ${num(report.runSeconds / 60, 1)} min`]),
    load: [loadLine(report.loads), pressureLine(loads)],
    tables: [liveTable, syncTable, targetsTable].filter((t) => t.rows.length > 0),
    charts,
    headline,
  }
}

function syncConcurrencyText(report: Report): string {
  return `at most ${num(Number(report.settings['syncConcurrency']))} clients of a process at once`
}

function counts(list: unknown): string {
  if (!Array.isArray(list) || list.length === 0) return 'several thousand'
  const items = list.map((x) => num(Number(x)))
  return items.length === 1 ? items[0]! : `${items.slice(0, -1).join(', ')} and ${items.at(-1)!}`
}

export const cdnSection: ReportSection = {
  id: 'cdn',
  title: 'Through a CDN: one shape, thousands of clients behind nginx or Varnish',
  stem: 'cdn',
  render: (file) => render(file.data as Report),
}
