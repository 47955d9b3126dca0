import { existsSync, mkdirSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { atPath, UserError } from '../core/errors.js';
import { embeddingChart, metricCharts, type ChartSpec } from './charts.js';
import { computeEmbedding } from './embedding.js';
import { renderChartPng, reportHtml, type ReportModel } from './render.js';
import { loadReportRuns } from './run-data.js';

/** Options of {@link writeComparisonReport}. */
export interface ComparisonOptions {
  /** Output directory (created): `report.html` and one PNG per chart. */
  out: string;
  /** Validation points per embedding map (default 1000). */
  points?: number;
  /** Compute the embedding maps (rebuilds each method and loads its last checkpoint; default true). */
  embeddings?: boolean;
  title?: string;
  /** Progress and warnings, one line each (default: none). */
  log?: (line: string) => void;
}

/** What {@link writeComparisonReport} wrote. */
export interface ComparisonReport {
  html: string;
  /** The PNG files, one per chart, in report order. */
  pngs: string[];
  /** Embedding maps that could not be made, and why. */
  notes: string[];
}

/**
 * Compares runs side by side: reads each run directory (every problem with one is a user
 * error, raised before any work), draws loss, kNN and linear accuracy and throughput
 * charts, embeds each run's validation features in 2-D (UMAP) from its final checkpoint,
 * and writes `report.html` (self-contained: open it from disk, no network) and the charts
 * as PNG files into `out`.
 */
export async function writeComparisonReport(runDirs: string[], options: ComparisonOptions): Promise<ComparisonReport> {
  const points = options.points ?? 1000;
  if (!Number.isInteger(points) || points < 10) throw new UserError(`--points: ${JSON.stringify(points)} is not allowed; expected an integer >= 10`);
  const runs = loadReportRuns(runDirs);
  if (existsSync(options.out) && !statSync(options.out).isDirectory()) throw new UserError(`--out: ${options.out} exists and is not a directory`);
  mkdirSync(options.out, { recursive: true });
  const log = options.log ?? (() => undefined);

  const charts = metricCharts(runs);
  const embeddings: ReportModel['embeddings'] = [];
  const notes: string[] = [];
  if (options.embeddings !== false) {
    for (const [i, run] of runs.entries()) {
      log(`embedding ${run.label} (${run.method}, ${run.backbone}) ...`);
      try {
        embeddings.push({ run, chart: embeddingChart(run, i, await computeEmbedding(run, { points })) });
      } catch (e) {
        if (!(e instanceof UserError)) throw e;
        const note = `${run.label}: no embedding map: ${e.message}`;
        notes.push(note);
        log(`warning: ${note}`);
        embeddings.push({ run, note: e.message });
      }
    }
  }
  const all: ChartSpec[] = [...charts, ...embeddings.flatMap((e) => (e.chart ? [e.chart] : []))];
  const pngs = all.map((spec) => {
    const path = join(options.out, spec.file);
    const png = renderChartPng(spec);
    atPath(path, 'writing', () => writeFileSync(path, png));
    return path;
  });
  const html = join(options.out, 'report.html');
  const title = options.title ?? `ssl-zoo: ${[...new Set(runs.map((r) => r.method))].join(' vs ')}`;
  const page = reportHtml({ title, generatedAt: new Date().toISOString().replace('T', ' ').slice(0, 19) + ' UTC', runs, charts, embeddings });
  atPath(html, 'writing', () => writeFileSync(html, page));
  return { html, pngs, notes };
}
