import { readFileSync } from 'node:fs';
import { Resvg } from '@resvg/resvg-js';
import * as echarts from 'echarts';
import type { ChartSpec } from './charts.js';
import { RUN_COLORS } from './charts.js';
import { runStats, type ReportRun, type RunStats } from './run-data.js';

/** Renders a chart to SVG on the server (ECharts' SSR renderer, no DOM). */
export function renderChartSvg(spec: ChartSpec): string {
  const chart = echarts.init(null, null, { renderer: 'svg', ssr: true, width: spec.width, height: spec.height });
  try {
    chart.setOption(spec.option);
    return chart.renderToSVGString();
  } finally {
    chart.dispose();
  }
}

/** Renders a chart to PNG (`scale` x its size) through SVG and resvg (no browser). */
export function renderChartPng(spec: ChartSpec, scale = 2): Buffer {
  const svg = renderChartSvg(spec);
  const resvg = new Resvg(svg, {
    fitTo: { mode: 'zoom', value: scale },
    background: '#ffffff',
    font: { loadSystemFonts: true, defaultFontFamily: 'DejaVu Sans', sansSerifFamily: 'DejaVu Sans' },
  });
  return resvg.render().asPng();
}

let bundle: string | undefined;

/** The ECharts browser bundle (`echarts.min.js`, with its licence header), to inline in the report. */
export function echartsBundle(): string {
  if (!bundle) {
    const file = new URL('./dist/echarts.min.js', import.meta.resolve('echarts'));
    // Inside <script>, a literal "</script" would end the element early.
    bundle = readFileSync(file, 'utf8').replace(/<\/script/gi, '<\\/script');
  }
  return bundle;
}

/** HTML-escapes text. */
export function escapeHtml(text: string): string {
  return text.replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c] as string);
}

/** JSON safe to embed in a `<script>` element. */
function scriptJson(value: unknown): string {
  return JSON.stringify(value)
    .replace(/</g, '\\u003c')
    .replace(/\u2028/g, '\\u2028')
    .replace(/\u2029/g, '\\u2029');
}

/** What the HTML report shows. */
export interface ReportModel {
  title: string;
  generatedAt: string;
  runs: ReportRun[];
  /** Loss, accuracy and throughput charts. */
  charts: ChartSpec[];
  /** Per run: its embedding map, or why there is none. */
  embeddings: Array<{ run: ReportRun; chart?: ChartSpec; note?: string }>;
}

function pct(x: number | undefined): string {
  return x === undefined ? '–' : `${(100 * x).toFixed(1)}%`;
}

function duration(sec: number | undefined): string {
  if (sec === undefined) return '–';
  if (sec < 60) return `${sec.toFixed(1)} s`;
  const m = Math.floor(sec / 60);
  if (m < 60) return `${m} min ${Math.round(sec - 60 * m)} s`;
  return `${Math.floor(m / 60)} h ${m % 60} min`;
}

function fixed(x: number | undefined, digits: number): string {
  return x === undefined ? '–' : x.toFixed(digits);
}

function statsTable(runs: ReportRun[], stats: RunStats[]): string {
  const head = [
    'run',
    'method',
    'backbone',
    'dataset',
    'epochs',
    'global batch',
    'best kNN top-1',
    'best linear top-1',
    'final loss',
    'images / s',
    'wall time',
    'status',
  ];
  const body = runs.map((run, i) => {
    const s = stats[i];
    const epochs = s.epochsDone === undefined ? `${run.epochs}` : `${Number(s.epochsDone.toFixed(2))} / ${run.epochs}`;
    const bestAt = (b: RunStats['bestKnnAcc1']) => (b ? `${pct(b.value)} <span class="dim">(epoch ${Number(b.epoch.toFixed(2))})</span>` : '–');
    const cells = [
      `<span class="swatch" style="background:${RUN_COLORS[i % RUN_COLORS.length]}"></span>${escapeHtml(run.label)}`,
      escapeHtml(run.method),
      escapeHtml(run.backbone),
      escapeHtml(run.dataset),
      epochs,
      `${run.globalBatch}${run.worldSize > 1 ? ` <span class="dim">(${run.worldSize} ranks)</span>` : ''}`,
      bestAt(s.bestKnnAcc1),
      bestAt(s.bestLinearAcc1),
      fixed(s.finalLoss, 4),
      fixed(s.imagesPerSec, 0),
      duration(s.wallTimeSec),
      escapeHtml(s.status),
    ];
    return `<tr>${cells.map((c) => `<td>${c}</td>`).join('')}</tr>`;
  });
  return `<table id="runs-table"><thead><tr>${head.map((h) => `<th>${h}</th>`).join('')}</tr></thead><tbody>${body.join('')}</tbody></table>`;
}

