import type { EChartsOption } from 'echarts';
import type { Embedding } from './embedding.js';
import { epochSeries, metricSeries, type ReportRun } from './run-data.js';

/** One chart of the report: an ECharts option (plain JSON, no functions) and where it goes. */
export interface ChartSpec {
  /** DOM id in the HTML report. */
  id: string;
  /** File name of its PNG rendering. */
  file: string;
  /** What it shows (alt text, headings). */
  title: string;
  option: EChartsOption;
  width: number;
  height: number;
}

/** Run colours (Tableau 10): the same run has the same colour in every chart. */
export const RUN_COLORS = ['#4e79a7', '#f28e2b', '#e15759', '#76b7b2', '#59a14f', '#edc948', '#b07aa1', '#ff9da7', '#9c755f', '#bab0ac'];

/** Class colours of the embedding maps (20 distinguishable hues). */
export const CLASS_COLORS = [
  '#1f77b4',
  '#ff7f0e',
  '#2ca02c',
  '#d62728',
  '#9467bd',
  '#8c564b',
  '#e377c2',
  '#7f7f7f',
  '#bcbd22',
  '#17becf',
  '#aec7e8',
  '#ffbb78',
  '#98df8a',
  '#ff9896',
  '#c5b0d5',
  '#c49c94',
  '#f7b6d2',
  '#c7c7c7',
  '#dbdb8d',
  '#9edae5',
];

const LINE_SIZE = { width: 860, height: 420 };
const MAP_SIZE = { width: 560, height: 520 };

function round(x: number, digits = 4): number {
  const f = 10 ** digits;
  return Math.round(x * f) / f;
}

interface LineSeries {
  name: string;
  color: string;
  data: Array<[number, number]>;
}

/** A line chart of one metric, one line per run. */
function lineOption(title: string, subtitle: string, xName: string, yName: string, series: LineSeries[], xMin?: number): EChartsOption {
  return {
    animation: false,
    backgroundColor: '#ffffff',
    textStyle: { fontFamily: 'DejaVu Sans, Liberation Sans, Arial, sans-serif' },
    title: { text: title, subtext: subtitle, left: 'center', top: 6 },
    tooltip: { trigger: 'axis' },
    legend: { type: 'plain', bottom: 6, left: 'center', width: '92%', itemGap: 18, data: series.map((s) => s.name) },
    grid: { left: 78, right: 36, top: 72, bottom: 84 },
    xAxis: { type: 'value', name: xName, nameLocation: 'middle', nameGap: 30, min: xMin, max: 'dataMax' },
    yAxis: { type: 'value', name: yName, nameLocation: 'middle', nameGap: 56, scale: true },
    series: series.map((s) => ({
      type: 'line',
      name: s.name,
      data: s.data.map(([x, y]) => [round(x), round(y, 5)]),
      showSymbol: s.data.length <= 40,
      symbolSize: 6,
      lineStyle: { width: 2, color: s.color },
      itemStyle: { color: s.color },
      emphasis: { focus: 'series' },
    })),
  };
}

/**
 * The metric charts of the comparison: training loss, kNN and linear top-1 accuracy per
 * epoch, and training throughput. The x-axis is the epoch (fractional for per-step
 * metrics) when every run tells its steps per epoch, else the optimizer step.
 */
