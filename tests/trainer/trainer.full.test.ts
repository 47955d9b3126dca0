import { strict as assert } from 'node:assert';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { buildConfig, type TrainConfigInput } from '../../src/experiment/config.js';
import { runTraining } from '../../src/experiment/train.js';
import { tf } from '../../src/core/tf.js';
import { loadCheckpoint } from '../../src/trainer/checkpoint.js';
import type { Callback } from '../../src/trainer/callbacks.js';
import { tempDir } from '../helpers/run.js';

const SMALL: TrainConfigInput = {
  dataset: 'synthetic',
  imageSize: 16,
  syntheticSize: 128,
  backbone: 'mlp',
  batchSize: 32,
  workers: 0,
  backend: 'cpu-js',
  valEvery: 0,
  logEvery: 1,
  methodArgs: { projHiddenDim: 32, projOutputDim: 16 },
};

function readLosses(runDir: string): Map<number, number> {
  const lines = readFileSync(join(runDir, 'metrics.jsonl'), 'utf8').trim().split('\n');
  const out = new Map<number, number>();
  for (const line of lines) {
    const row = JSON.parse(line) as Record<string, number>;
    if (row['train/loss'] !== undefined) out.set(row.step, row['train/loss']);
  }
  return out;
}

function params(runDir: string): Record<string, Float32Array> {
  const ckpt = loadCheckpoint(join(runDir, 'checkpoints', 'last.ckpt'));
  const out: Record<string, Float32Array> = {};
  for (const [name, t] of Object.entries(ckpt.tensors)) out[name] = Float32Array.from(t.dataSync() as Float32Array);
  tf.dispose(Object.values(ckpt.tensors));
  return out;
}

describe('trainer', function () {
  this.timeout(300_000);

  for (const method of ['simclr', 'byol']) {
    it(`${method}: resuming from a checkpoint gives the same next losses and weights as an uninterrupted run`, async () => {
      const straight = tempDir();
      await runTraining(buildConfig({ ...SMALL, method, epochs: 3, runDir: straight }), { callbacks: [] });
      // Interrupted mid-epoch 2 (step 6 of 12, 4 steps per epoch), then resumed.
      const split = tempDir();
      await runTraining(buildConfig({ ...SMALL, method, epochs: 3, maxSteps: 6, runDir: split }), { callbacks: [] });
      await runTraining(buildConfig({ ...SMALL, method, epochs: 3, runDir: split, resume: 'auto' }), { callbacks: [] });
      const a = readLosses(straight);
      const b = readLosses(split);
      assert.equal(a.size, 12);
      for (let step = 7; step <= 12; step++) {
        assert.equal(b.get(step), a.get(step), `loss at step ${step}`);
      }
      const pa = params(straight);
      const pb = params(split);
      for (const name of Object.keys(pa)) assert.deepEqual(pb[name], pa[name], name);
    });
  }

  it('does not grow the number of live tensors over training steps', async () => {
    const counts: number[] = [];
    const probe: Callback = { onTrainBatchEnd: () => void counts.push(tf.memory().numTensors) };
    await runTraining(
      buildConfig({ ...SMALL, method: 'byol', epochs: 2, runDir: tempDir(), methodArgs: { projHiddenDim: 32, projOutputDim: 16, predHiddenDim: 32 } }),
      {
        callbacks: [probe],
      },
    );
    assert.equal(counts.length, 8);
    // The first step creates the optimizer's momentum buffers; from then on nothing may accumulate.
    assert.ok(
      counts.slice(1).every((c) => c === counts[1]),
      `live tensors per step: ${counts.join(', ')}`,
    );
  });

  it('--val-at-start: validates the initial weights before the first step (logged at step 0), once, not again on resume', async () => {
    const runDir = tempDir();
    const baselines: Array<Record<string, number>> = [];
    const probe: Callback = { onBaseline: (m) => void baselines.push(m), onFitStart: () => assert.equal(baselines.length, 1, 'the baseline comes first') };
    const config = { ...SMALL, method: 'simclr', epochs: 2, valEvery: 1, valAtStart: true, knnTrainSamples: 64, runDir };
    await runTraining(buildConfig({ ...config, maxSteps: 4 }), { callbacks: [probe] });
    const rows = readFileSync(join(runDir, 'metrics.jsonl'), 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as Record<string, number>);
    const validations = rows.filter((r) => r['val/knn_acc1'] !== undefined);
    assert.deepEqual(
      validations.map((r) => r.step),
      [0, 4],
      'the baseline at step 0, then after epoch 1',
    );
    assert.equal(baselines.length, 1);
    assert.equal(validations[0]['val/knn_acc1'], baselines[0]['val/knn_acc1']);
    assert.notEqual(validations[0]['val/knn_acc1'], validations[1]['val/knn_acc1'], 'training moved the features');
    // Resumed: no second baseline.
    await runTraining(buildConfig({ ...config, resume: 'auto' }), { callbacks: [probe] });
    assert.equal(baselines.length, 1);
  });

  it('--train-samples: pre-trains on a seeded sample of that many images (fewer steps per epoch)', async () => {
    const runDir = tempDir();
    const steps: number[] = [];
    const result = await runTraining(buildConfig({ ...SMALL, method: 'simclr', epochs: 1, trainSamples: 64, runDir }), {
      callbacks: [{ onTrainBatchEnd: (p) => void steps.push(p.step) }],
    });
    assert.deepEqual(steps, [1, 2], '64 images, batch 32');
    assert.equal(result.fit.progress.step, 2);
    const config = JSON.parse(readFileSync(join(runDir, 'config.json'), 'utf8')) as Record<string, unknown>;
    assert.equal(config.trainSize, 64);
  });
});
