import { strict as assert } from 'node:assert';
import { join } from 'node:path';
import type { BrowserContext } from 'playwright-core';
import { tempDir } from '../helpers/run.js';
import { launchChromium } from '../report/browser.js';
import { exportCase, images, label, makeBackbone, reference, relativeDiff, serve, TFJS_BUNDLES, TOLERANCE, type Case } from './helpers.js';

const CASES: Case[] = [
  { name: 'tiny_resnet', inChannels: 1, imageSize: 28 },
  { name: 'tiny_resnet', inChannels: 3, imageSize: 32, norm: 'group' },
  { name: 'resnet18', inChannels: 3, imageSize: 32, cifarStem: true },
  { name: 'resnet18', inChannels: 1, imageSize: 48 },
  { name: 'mlp', inChannels: 3, imageSize: 12 },
];

/** What the page computes: the exported model's features, and the tfjs backend it ran on. */
interface PageResult {
  features: number[];
  backend: string;
}

describe('export: the tfjs model in headless Chromium (tf.loadLayersModel over http) gives ssl-zoo features', function () {
  this.timeout(600_000);
  const root = tempDir('ssl-zoo-export-browser-');
  let browser: { context: BrowserContext; close: () => Promise<void> };
  const measured: string[] = [];

  before(async () => {
    browser = await launchChromium();
  });
  after(async () => {
    await browser?.close();
    for (const line of measured) console.log(`      ${line}`);
  });

  CASES.forEach((c, i) => {
    it(label(c), async () => {
      const backbone = makeBackbone(c, 30 + i);
      const x = images(c);
      const dir = join(root, `case-${i}`);
      const server = await serve(dir);
      const page = await browser.context.newPage();
      try {
        const [expected] = reference(backbone, x, c.inChannels);
        exportCase(c, backbone, 'tfjs', dir);
        await page.goto(`${server.url}/`);
        for (const bundle of TFJS_BUNDLES) await page.addScriptTag({ url: `${server.url}/tfjs/${bundle}` });
        const input = { url: `${server.url}/model/model.json`, data: Array.from(x.dataSync()), shape: x.shape };
        const result: PageResult = await page.evaluate(async ({ url, data, shape }) => {
          // Runs in the page: `tf` is the global of the tfjs bundles.
          const tf = (globalThis as unknown as { tf: typeof import('@tensorflow/tfjs-layers') & typeof import('@tensorflow/tfjs-core') }).tf;
          await tf.setBackend('cpu');
          const model = await tf.loadLayersModel(url);
          const y = model.predict(tf.tensor4d(data, shape as [number, number, number, number])) as import('@tensorflow/tfjs-core').Tensor;
          return { features: Array.from(await y.data()), backend: tf.getBackend() };
        }, input);
        assert.equal(result.backend, 'cpu');
        const diff = relativeDiff(expected!, Float32Array.from(result.features));
        measured.push(`${label(c)} Chromium: max relative difference ${diff.toExponential(2)}`);
        assert.ok(diff <= TOLERANCE, `features differ by ${diff} (relative to the largest feature) > ${TOLERANCE}`);
      } finally {
        await page.close();
        await server.close();
        backbone.dispose();
        x.dispose();
      }
    });
  });
});
