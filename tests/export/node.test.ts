import { strict as assert } from 'node:assert';
import { join } from 'node:path';
import { SingleProcessGroup } from '../../src/core/process-group.js';
import { Rng } from '../../src/core/random.js';
import { tf } from '../../src/core/tf.js';
import { convertSyncBatchNorm, SyncBatchNorm } from '../../src/distributed/sync-batchnorm.js';
import { EXPORT_FORMATS } from '../../src/export/spec.js';
import { mlpHead } from '../../src/methods/heads.js';
import { tempDir } from '../helpers/run.js';
import {
  checkExportCase,
  exportCase,
  images,
  label,
  makeBackbone,
  randomizeNorms,
  reference,
  relativeDiff,
  runOnnx,
  runTfjs,
  TOLERANCE,
  type Case,
} from './helpers.js';

/**
 * Every built-in backbone kind the export must cover: ResNets with and without the CIFAR stem, both channel counts,
 * every norm (the other resnet18 combinations: node-resnet18.full.test.ts).
 */
const CASES: Case[] = [
  { name: 'tiny_resnet', inChannels: 1, imageSize: 28 },
  { name: 'tiny_resnet', inChannels: 3, imageSize: 32 },
  { name: 'tiny_resnet', inChannels: 1, imageSize: 28, norm: 'group' },
  { name: 'tiny_resnet', inChannels: 3, imageSize: 20, norm: 'layer' },
  { name: 'resnet18', inChannels: 3, imageSize: 32, cifarStem: true },
  { name: 'resnet18', inChannels: 1, imageSize: 48 },
  { name: 'mlp', inChannels: 1, imageSize: 16 },
  { name: 'mlp', inChannels: 3, imageSize: 12 },
  { name: 'mlp', inChannels: 3, imageSize: 12, norm: 'group' },
  { name: 'mlp', inChannels: 1, imageSize: 16, norm: 'layer' },
];

/** Largest measured difference per case and format (printed at the end). */
const measured: string[] = [];

describe('export: tfjs (tf.loadLayersModel in Node) and ONNX (onnxruntime-node) features equal ssl-zoo eval-mode features', function () {
  this.timeout(600_000);
  const root = tempDir('ssl-zoo-export-');

  after(() => {
    for (const line of measured) console.log(`      ${line}`);
  });

  CASES.forEach((c, i) => {
    it(label(c), async () => {
      measured.push(...(await checkExportCase(c, 10 + i, root)));
    });
  });

  it('synchronised batch norm exports as inference batch norm (running statistics)', async () => {
    const c: Case = { name: 'tiny_resnet', inChannels: 3, imageSize: 16 };
    const backbone = makeBackbone(c, 3);
    const converted = convertSyncBatchNorm(backbone, new SingleProcessGroup());
    assert.ok(converted > 0 && backbone.namedModules().some(([, m]) => m instanceof SyncBatchNorm));
    backbone.eval();
    const x = images(c);
    try {
      const [expected] = reference(backbone, x, c.inChannels);
      for (const format of EXPORT_FORMATS) {
        const dir = join(root, `sync-${format}`);
        exportCase(c, backbone, format, dir);
        const [actual] = format === 'tfjs' ? await runTfjs(dir, x) : await runOnnx(dir, x);
        const diff = relativeDiff(expected!, actual!);
        measured.push(`tiny_resnet with SyncBatchNorm ${format}: ${diff.toExponential(2)}`);
        assert.ok(diff <= TOLERANCE, `${format}: ${diff}`);
      }
    } finally {
      backbone.dispose();
      x.dispose();
    }
  });

  for (const [what, outputNorm, norm] of [
    ['batch-norm projector with a plain output norm (MoCo v3)', 'plain', 'batch'],
    ['layer-norm projector', 'affine', 'layer'],
  ] as const) {
    it(`--with-projector: ${what} as the second output 'projection'`, async () => {
      const c: Case = { name: 'tiny_resnet', inChannels: 1, imageSize: 16, norm };
      const backbone = makeBackbone(c, 4);
      const projector = mlpHead([backbone.featureDim, 48, 24], { rng: new Rng(9), norm, outputNorm });
      randomizeNorms(projector, 8);
      projector.eval();
      const x = images(c);
      try {
        const expected = reference(backbone, x, c.inChannels, projector);
        for (const format of EXPORT_FORMATS) {
          const dir = join(root, `projector-${norm}-${format}`);
          exportCase(c, backbone, format, dir, projector);
          const actual = format === 'tfjs' ? await runTfjs(dir, x) : await runOnnx(dir, x);
          assert.equal(actual.length, 2, 'features and projection');
          const diffs = expected.map((e, k) => relativeDiff(e, actual[k]!));
          measured.push(`projector (${norm}) ${format}: features ${diffs[0]!.toExponential(2)}, projection ${diffs[1]!.toExponential(2)}`);
          for (const d of diffs) assert.ok(d <= TOLERANCE, `${format}: ${d}`);
          assert.equal(actual[1]!.length, x.shape[0] * 24);
        }
      } finally {
        backbone.dispose();
        projector.dispose();
        x.dispose();
      }
    });
  }

  it('the comparison is sensitive: a batch norm epsilon changed after export makes the features differ', async () => {
    const c: Case = { name: 'tiny_resnet', inChannels: 1, imageSize: 16 };
    const backbone = makeBackbone(c, 6);
    // A small running variance makes epsilon matter.
    const bn = backbone.namedModules().find(([name]) => name === 'layer3.bn2')![1] as unknown as { runningVar: tf.Variable; eps: number };
    bn.runningVar.assign(tf.fill([128], 1e-4));
    const x = images(c);
    try {
      const dir = join(root, 'eps');
      exportCase(c, backbone, 'onnx', dir);
      (bn as { eps: number }).eps = 1e-3;
      const [expected] = reference(backbone, x, c.inChannels);
      const [actual] = await runOnnx(dir, x);
      assert.ok(relativeDiff(expected!, actual!) > 1e-2, 'the exported model (eps 1e-5) must differ from the model with eps 1e-3');
    } finally {
      backbone.dispose();
      x.dispose();
    }
  });
});
