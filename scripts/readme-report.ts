/**
 * Regenerates the README's comparison picture (docs/report.png): SimCLR, Barlow Twins and
 * BYOL trained with the quickstart's budget (configs/quickstart.yaml: 2 epochs over a seeded
 * 15,360-image sample of Fashion-MNIST, random-init baseline at step 0) and each method's
 * Fashion-MNIST recipe, then `ssl-train compare`, then a full-page screenshot of the report
 * in headless Chromium. About 10 minutes on 2 cores.
 *
 *   npm run build && node dist/scripts/readme-report.js [--out docs/report.png]
 */
import { existsSync, mkdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { chromium } from 'playwright-core';
import { runCompare } from '../src/cli/compare.js';
import { buildConfig, readConfigFile } from '../src/experiment/config.js';
import { runTraining } from '../src/experiment/train.js';

const METHODS = ['simclr', 'barlow_twins', 'byol'];
const ROOT = join('runs', 'readme-report');
const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';

function outPath(): string {
  const i = process.argv.indexOf('--out');
  return i >= 0 && process.argv[i + 1] ? process.argv[i + 1] : join('docs', 'report.png');
}

async function main(): Promise<void> {
  if (!existsSync(CHROMIUM)) throw new Error(`Chromium is not installed at ${CHROMIUM} (scripts/setup.sh installs it), or set CHROMIUM_PATH`);
  const quickstart = readConfigFile(join('configs', 'quickstart.yaml'));
  const budget = {
    dataset: quickstart.dataset,
    trainSamples: quickstart.trainSamples,
    epochs: quickstart.epochs,
    warmupEpochs: quickstart.warmupEpochs,
    valAtStart: true,
    knnTrainSamples: quickstart.knnTrainSamples,
    valSamples: quickstart.valSamples,
    logEvery: 5,
  };
  rmSync(ROOT, { recursive: true, force: true });
  const dirs: string[] = [];
  for (const method of METHODS) {
    const runDir = join(ROOT, method);
    process.stderr.write(`readme-report: training ${method}\n`);
    await runTraining(buildConfig({ ...readConfigFile(join('configs', `${method}-fashion-mnist.yaml`)), ...budget, runDir }));
    dirs.push(runDir);
  }
  const report = await runCompare(dirs, {
    out: join(ROOT, 'report'),
    title: 'SimCLR vs Barlow Twins vs BYOL (tiny_resnet, Fashion-MNIST, the quickstart budget: 2 epochs over 15,360 images)',
  });
  const browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: ['--no-sandbox', '--disable-gpu'] });
  try {
    const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
    await page.goto(pathToFileURL(report.html).href);
    await page.waitForTimeout(2000); // the charts animate in
    const out = outPath();
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
