/**
 * The trainer's step hooks (`onTrainEpochStart`, `onTrainBatchStart`, `adjustGradients`,
 * `onTrainBatchEnd`): when `Trainer.fit` calls them, with gradient accumulation and across a
 * resume in the middle of an epoch, and that what `adjustGradients` returns is what the
 * optimizer applies.
 */
import { strict as assert } from 'node:assert';
import { join } from 'node:path';
import { tf, type Tensor } from '../../src/core/tf.js';
import { buildConfig, type TrainConfigInput } from '../../src/experiment/config.js';
import { runTraining } from '../../src/experiment/train.js';
import { withoutGradients, type StepInfo } from '../../src/methods/base.js';
import { registerMethod } from '../../src/methods/registry.js';
import { SimCLR } from '../../src/methods/simclr.js';
import { loadCheckpoint } from '../../src/trainer/checkpoint.js';
import { tempDir } from '../helpers/run.js';

const calls: string[] = [];

/** SimCLR recording its hooks; its projector is frozen in epoch 0. */
class HookProbe extends SimCLR {
  override onTrainEpochStart(info: StepInfo): void {
    calls.push(`epoch ${info.epoch}`);
  }
  override onTrainBatchStart(info: StepInfo): void {
    calls.push(`start ${info.epoch}/${info.step}`);
  }
  override adjustGradients(grads: Record<string, Tensor>, info: StepInfo): Record<string, Tensor> {
    calls.push(`adjust ${info.epoch}/${info.step}`);
    return info.epoch === 0 ? withoutGradients(grads, this.projector) : grads;
  }
  override onTrainBatchEnd(info: StepInfo): void {
    super.onTrainBatchEnd(info);
    calls.push(`end ${info.epoch}/${info.step}`);
  }
}
registerMethod('hook_probe', HookProbe);

const SMALL: TrainConfigInput = {
  ...{ method: 'hook_probe', dataset: 'synthetic', imageSize: 16, syntheticSize: 64, backbone: 'mlp', batchSize: 16, workers: 0 },
  ...{ backend: 'cpu-js', valEvery: 0, logEvery: 1, epochs: 2, accumulateGradBatches: 2, methodArgs: { projHiddenDim: 16, projOutputDim: 8 } },
};

function projector(runDir: string): Float32Array {
  const ckpt = loadCheckpoint(join(runDir, 'checkpoints', 'last.ckpt'));
  const out = Float32Array.from(ckpt.tensors['model/projector.0.weight']!.dataSync() as Float32Array);
  tf.dispose(Object.values(ckpt.tensors));
  return out;
}

describe('trainer hooks', function () {
  this.timeout(120_000);

  it('epoch start once per epoch, batch start and adjust once per optimizer step (2 micro-batches), end after it; not the epoch start of a resumed epoch', async () => {
    calls.length = 0;
    // 4 batches per epoch, 2 per step: 2 steps per epoch.
    await runTraining(buildConfig({ ...SMALL, runDir: tempDir() }), { callbacks: [] });
    const step = (e: number, s: number) => [`start ${e}/${s}`, `adjust ${e}/${s}`, `end ${e}/${s + 1}`];
    assert.deepEqual(calls, ['epoch 0', ...step(0, 0), ...step(0, 1), 'epoch 1', ...step(1, 2), ...step(1, 3)]);

    const split = tempDir();
    await runTraining(buildConfig({ ...SMALL, runDir: split, maxSteps: 3 }), { callbacks: [] });
    calls.length = 0;
    await runTraining(buildConfig({ ...SMALL, runDir: split, resume: 'auto' }), { callbacks: [] });
    assert.deepEqual(calls, step(1, 3), 'resumed in the middle of epoch 1: no epoch start');
  });

  it('the optimizer applies what adjustGradients returns: the projector dropped in epoch 0 is not updated', async () => {
    const first = tempDir();
    const second = tempDir();
    await runTraining(buildConfig({ ...SMALL, runDir: first, maxSteps: 1 }), { callbacks: [] });
    await runTraining(buildConfig({ ...SMALL, runDir: second, maxSteps: 2 }), { callbacks: [] });
    const third = tempDir();
    await runTraining(buildConfig({ ...SMALL, runDir: third, maxSteps: 3 }), { callbacks: [] });
    assert.deepEqual(projector(second), projector(first), 'epoch 0: frozen');
    assert.notDeepEqual(projector(third), projector(second), 'epoch 1: trained');
  });
});
