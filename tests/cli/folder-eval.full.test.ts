import { strict as assert } from 'node:assert';
import { cpSync, existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { tf } from '../../src/core/tf.js';
import { evalTransform } from '../../src/data/augment/index.js';
import { subset, type ImageDataset } from '../../src/data/dataset.js';
import { loadFashionMnist } from '../../src/data/index.js';
import { extractFeatures } from '../../src/eval/features.js';
import { knnSweep } from '../../src/eval/knn.js';
import { prepareEvalModel } from '../../src/experiment/eval-model.js';
import { resolvePretrained } from '../../src/experiment/pretrained.js';
import { loadCheckpoint, withoutPrefix } from '../../src/trainer/checkpoint.js';
import { writePngFolderCopy } from '../helpers/image-folder.js';
import { readNpy } from '../helpers/npy.js';
import { runCli, tempDir } from '../helpers/run.js';

const dir = tempDir('ssl-zoo-folder-eval-cli-');
const run = join(dir, 'pretrain');
/** Images per forward pass, in the commands and the reference (the rounding of a matrix product depends on its rows). */
const BATCH = 16;
const range = (from: number, to: number) => Array.from({ length: to - from }, (_, i) => from + i);

function json(line: string): Record<string, unknown> {
  return JSON.parse(line) as Record<string, unknown>;
}

/** The JSON lines of stdout. */
function jsonLines(stdout: string): Array<Record<string, unknown>> {
  return stdout
    .trim()
    .split('\n')
    .filter((l) => l.startsWith('{'))
    .map(json);
}

/** The backbone tensors of a checkpoint as plain arrays. */
function backboneOf(checkpoint: string): Record<string, number[]> {
  const { tensors } = loadCheckpoint(checkpoint);
  const backbone = Object.fromEntries(Object.entries(withoutPrefix(tensors, 'model/backbone.')).map(([name, t]) => [name, Array.from(t.dataSync())]));
  tf.dispose(Object.values(tensors));
  return backbone;
}

/** The `ssl-train: error:` line of a command that must fail with exit 2 and nothing else on stderr. */
function userError(args: string[]): string {
  const r = runCli(args);
  assert.equal(r.status, 2, r.stderr);
  const lines = r.stderr.trim().split('\n');
  assert.equal(lines.length, 1, r.stderr);
  return lines[0];
}

describe('ssl-train linear / knn / embed on --dataset folder', function () {
  this.timeout(180_000);
  // 4 classes: 8 training PNGs each in train/, 3 validation PNGs each in val/, and the same images in memory.
  let train: ImageDataset;
  let val: ImageDataset;
  /** The pre-trained backbone's `[N, F]` features of the in-memory copies (eval view, the training folder's normalisation). */
  let reference: { train: Float32Array; val: Float32Array; dim: number };

  before(async () => {
    const fmnist = loadFashionMnist('test');
    train = await writePngFolderCopy(subset(fmnist, range(0, 1000)), join(dir, 'train'), 8, 4);
    val = await writePngFolderCopy(subset(fmnist, range(1000, 2000)), join(dir, 'val'), 3, 4);
    const pretrain = runCli([
      ...['--dataset', 'folder', '--data-dir', join(dir, 'train'), '--val-dir', join(dir, 'val'), '--image-size', '28', '--backbone', 'mlp'],
      ...['--batch-size', '8', '--epochs', '1', '--workers', '0', '--method-arg', 'projHiddenDim=32', '--method-arg', 'projOutputDim=16', '--run-dir', run],
    ]);
    assert.equal(pretrain.status, 0, pretrain.stderr);
    const model = await prepareEvalModel({ kind: 'pretrained', source: resolvePretrained(run, 'RUN_DIR') }, {}, 'RUN_DIR');
    const features = (ds: ImageDataset) => {
      const { features: f, logits } = extractFeatures(model.method, ds, evalTransform(train), BATCH);
      const values = f.dataSync() as Float32Array;
      tf.dispose([f, logits]);
      return values;
    };
    reference = { train: features(train), val: features(val), dim: model.method.backbone.featureDim };
    model.method.dispose();
  });

  it('knn: the validation folder against the training folder, as computed on the same images in memory', () => {
    const { status, stdout, stderr } = runCli(['knn', run, '--k', '1,5', '--distance', 'cosine,euclidean', '--batch-size', String(BATCH)]);
    assert.equal(status, 0, stderr);
    assert.equal(stderr, '');
    const memory = tf.tensor2d(reference.train, [train.length, reference.dim]);
    const queries = tf.tensor2d(reference.val, [val.length, reference.dim]);
    const expected = knnSweep(memory, train.labels, queries, val.labels, {
      ks: [1, 5],
      temperatures: [0.07],
      distances: ['cosine', 'euclidean'],
      numClasses: 4,
    });
    tf.dispose([memory, queries]);
    assert.deepEqual(jsonLines(stdout), JSON.parse(JSON.stringify(expected)));
    // 1-NN of the training images among themselves would be 100%: the queries are the validation folder.
    assert.ok(expected[0].top1 < 1, `1-NN top-1 ${expected[0].top1}`);
  });

  it('embed: the features and labels of either split; --unlabelled writes features only', () => {
    for (const [split, memory, features] of [
      ['train', train, reference.train],
      ['test', val, reference.val],
    ] as const) {
      const out = join(dir, `${split}.npy`);
      const { status, stdout, stderr } = runCli(['embed', run, '--split', split, '--batch-size', String(BATCH), '--out', out]);
      assert.equal(status, 0, stderr);
      assert.deepEqual(json(stdout.trim()), { features: out, labels: join(dir, `${split}.labels.npy`), shape: [memory.length, reference.dim] });
      assert.deepEqual(readNpy(out).values, features, `${split}: the pre-trained features of the same images`);
      assert.deepEqual(readNpy(join(dir, `${split}.labels.npy`)).values, memory.labels);
    }
    // The same training folder read as unlabelled: all of its images, no labels (the default split is then train).
    const out = join(dir, 'unlabelled.npy');
    const { status, stdout, stderr } = runCli(['embed', run, '--unlabelled', '--batch-size', String(BATCH), '--out', out]);
    assert.equal(status, 0, stderr);
    assert.deepEqual(json(stdout.trim()), { features: out, shape: [train.length, reference.dim] });
    assert.deepEqual(readNpy(out).values, reference.train);
    assert.ok(!existsSync(join(dir, 'unlabelled.labels.npy')));
  });

  it('linear: precomputed features, crop-flip views and fine-tuning each train on the folder in a run directory of their own', () => {
    const source = backboneOf(join(run, 'checkpoints', 'last.ckpt'));
    for (const [name, flags, precomputed, backboneChanges] of [
      ['precomputed', [], true, false],
      ['crop-flip', ['--augmentation', 'crop-flip'], false, false],
      ['finetune', ['--finetune'], false, true],
    ] as const) {
      const runDir = join(dir, `linear-${name}`);
      const { status, stdout, stderr } = runCli(['linear', run, '--epochs', '2', '--batch-size', '8', ...flags, '--run-dir', runDir]);
      assert.equal(status, 0, stderr);
      assert.equal(json(stdout.trim().split('\n').at(-1)!).epochs, 2);
      const config = json(readFileSync(join(runDir, 'config.json'), 'utf8'));
      assert.deepEqual([config.dataset, config.precomputedFeatures, config.trainSize, config.valSize], ['folder', precomputed, 32, 12], name);
      const summary = json(readFileSync(join(runDir, 'summary.json'), 'utf8'));
      assert.equal(summary.status, 'success');
      const rows = readFileSync(join(runDir, 'metrics.jsonl'), 'utf8').trim().split('\n').map(json);
      assert.deepEqual(
        rows.filter((r) => r['val/acc1'] !== undefined).map((r) => r.epoch),
        [0, 1],
      );
      const after = backboneOf(join(runDir, 'checkpoints', 'last.ckpt'));
      assert.equal(
        Object.keys(source).some((k) => source[k].some((v, i) => v !== after[k][i])),
        backboneChanges,
        `${name}: the backbone ${backboneChanges ? 'is' : 'is not'} trained`,
      );
    }
  });

  it('a file skipped by name and a corrupt one: one warning each, as in training', () => {
    const bad = join(dir, 'train-bad');
    cpSync(join(dir, 'train'), bad, { recursive: true });
    writeFileSync(join(bad, 'notes.txt'), 'not an image');
    const corrupt = join(bad, 'Dress', readdirSync(join(bad, 'Dress')).sort()[3]);
    writeFileSync(corrupt, readFileSync(corrupt).subarray(0, 60));
    const { status, stderr } = runCli(['knn', run, '--data-dir', bad, '--val-dir', join(dir, 'val')]);
    assert.equal(status, 0, stderr);
    const lines = stderr.trim().split('\n');
    assert.equal(lines.length, 2, stderr);
    assert.equal(lines[0], `ssl-train: warning: skipping ${join(bad, 'notes.txt')}: not an image (.jpg, .jpeg, .png, .webp)`);
    assert.ok(lines[1].startsWith(`ssl-train: warning: skipping ${corrupt}: `), lines[1]);
    assert.match(lines[1], / \(unreadable files so far: 1\)$/);
  });

  it('bad input: one line naming the flag, exit 2, nothing written', () => {
    const linearDir = join(dir, 'never');
    assert.match(userError(['knn', run, '--unlabelled']), /^ssl-train: error: --unlabelled: knn needs labels and the folder .*train is read without them/);
    assert.match(userError(['linear', run, '--unlabelled', '--run-dir', linearDir]), /^ssl-train: error: --unlabelled: linear needs labels/);
    assert.ok(!existsSync(linearDir));
    const out = join(dir, 'never.npy');
    assert.match(
      userError(['embed', run, '--unlabelled', '--split', 'test', '--out', out]),
      /^ssl-train: error: --split: "test" is not allowed; expected train with --unlabelled \(an unlabelled folder has no validation split/,
    );
    assert.ok(!existsSync(out));
    assert.match(
      userError(['knn', run, '--image-size', '32']),
      /^ssl-train: error: --image-size: 32 is not allowed; expected 28, the image size the backbone of .*pretrain was trained on$/,
    );
    assert.match(userError(['knn', run, '--channels', '3']), /^ssl-train: error: --channels: 3 is not allowed; expected 1, the channels the backbone of/);
    assert.match(userError(['knn', run, '--data-dir', join(dir, 'missing')]), /^ssl-train: error: --data-dir: folder .*missing does not exist$/);
    assert.match(
      userError(['knn', run, '--dataset', 'synthetic', '--unlabelled']),
      /^ssl-train: error: --unlabelled: true is not allowed; expected only with --dataset folder$/,
    );
  });
});
