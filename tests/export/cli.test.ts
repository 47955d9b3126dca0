import 'reflect-metadata';
import { strict as assert } from 'node:assert';
import { copyFileSync, existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { createBackbone } from '../../src/backbones/index.js';
import { Rng } from '../../src/core/random.js';
import { tf } from '../../src/core/tf.js';
import { evalTransform } from '../../src/data/augment/recipes.js';
import { buildConfig } from '../../src/experiment/config.js';
import { prepareExperiment } from '../../src/experiment/experiment.js';
import { readExportedBackbone } from '../../src/export/read.js';
import type { ExportedSpec } from '../../src/export/spec.js';
import { mlpHead } from '../../src/methods/heads.js';
import { loadCheckpoint, withoutPrefix } from '../../src/trainer/checkpoint.js';
import { main } from '../../src/cli/main.js';
import { runCli, tempDir } from '../helpers/run.js';
import { relativeDiff, runOnnx, runTfjs, TOLERANCE } from './helpers.js';

/** A tiny run: tiny_resnet on 16x16 synthetic images, one epoch. */
const RUN = {
  method: 'simclr',
  backbone: 'tiny_resnet',
  dataset: 'synthetic',
  imageSize: 16,
  syntheticSize: 128,
  batchSize: 32,
  epochs: 1,
  workers: 0,
  valEvery: 0,
  methodArgs: { projHiddenDim: 32, projOutputDim: 16 },
};
const RUN_FLAGS = ['--method', 'simclr', '--backbone', 'tiny_resnet', '--dataset', 'synthetic', '--image-size', '16', '--synthetic-size', '128'];
const MORE_FLAGS = [
  '--batch-size',
  '32',
  '--epochs',
  '1',
  '--workers',
  '0',
  '--val-every',
  '0',
  '--method-arg',
  'projHiddenDim=32',
  '--method-arg',
  'projOutputDim=16',
];

/** The exit code and the lines of stderr of `ssl-train export ...` (a child process). */
function exportCli(args: string[]): { status: number | null; stdout: string; lines: string[] } {
  const r = runCli(['export', ...args]);
  return { status: r.status, stdout: r.stdout, lines: r.stderr.split('\n').filter((l) => l.trim() !== '') };
}

/** The same in this process (the CLI's `main`, stderr captured): seconds faster per call than a child process. */
async function exportInProcess(args: string[]): Promise<{ status: number; lines: string[] }> {
  const written: string[] = [];
  const write = process.stderr.write.bind(process.stderr);
  const stdout = process.stdout.write.bind(process.stdout);
  process.stderr.write = ((chunk: string | Uint8Array) => written.push(String(chunk)) > 0) as typeof process.stderr.write;
  process.stdout.write = (() => true) as typeof process.stdout.write;
  try {
    const status = await main(['export', ...args]);
    return {
      status,
      lines: written
        .join('')
        .split('\n')
        .filter((l) => l.trim() !== ''),
    };
  } finally {
    process.stderr.write = write;
    process.stdout.write = stdout;
  }
}

function assertOneLineError(r: { status: number | null; lines: string[] }, pattern: RegExp): void {
  assert.equal(r.status, 2, r.lines.join('\n'));
  assert.equal(r.lines.length, 1, `one line, got:\n${r.lines.join('\n')}`);
  assert.match(r.lines[0]!, /^ssl-train: error: /);
  assert.match(r.lines[0]!, pattern);
}

describe('ssl-train export: end to end from a trained run', function () {
  this.timeout(600_000);
  const root = tempDir('ssl-zoo-export-cli-');
  const run = join(root, 'run');

  before(() => {
    const r = runCli([...RUN_FLAGS, ...MORE_FLAGS, '--run-dir', run], 300_000);
    assert.equal(r.status, 0, r.stderr);
  });

  it('exports tfjs and ONNX models whose features equal the checkpoint backbone, and reads the tfjs export back', async () => {
    const experiment = prepareExperiment(buildConfig(RUN));
    const { mean, std } = evalTransform(experiment.train);
    const checkpoint = loadCheckpoint(join(run, 'checkpoints', 'last.ckpt'));
    const backbone = createBackbone('tiny_resnet', { inChannels: 1, imageSize: 16, cifarStem: experiment.cifarStem, rng: new Rng(0) });
    const projector = mlpHead([128, 32, 16], { rng: new Rng(0), norm: 'batch', hiddenNorm: false });
    backbone.loadStateDict(withoutPrefix(checkpoint.tensors, 'model/backbone.'));
    projector.loadStateDict(withoutPrefix(checkpoint.tensors, 'model/projector.'));
    backbone.eval();
    projector.eval();
    const x = tf.tidy(() => tf.randomUniform([4, 16, 16, 1], 0, 1, 'float32', 3) as tf.Tensor4D);
    const [features, projection] = tf.tidy(() => {
      const f = backbone.forward(tf.div(tf.sub(x, tf.tensor1d(mean)), tf.tensor1d(std)));
      return [f.dataSync() as Float32Array, projector.forward(f).dataSync() as Float32Array];
    });
    try {
      for (const format of ['tfjs', 'onnx']) {
        const out = join(root, `export-${format}`);
        const r = exportCli([run, '--format', format, '--out', out, '--with-projector']);
        assert.equal(r.status, 0, r.lines.join('\n'));
        assert.deepEqual(
          JSON.parse(r.stdout).files,
          format === 'tfjs' ? ['model.json', 'group1-shard1of1.bin', 'ssl-zoo.json'] : ['model.onnx', 'ssl-zoo.json'],
        );
        const spec = JSON.parse(readFileSync(join(out, 'ssl-zoo.json'), 'utf8')) as ExportedSpec;
        assert.equal(spec.backbone, 'tiny_resnet');
        assert.equal(spec.inChannels, 1);
        assert.equal(spec.imageSize, 16);
        assert.equal(spec.featureDim, 128);
        assert.equal(spec.projectionDim, 16);
        assert.deepEqual(spec.normalization, { mean, std });
        assert.deepEqual(spec.input, { name: 'images', layout: format === 'onnx' ? 'NCHW' : 'NHWC', range: [0, 1] });
        assert.equal(spec.source?.checkpoint, 'last.ckpt');
        assert.equal(spec.source?.step, 4);
        const actual = format === 'tfjs' ? await runTfjs(out, x) : await runOnnx(out, x);
        assert.ok(relativeDiff(features, actual[0]!) <= TOLERANCE, `${format} features`);
        assert.ok(relativeDiff(projection, actual[1]!) <= TOLERANCE, `${format} projection`);
        assert.deepEqual(
          readdirSync(dirname(out)).filter((n) => n.includes('.tmp-') || n.includes('.old-')),
          [],
          'no temporary directory left',
        );
      }
      const modelJson = JSON.parse(readFileSync(join(root, 'export-tfjs', 'model.json'), 'utf8'));
      assert.equal(modelJson.userDefinedMetadata.sslZoo.backbone, 'tiny_resnet');

      // readExportedBackbone: the same tensors as the checkpoint, so a rebuilt backbone computes the same features exactly.
      const read = readExportedBackbone(join(root, 'export-tfjs'));
      const rebuilt = createBackbone(read.spec.backbone, { ...read.spec, rng: new Rng(1) });
      try {
        rebuilt.loadStateDict(read.tensors);
        for (const [name, v] of Object.entries(backbone.stateDict())) assert.deepEqual(read.tensors[name]!.dataSync(), v.dataSync(), name);
        assert.ok(read.projector && Object.keys(read.projector).length === Object.keys(projector.stateDict()).length);
        rebuilt.eval();
        const again = tf.tidy(() => rebuilt.forward(tf.div(tf.sub(x, tf.tensor1d(mean)), tf.tensor1d(std))).dataSync());
        assert.deepEqual(again, features);
      } finally {
        rebuilt.dispose();
        tf.dispose([...Object.values(read.tensors), ...Object.values(read.projector ?? {})]);
      }
    } finally {
      tf.dispose([...Object.values(checkpoint.tensors), x]);
      backbone.dispose();
      projector.dispose();
    }
  });

  it('a tfjs export serves as --pretrained: knn on it equals knn on the run; an ONNX export is refused with one line', () => {
    const knn = (source: string[]) => runCli(['knn', ...source, '--k', '5,20', '--synthetic-size', '128', '--batch-size', '64']);
    const rows = (stdout: string) => stdout.split('\n').filter((l) => l.startsWith('{'));
    const fromRun = knn([run]);
    const fromExport = knn(['--pretrained', join(root, 'export-tfjs')]);
    assert.equal(fromRun.status, 0, fromRun.stderr);
    assert.equal(fromExport.status, 0, fromExport.stderr);
    assert.equal(rows(fromRun.stdout).length, 2);
    assert.deepEqual(rows(fromExport.stdout), rows(fromRun.stdout));
    const onnx = knn(['--pretrained', join(root, 'export-onnx')]);
    assert.equal(onnx.status, 2);
    assert.equal(
      onnx.stderr.trim(),
      `ssl-train: error: --pretrained: ${join(root, 'export-onnx')} is not a TensorFlow.js export (no model.json); only --format tfjs exports can be read back as weights`,
    );
  });

  it('--force replaces a non-empty --out; without it the directory is left as it was', async () => {
    const out = join(root, 'occupied');
    mkdirSync(out);
    writeFileSync(join(out, 'mine.txt'), 'keep');
    assertOneLineError(await exportInProcess([run, '--format', 'onnx', '--out', out]), /--out: .*occupied exists and is not empty; pass --force to replace it/);
    assert.deepEqual(readdirSync(out), ['mine.txt']);
    const r = await exportInProcess([run, '--format', 'onnx', '--out', out, '--force']);
    assert.equal(r.status, 0, r.lines.join('\n'));
    assert.deepEqual(readdirSync(out).sort(), ['model.onnx', 'ssl-zoo.json']);
  });

  describe('bad input: one line naming the flag or value, exit 2, nothing written', () => {
    const cases: Array<[string, () => string[], RegExp]> = [
      ['missing run directory', () => [join(root, 'nowhere'), '--format', 'tfjs', '--out', join(root, 'o1')], /export: run directory .*nowhere does not exist/],
      ['unknown --format', () => [run, '--format', 'keras', '--out', join(root, 'o2')], /--format: "keras" is not allowed; expected tfjs \| onnx/],
      ['no --format', () => [run, '--out', join(root, 'o3')], /--format: missing; expected tfjs \| onnx/],
      ['no --out', () => [run, '--format', 'onnx'], /--out: missing/],
      [
        'a run without checkpoints',
        () => {
          const bare = join(root, 'bare-run');
          mkdirSync(bare, { recursive: true });
          copyFileSync(join(run, 'config.json'), join(bare, 'config.json'));
          return [bare, '--format', 'onnx', '--out', join(root, 'o4')];
        },
        /export: cannot export .*bare-run: it has no checkpoint \(checkpoints\/\*\.ckpt\)/,
      ],
      ['a directory that is not a run', () => [root, '--format', 'onnx', '--out', join(root, 'o5')], /is not a run directory \(no config.json\)/],
    ];
    for (const [what, args, pattern] of cases) {
      it(what, async () => {
        const argv = args();
        assertOneLineError(await exportInProcess(argv), pattern);
        const out = argv[argv.indexOf('--out') + 1];
        if (argv.includes('--out')) assert.ok(!existsSync(out!), `${out} must not be created`);
        assert.deepEqual(
          readdirSync(root).filter((n) => n.includes('.tmp-')),
          [],
          'no temporary directory left',
        );
      });
    }
  });
});