/** Configuration keys whose values differ between runs (what the comparison varies). */
function configDifferences(runs: ReportRun[]): string {
  if (runs.length < 2) return '';
  const ignored = new Set(['runDir', 'resume']);
  const keys = [...new Set(runs.flatMap((r) => Object.keys(r.config)))].filter((k) => !ignored.has(k)).sort();
  const show = (v: unknown) => (v === undefined ? '–' : typeof v === 'string' ? v : JSON.stringify(v));
  const differing = keys.filter((k) => new Set(runs.map((r) => show(r.config[k]))).size > 1);
  if (differing.length === 0) return '<p>The runs have the same configuration.</p>';
  const head = `<tr><th>setting</th>${runs.map((r) => `<th>${escapeHtml(r.label)}</th>`).join('')}</tr>`;
  const rows = differing.map((k) => `<tr><td><code>${escapeHtml(k)}</code></td>${runs.map((r) => `<td>${escapeHtml(show(r.config[k]))}</td>`).join('')}</tr>`);
  return `<table id="config-table"><thead>${head}</thead><tbody>${rows.join('')}</tbody></table>`;
}

const STYLE = `
body { font-family: "DejaVu Sans", "Liberation Sans", Arial, sans-serif; margin: 0; background: #f4f5f7; color: #222; }
header { background: #1f2d3d; color: #fff; padding: 18px 28px; }
header h1 { margin: 0 0 4px; font-size: 22px; }
header p { margin: 0; color: #c9d3dd; font-size: 13px; }
main { padding: 18px 28px 40px; }
h2 { font-size: 17px; margin: 26px 0 10px; }
table { border-collapse: collapse; background: #fff; font-size: 13px; box-shadow: 0 1px 2px rgba(0,0,0,.08); }
th, td { padding: 6px 10px; border-bottom: 1px solid #e4e7eb; text-align: left; white-space: nowrap; }
th { background: #eef1f4; font-weight: 600; }
.dim { color: #7a8591; }
.swatch { display: inline-block; width: 10px; height: 10px; border-radius: 2px; margin-right: 6px; vertical-align: middle; }
.grid { display: grid; grid-template-columns: repeat(auto-fill, minmax(560px, 1fr)); gap: 16px; }
.maps { grid-template-columns: repeat(auto-fill, minmax(400px, 1fr)); }
#config-table td { white-space: normal; word-break: break-word; max-width: 460px; }
#config-table td:first-child { white-space: nowrap; }
.card { background: #fff; border-radius: 4px; box-shadow: 0 1px 2px rgba(0,0,0,.08); padding: 6px; }
.chart { width: 100%; }
.note { padding: 24px; color: #8a5a00; }
`;

const BOOT = `
(function () {
  var specs = JSON.parse(document.getElementById('report-charts').textContent);
  var pending = specs.length;
  var charts = [];
  function done() { if (--pending === 0) document.body.setAttribute('data-charts-ready', 'true'); }
  if (pending === 0) document.body.setAttribute('data-charts-ready', 'true');
  specs.forEach(function (spec) {
    var chart = echarts.init(document.getElementById(spec.id), null, { renderer: 'canvas' });
    chart.on('finished', function first() { chart.off('finished', first); done(); });
    chart.setOption(spec.option);
    charts.push(chart);
  });
  window.addEventListener('resize', function () { charts.forEach(function (c) { c.resize(); }); });
})();
`;

/**
 * The comparison report as one self-contained HTML document: styles, data and the
 * ECharts library are inline, so it works opened from disk without a network. When
 * every chart has rendered, `<body>` gets `data-charts-ready="true"`.
 */
export function reportHtml(model: ReportModel): string {
  const stats = model.runs.map(runStats);
  const chartDiv = (spec: ChartSpec) =>
    `<div class="card"><div class="chart" id="${spec.id}" role="img" aria-label="${escapeHtml(spec.title)}" style="height:${spec.height}px"></div></div>`;
  const embeddingCards = model.embeddings.map(({ run, chart, note }) =>
    chart
      ? chartDiv(chart)
      : `<div class="card"><p class="note"><strong>${escapeHtml(run.label)}</strong>: no embedding map (${escapeHtml(note ?? 'not computed')})</p></div>`,
  );
  const specs = [...model.charts, ...model.embeddings.flatMap((e) => (e.chart ? [e.chart] : []))].map((s) => ({ id: s.id, option: s.option }));
  const runList = model.runs.map((r) => escapeHtml(r.dir)).join(', ');
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>${escapeHtml(model.title)}</title>
<style>${STYLE}</style>
</head>
<body>
<header><h1>${escapeHtml(model.title)}</h1><p>${model.runs.length} runs (${runList}) &middot; generated ${escapeHtml(model.generatedAt)} by ssl-train compare</p></header>
<main>
<h2>Runs</h2>
${statsTable(model.runs, stats)}
<h2>Training and evaluation</h2>
<div class="grid">${model.charts.map(chartDiv).join('\n')}</div>
${model.embeddings.length > 0 ? `<h2>Embedding maps (final checkpoints)</h2>\n<div class="grid maps">${embeddingCards.join('\n')}</div>` : ''}
${model.runs.length > 1 ? `<h2>Settings that differ</h2>\n${configDifferences(model.runs)}` : ''}
</main>
<script>${echartsBundle()}</script>
<script type="application/json" id="report-charts">${scriptJson(specs)}</script>
<script>${BOOT}</script>
</body>
</html>
`;
}
