/**
 * Regenerates the README's comparison picture (docs/report.png) from finished runs: `ssl-train
 * compare` of the run directories given (default: every run of `npm run bench:zoo` in
 * bench-runs/zoo/), then a full-page screenshot of the report in headless Chromium.
 *
 *   npm run build && node dist/scripts/readme-report.js [RUN_DIR...] [--out docs/report.png]
 */
import { existsSync, mkdirSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { chromium } from 'playwright-core';
import { runCompare } from '../src/cli/compare.js';

const BENCH_RUNS = join('bench-runs', 'zoo');
const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';

async function main(): Promise<void> {
  if (!existsSync(CHROMIUM)) throw new Error(`Chromium is not installed at ${CHROMIUM} (scripts/setup.sh installs it), or set CHROMIUM_PATH`);
  const args = process.argv.slice(2);
  const outAt = args.indexOf('--out');
  const out = outAt >= 0 ? args[outAt + 1] : join('docs', 'report.png');
  let dirs = args.filter((_, i) => outAt < 0 || (i !== outAt && i !== outAt + 1));
  if (dirs.length === 0) {
    dirs = existsSync(BENCH_RUNS) ? readdirSync(BENCH_RUNS).map((m) => join(BENCH_RUNS, m)) : [];
    dirs = dirs.filter((d) => existsSync(join(d, 'checkpoints', 'last.ckpt')));
  }
  if (dirs.length === 0) throw new Error(`no run directories given and no finished run in ${BENCH_RUNS} (npm run bench:zoo makes them)`);
  const report = await runCompare(dirs, { out: join('runs', 'readme-report') });
  const browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: ['--no-sandbox', '--disable-gpu'] });
  try {
    const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
    await page.goto(pathToFileURL(report.html).href);
    await page.waitForTimeout(2000); // the charts animate in
    mkdirSync(join(out, '..'), { recursive: true });
    await page.screenshot({ path: out, fullPage: true });
    process.stderr.write(`readme-report: wrote ${out}\n`);
  } finally {
    await browser.close();
  }
}

main().catch((error: unknown) => {
  process.stderr.write(`${(error as Error).stack ?? String(error)}\n`);
  process.exit(1);
});
