import 'reflect-metadata';
import { strict as assert } from 'node:assert';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { buildConfig } from '../../src/experiment/config.js';
import { runTraining } from '../../src/experiment/train.js';
import { RUN_COLORS } from '../../src/report/charts.js';
import { writeComparisonReport, type ComparisonReport } from '../../src/report/report.js';
import { tempDir } from '../helpers/run.js';
import { TINY } from '../tracking/helpers.js';
import { countNear, launchChromium, pixelStats } from './browser.js';

const METHODS = [
  ['simclr', {}],
  ['barlow_twins', {}],
  ['byol', { predHiddenDim: 32 }],
] as const;

/** The chart specs embedded in a report (id and ECharts option). */
function embeddedSpecs(
  html: string,
): Array<{ id: string; option: { series: Array<{ type: string; data: unknown[]; name: string }>; title: { subtext: string } } }> {
  const match = /<script type="application\/json" id="report-charts">([\s\S]*?)<\/script>/.exec(html);
  assert.ok(match, 'chart data in the report');
  return JSON.parse(match[1]);
}

describe('ssl-train compare: the comparison report', function () {
  this.timeout(600_000);
  const root = tempDir('ssl-zoo-compare-');
  const dirs = METHODS.map(([method]) => join(root, method));
  const out = join(root, 'report');
  let report: ComparisonReport;

  before(async () => {
    for (const [i, [method, args]] of METHODS.entries()) {
      await runTraining(buildConfig({ ...TINY, method, runDir: dirs[i], methodArgs: { ...(TINY.methodArgs as Record<string, number>), ...args } }), {
        callbacks: [],
      });
    }
    report = await writeComparisonReport(dirs, { out, points: 50 });
  });

  it('writes report.html and one non-blank PNG per chart; each metric chart draws every run', () => {
    assert.equal(report.html, join(out, 'report.html'));
    assert.deepEqual(report.notes, []);
    const names = report.pngs.map((p) => p.slice(out.length + 1));
    assert.deepEqual(names, [
      'loss.png',
      'knn-accuracy.png',
      'linear-accuracy.png',
      'throughput.png',
      'embedding-simclr.png',
      'embedding-barlow-twins.png',
      'embedding-byol.png',
    ]);
    for (const png of report.pngs) {
      assert.ok(existsSync(png), png);
      const stats = pixelStats(png);
      assert.ok(stats.width >= 800 && stats.height >= 800, `${png}: ${stats.width}x${stats.height}`);
      assert.ok(stats.inked > 0.01, `${png} is blank (${(100 * stats.inked).toFixed(2)}% inked)`);
      assert.ok(stats.colors.size > 20, `${png}: only ${stats.colors.size} colours`);
    }
    for (const png of report.pngs.slice(0, 4)) {
      const stats = pixelStats(png);
      RUN_COLORS.slice(0, 3).forEach((color, i) => assert.ok(countNear(stats, color) > 50, `${png}: no line of run ${i} (${color})`));
    }
  });

  it("embeds each run's final checkpoint: a bounded number of validation points, coloured by class", () => {
    const specs = embeddedSpecs(readFileSync(report.html, 'utf8'));
    const maps = specs.filter((s) => s.id.startsWith('chart-embedding-'));
    assert.equal(maps.length, 3);
    for (const map of maps) {
      const points = map.option.series.reduce((n, s) => n + s.data.length, 0);
      assert.equal(points, 50, 'points = --points (the validation split has 64)');
      assert.ok(map.option.series.filter((s) => s.data.length > 0).length >= 5, 'several classes');
      assert.match(map.option.title.subtext, /^UMAP · 50 val. images · step 16 · kNN top-1 \d+\.\d%$/);
    }
  });

  it('renders in headless Chromium from disk, offline: every chart draws, no console errors, no network', async () => {
    const browser = await launchChromium();
    try {
      const page = await browser.context.newPage();
      const errors: string[] = [];
      const requests: string[] = [];
      page.on('console', (m) => {
        if (m.type() === 'error') errors.push(m.text());
      });
      page.on('pageerror', (e) => errors.push(String(e)));
      page.on('request', (r) => requests.push(r.url()));
      await page.goto(pathToFileURL(report.html).href);
      await page.waitForSelector('body[data-charts-ready="true"]', { timeout: 60_000 });
      assert.deepEqual(errors, [], 'console errors');
      assert.deepEqual(requests, [pathToFileURL(report.html).href], 'the report loads nothing else');

      const ids = embeddedSpecs(readFileSync(report.html, 'utf8')).map((s) => s.id);
      assert.equal(ids.length, 7);
      for (const [i, id] of ids.entries()) {
        const chart = page.locator(`#${id}`);
        assert.equal(await chart.locator('canvas').count(), 1, `${id} has its canvas`);
        const stats = pixelStats(await chart.screenshot());
        assert.ok(stats.inked > 0.01, `${id} drew nothing (${(100 * stats.inked).toFixed(2)}% inked)`);
        if (i < 4) RUN_COLORS.slice(0, 3).forEach((color, r) => assert.ok(countNear(stats, color, 10) > 20, `${id}: no line of run ${r}`));
      }
      const rows = await page.locator('#runs-table tbody tr').allTextContents();
      assert.equal(rows.length, 3);
      METHODS.forEach(([method], i) => assert.ok(rows[i].includes(method), `table row ${i}: ${rows[i]}`));
      assert.ok(
        rows.every((r) => /success/.test(r) && /2 \/ 2/.test(r) && /%/.test(r)),
        rows.join('\n'),
      );
      const page1 = await page.screenshot({ fullPage: true });
      assert.ok(pixelStats(page1).inked > 0.05);
    } finally {
      await browser.close();
    }
  });
});
