/**
 * The full tier's share of the export check (tests/export/node.test.ts): the resnet18
 * combinations beyond the fast tier's two (CIFAR stem with 3 channels, ImageNet stem with 1),
 * each exported as tfjs and ONNX and run in Node against ssl-zoo's eval-mode features.
 */
import { tempDir } from '../helpers/run.js';
import { checkExportCase, label, type Case } from './helpers.js';

const CASES: Case[] = [
  { name: 'resnet18', inChannels: 1, imageSize: 32, cifarStem: true },
  { name: 'resnet18', inChannels: 3, imageSize: 64 },
  { name: 'resnet18', inChannels: 3, imageSize: 32, cifarStem: true, norm: 'group' },
  { name: 'resnet18', inChannels: 1, imageSize: 40, norm: 'layer' },
];

describe('export: every other resnet18 stem, channel count and norm (tfjs and ONNX features equal ssl-zoo eval-mode features)', function () {
  this.timeout(600_000);
  const root = tempDir('ssl-zoo-export-');
  const measured: string[] = [];

  after(() => {
    for (const line of measured) console.log(`      ${line}`);
  });

  CASES.forEach((c, i) => {
    it(label(c), async () => {
      measured.push(...(await checkExportCase(c, 20 + i, root)));
    });
  });
});
