import { strict as assert } from 'node:assert';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { tf } from '../../src/core/tf.js';
import { loadReportRun, runStats } from '../../src/report/run-data.js';
import { loadCheckpoint, withoutPrefix } from '../../src/trainer/checkpoint.js';
import { readNpy } from '../helpers/npy.js';
import { runCliBatch, type CliBatchResult } from '../distributed/cli-batch.js';
import { runCli, SMOKE_FLAGS, tempDir } from '../helpers/run.js';

const dir = tempDir('ssl-zoo-eval-');
const source = join(dir, 'pretrain');

/** The `model/backbone.*` (or `model/classifier.*`) tensors of a checkpoint as plain arrays. */
function checkpointPart(path: string, prefix: string): Record<string, number[]> {
  const { tensors } = loadCheckpoint(path);
  const part = Object.fromEntries(Object.entries(withoutPrefix(tensors, prefix)).map(([name, t]) => [name, Array.from(t.dataSync())]));
  tf.dispose(Object.values(tensors));
  return part;
}

function json(line: string): Record<string, unknown> {
  return JSON.parse(line) as Record<string, unknown>;
}

describe('ssl-train linear / knn / embed', function () {
  this.timeout(180_000);

  before(() => {
    const { status, stderr } = runCli([...SMOKE_FLAGS, '--epochs', '1', '--run-dir', source]);
    assert.equal(status, 0, stderr);
  });

  it('linear: a run directory of its own (per-epoch validation, summary, checkpoint) that compare reads', () => {
    const runDir = join(dir, 'linear');
    const { status, stdout, stderr } = runCli(['linear', source, '--epochs', '3', '--batch-size', '32', '--run-dir', runDir]);
    assert.equal(status, 0, stderr);
    const out = json(stdout.trim().split('\n').at(-1)!);
    assert.equal(out.epochs, 3);
    assert.match(stderr, /linear: epoch 3\/3: loss [\d.]+, val top-1 [\d.]+%/);
    const config = json(readFileSync(join(runDir, 'config.json'), 'utf8'));
    assert.equal(config.evaluation, 'linear');
    assert.equal(config.precomputedFeatures, true);
    assert.equal(config.appliedLr, (0.1 * 32) / 256);
    // Run by the trainer: training rows every --log-every steps, a validation row after every epoch.
    const all = readFileSync(join(runDir, 'metrics.jsonl'), 'utf8').trim().split('\n').map(json);
    const rows = all.filter((r) => r['val/acc1'] !== undefined);
    assert.deepEqual(
      rows.map((r) => r.epoch),
      [0, 1, 2],
    );
    assert.ok(all.some((r) => typeof r['train/loss'] === 'number' && typeof r['train/acc1'] === 'number' && typeof r['train/lr'] === 'number'));
    const summary = json(readFileSync(join(runDir, 'summary.json'), 'utf8'));
    assert.equal(summary.status, 'success');
    assert.equal(summary['val/acc1'], rows[2]['val/acc1']);
    assert.equal(summary['val/acc1'], out['val/acc1']);
    const run = loadReportRun(runDir);
    const stats = runStats(run);
    assert.equal(stats.epochsDone, 3);
    assert.equal(stats.finalLinearAcc1, summary['val/acc1']);
    // The frozen backbone is saved unchanged, with the trained linear head.
    const last = join(runDir, 'checkpoints', 'last.ckpt');
    assert.deepEqual(checkpointPart(last, 'model/backbone.'), checkpointPart(join(source, 'checkpoints', 'last.ckpt'), 'model/backbone.'));
    assert.notDeepEqual(checkpointPart(last, 'model/classifier.'), checkpointPart(join(source, 'checkpoints', 'last.ckpt'), 'model/classifier.'));
    // compare: both runs side by side, the embedding map of the linear run from its checkpoint.
    const report = join(dir, 'report');
    const compared = runCli(['compare', source, runDir, '--out', report, '--points', '20']);
    assert.equal(compared.status, 0, compared.stderr);
    assert.doesNotMatch(compared.stderr, /no embedding map/);
    assert.ok(existsSync(join(report, 'report.html')));
  });

  it('linear --finetune changes the backbone weights (and trains on crop-flip views)', () => {
    const runDir = join(dir, 'finetune');
    const { status, stderr } = runCli([
      'linear',
      '--pretrained',
      source,
      '--epochs',
      '1',
      '--batch-size',
      '32',
      '--finetune',
      '--augmentation',
      'crop-flip',
      '--run-dir',
      runDir,
    ]);
    assert.equal(status, 0, stderr);
    const config = json(readFileSync(join(runDir, 'config.json'), 'utf8'));
    assert.equal(config.precomputedFeatures, false);
    const before = checkpointPart(join(source, 'checkpoints', 'last.ckpt'), 'model/backbone.');
    const after = checkpointPart(join(runDir, 'checkpoints', 'last.ckpt'), 'model/backbone.');
    assert.deepEqual(Object.keys(after), Object.keys(before));
    const changed = Object.keys(before).filter((name) => before[name].some((v, i) => v !== after[name][i]));
    assert.ok(
      changed.some((name) => name.endsWith('weight')),
      `weights changed: ${changed.join(', ')}`,
    );
  });

  it('knn: every k x temperature (cosine) and k (euclidean) in one pass; k 20, T 0.07 reproduces the training validation', () => {
    const { status, stdout, stderr } = runCli([
      'knn',
      source,
      '--k',
      '1,20',
      '--temperature',
      '0.07,0.5',
      '--distance',
      'cosine,euclidean',
      '--batch-size',
      '64',
    ]);
    assert.equal(status, 0, stderr);
    const rows = stdout
      .trim()
      .split('\n')
      .filter((l) => l.startsWith('{'))
      .map(json);
    assert.deepEqual(
      rows.map((r) => [r.distance, r.k, r.temperature]),
      [
        ['cosine', 1, 0.07],
        ['cosine', 1, 0.5],
        ['cosine', 20, 0.07],
        ['cosine', 20, 0.5],
        ['euclidean', 1, undefined],
        ['euclidean', 20, undefined],
      ],
    );
    const summary = json(readFileSync(join(source, 'summary.json'), 'utf8'));
    assert.equal(rows[2].top1, summary['val/knn_acc1'], 'the same memory (all 256 training images), test set and settings as the validation');
    assert.equal(rows[2].top5, summary['val/knn_acc5']);
  });

  it('embed: float32 [N, F] features and int32 labels beside them, readable by numpy.load', function () {
    const out = join(dir, 'features.npy');
    const { status, stdout, stderr } = runCli(['embed', source, '--out', out, '--split', 'train']);
    assert.equal(status, 0, stderr);
    const result = json(stdout.trim().split('\n').at(-1)!);
    const features = readNpy(out);
    const labels = readNpy(join(dir, 'features.labels.npy'));
    assert.deepEqual(result.shape, features.shape);
    assert.equal(features.shape[0], 256);
    assert.ok(features.values instanceof Float32Array && labels.values instanceof Int32Array);
    assert.deepEqual(labels.shape, [256]);
    assert.ok(features.values.every(Number.isFinite));
    const probe = spawnSync('python3', ['-c', 'import numpy'], { encoding: 'utf8' });
    assert.equal(
      probe.status,
      0,
      `numpy.load is the reader this test checks against: install python3-numpy (scripts/setup.sh does)\n${probe.stderr ?? probe.error}`,
    );
    const script = `import numpy as np, json, sys
f = np.load(sys.argv[1]); l = np.load(sys.argv[2])
print(json.dumps({"shape": list(f.shape), "dtype": str(f.dtype), "first": [float(x) for x in f[0]], "labels": l.tolist(), "ldtype": str(l.dtype)}))`;
    const py = spawnSync('python3', ['-c', script, out, join(dir, 'features.labels.npy')], { encoding: 'utf8' });
    assert.equal(py.status, 0, py.stderr);
    const loaded = json(py.stdout);
    assert.deepEqual(loaded.shape, features.shape);
    assert.equal(loaded.dtype, 'float32');
    assert.equal(loaded.ldtype, 'int32');
    assert.deepEqual(loaded.first, Array.from(features.values.subarray(0, features.shape[1])));
    assert.deepEqual(loaded.labels, Array.from(labels.values));
  });

  describe('bad input: one line naming the flag, exit 2, nothing written', () => {
    const empty = join(dir, 'empty-run');
    mkdirSync(join(empty, 'checkpoints'), { recursive: true });
    writeFileSync(join(empty, 'config.json'), '{}\n');
    const out = (name: string) => join(dir, 'bad', name);
    const cases: Array<[string, () => string[], RegExp, string?]> = [
      ['no backbone given', () => ['linear'], /linear: give the backbone as RUN_DIR, --checkpoint PATH or --pretrained PATH, exactly one \(none was given\)/],
      [
        'two backbones given',
        () => ['knn', source, '--checkpoint', join(source, 'checkpoints', 'last.ckpt')],
        /knn: give the backbone .*exactly one \(got RUN_DIR and --checkpoint\)/,
      ],
      [
        'a run directory without checkpoints',
        () => ['linear', empty, '--run-dir', out('a')],
        /RUN_DIR: .*empty-run has no usable checkpoint \(no \*\.ckpt in .*\); expected a run directory/,
        'a',
      ],
      [
        'a --checkpoint that is no checkpoint',
        () => ['embed', '--checkpoint', join(empty, 'config.json'), '--out', out('j.npy')],
        /--checkpoint: .*config\.json is not an ssl-zoo checkpoint/,
        'j.npy',
      ],
      [
        'a missing --pretrained path',
        () => ['knn', '--pretrained', join(dir, 'nowhere')],
        /--pretrained: .*nowhere does not exist; expected a run directory, a checkpoint file or an export directory/,
      ],
      [
        'a --k list with a non-integer',
        () => ['knn', source, '--k', '10,2.5'],
        /--k: "10,2.5" is not allowed; expected a comma-separated list of integers >= 1/,
      ],
      [
        'an unknown distance',
        () => ['knn', source, '--distance', 'cosine,manhattan'],
        /--distance: "cosine,manhattan" is not allowed; expected a comma-separated list of cosine or euclidean/,
      ],
      ['a temperature <= 0', () => ['knn', source, '--temperature', '0'], /--temperature: "0" is not allowed; expected a comma-separated list of numbers > 0/],
      ['--finetune with embed', () => ['embed', source, '--out', out('b.npy'), '--finetune'], /unknown option '--finetune'/, 'b.npy'],
      [
        'an --out that is not .npy',
        () => ['embed', source, '--out', out('c.txt')],
        /--out: ".*c\.txt" is not allowed; expected a file name ending in \.npy/,
        'c.txt',
      ],
      [
        'an --out in a missing directory',
        () => ['embed', source, '--out', join(dir, 'no', 'dir', 'd.npy')],
        /--out: .* is not allowed; expected a path in an existing directory/,
      ],
      ['zero epochs', () => ['linear', source, '--epochs', '0', '--run-dir', out('e')], /--epochs: "0" is not allowed; expected an integer >= 1/, 'e'],
      [
        'an unknown augmentation',
        () => ['linear', source, '--augmentation', 'strong', '--run-dir', out('f')],
        /--augmentation: "strong" is not allowed; expected one of none, crop-flip/,
        'f',
      ],
      [
        'a run directory that holds a run',
        () => ['linear', source, '--run-dir', source],
        /--run-dir: ".*pretrain" is not allowed; expected a directory that holds no run yet/,
      ],
      ['--resume without --run-dir', () => ['linear', source, '--resume', 'auto'], /--resume: auto needs --run-dir, the directory of the evaluation to resume/],
      [
        'a batch that does not split over --devices',
        () => ['linear', source, '--devices', '3', '--batch-size', '32', '--run-dir', out('k')],
        /--batch-size: 32 is not allowed; expected a multiple of --devices 3/,
        'k',
      ],
      ['missing data files', () => ['linear', source, '--dataset', 'fashion-mnist', '--data-dir', join(dir, 'nodata'), '--run-dir', out('g')], /nodata/, 'g'],
      [
        'a --pretrained backbone of another architecture',
        () => [...SMOKE_FLAGS, '--backbone', 'tiny_resnet', '--pretrained', source, '--run-dir', out('h')],
        /--pretrained: the backbone of .*last\.ckpt \(backbone mlp, trained on synthetic\) does not match this model's/,
        'h',
      ],
      [
        'a --pretrained backbone with other channels',
        () => [...SMOKE_FLAGS, '--image-size', '20', '--pretrained', source, '--run-dir', out('i')],
        /--pretrained: .*backbone\.\S+ is \[[\d, ]+\] there and \[[\d, ]+\] here/,
        'i',
      ],
    ];
    // Every case through the CLI's own `main` in one process, in turn (tests/distributed/cli-batch.ts): what the binary
    // runs, without 17 Node start-ups.
    const results = new Map<string, CliBatchResult>(); // by the case's index
    before(async function () {
      this.timeout(180_000);
      mkdirSync(join(dir, 'bad'), { recursive: true });
      for (const [id, run] of await runCliBatch(1, Object.fromEntries(cases.map(([, args], i) => [String(i), args()])), 170_000)) results.set(id, run);
    });
    cases.forEach(([what, , pattern, written], i) => {
      it(what, () => {
        const { codes, stderr } = results.get(String(i))!;
        const lines = stderr[0]!.trim().split('\n');
        assert.equal(codes[0], 2, `exit code (stderr: ${stderr[0]})`);
        assert.equal(lines.length, 1, `one line, got:\n${stderr[0]}`);
        assert.match(lines[0]!, pattern);
        if (written) assert.ok(!existsSync(out(written)), `${written} was not written`);
      });
    });
  });
});