export function metricCharts(runs: ReportRun[]): ChartSpec[] {
  const byEpoch = runs.every((r) => r.stepsPerEpoch !== undefined);
  const x = (run: ReportRun, step: number) => (byEpoch ? step / (run.stepsPerEpoch as number) : step);
  const xName = byEpoch ? 'epoch' : 'step';
  const perStep = (key: string, skipFirst = false): LineSeries[] =>
    runs.map((run, i) => ({
      name: run.label,
      color: RUN_COLORS[i % RUN_COLORS.length],
      data: metricSeries(run, key)
        .filter(([step]) => !skipFirst || step > 1)
        .map(([step, v]) => [x(run, step), v] as [number, number]),
    }));
  const perEpoch = (key: string): LineSeries[] =>
    runs.map((run, i) => ({
      name: run.label,
      color: RUN_COLORS[i % RUN_COLORS.length],
      data: epochSeries(run, key).map(([e, v]) => [e, 100 * v] as [number, number]),
    }));
  const specs: Array<Omit<ChartSpec, 'width' | 'height'>> = [
    {
      id: 'chart-loss',
      file: 'loss.png',
      title: 'Training loss',
      option: lineOption('Training loss', 'self-supervised loss per logged step (each method has its own scale)', xName, 'loss', perStep('train/loss'), 0),
    },
    {
      id: 'chart-knn',
      file: 'knn-accuracy.png',
      title: 'kNN top-1 accuracy',
      option: lineOption(
        'kNN top-1 accuracy',
        'weighted kNN on frozen backbone features, validation set',
        'epoch',
        'top-1 accuracy (%)',
        perEpoch('val/knn_acc1'),
        0,
      ),
    },
    {
      id: 'chart-linear',
      file: 'linear-accuracy.png',
      title: 'Linear top-1 accuracy',
      option: lineOption(
        'Linear top-1 accuracy',
        'online linear classifier on detached features, validation set',
        'epoch',
        'top-1 accuracy (%)',
        perEpoch('val/acc1'),
        0,
      ),
    },
    {
      id: 'chart-throughput',
      file: 'throughput.png',
      title: 'Training throughput',
      option: lineOption(
        'Training throughput',
        'images per second over all ranks (first step left out: warm-up)',
        xName,
        'images / s',
        perStep('train/images_per_sec', true),
        0,
      ),
    },
  ];
  return specs.map((s) => ({ ...s, ...LINE_SIZE }));
}

/** A file-name-safe form of a label. */
export function slug(label: string): string {
  return (
    label
      .toLowerCase()
      .replace(/[^a-z0-9]+/g, '-')
      .replace(/^-+|-+$/g, '') || 'run'
  );
}

/** The 2-D embedding map of one run: its validation points, coloured by class. */
export function embeddingChart(run: ReportRun, index: number, embedding: Embedding): ChartSpec {
  const byClass = embedding.classNames.map((name, c) => ({
    name,
    data: embedding.points.flatMap((p) => (p.label === c ? [[round(p.x, 3), round(p.y, 3)]] : [])),
  }));
  const knn = embedding.knnAcc1 === undefined ? '' : ` · kNN top-1 ${(100 * embedding.knnAcc1).toFixed(1)}%`;
  const title = `${run.label}: ${run.method} / ${run.backbone}`;
  return {
    id: `chart-embedding-${index}`,
    file: `embedding-${slug(run.label)}.png`,
    title: `Embedding map of ${run.label}`,
    ...MAP_SIZE,
    option: {
      animation: false,
      backgroundColor: '#ffffff',
      textStyle: { fontFamily: 'DejaVu Sans, Liberation Sans, Arial, sans-serif' },
      color: CLASS_COLORS,
      title: {
        text: title,
        subtext: `UMAP · ${embedding.points.length} val. images · step ${embedding.step}${knn}`,
        left: 'center',
        top: 6,
        textStyle: { color: RUN_COLORS[index % RUN_COLORS.length] },
      },
      tooltip: { trigger: 'item' },
      // A plain legend wraps onto more lines: every class stays visible in the PNG.
      legend: {
        type: 'plain',
        bottom: 4,
        left: 'center',
        width: '94%',
        itemGap: 12,
        itemWidth: 10,
        itemHeight: 10,
        data: byClass.filter((c) => c.data.length > 0).map((c) => c.name),
      },
      grid: { left: 20, right: 20, top: 70, bottom: 92 },
      // UMAP coordinates have no units: no axes, just the points.
      xAxis: { type: 'value', scale: true, show: false },
      yAxis: { type: 'value', scale: true, show: false },
      series: byClass.map((c) => ({ type: 'scatter', name: c.name, data: c.data, symbolSize: 5, itemStyle: { opacity: 0.8 } })),
    },
  };
}
