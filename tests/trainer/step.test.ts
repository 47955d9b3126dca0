/**
 * The step sequence every loop runs (src/trainer/step.ts: the fit loop, verify, linear
 * evaluation), in process on a quadratic: hook order, the scheduler's lr at the step's index,
 * gradient accumulation (the mean of the micro-batches' gradients), the metrics left on the
 * device until read, the adjustment, a check that vetoes a non-finite update, and no tensor
 * left behind.
 */
import { strict as assert } from 'node:assert';
import { initEngine } from '../../src/core/engine.js';
import { Module } from '../../src/core/module.js';
import { tf, type Scalar } from '../../src/core/tf.js';
import { createOptimizer, toNamedParams } from '../../src/optim/index.js';
import type { Progress, TrainingModule } from '../../src/trainer/interfaces.js';
import { accumulateBatch, applyStep, readMetrics, StepSequence } from '../../src/trainer/step.js';
import { SingleDeviceStrategy } from '../../src/trainer/strategy.js';

class Scalar1 extends Module {
  readonly w = this.addParameter('w', tf.tensor1d([1]));
}

/** Loss `batch · w²/2` (gradient `batch · w`); SGD without momentum whose lr is `0.1 / (step + 1)`; every hook recorded in `calls`. */
function quadratic(calls: string[]): TrainingModule<number> & { model: Scalar1 } {
  const model = new Scalar1();
  const at = (p: Progress) => `${p.epoch}/${p.step}/${p.batchInEpoch}`;
  return {
    model,
    trainingStep(batch) {
      calls.push(`batch ${batch}`);
      const loss = tf.mul(batch / 2, tf.sum(tf.square(model.w))) as Scalar;
      return { loss, metrics: { loss: tf.keep(loss.clone()) } };
    },
    configureOptimizers() {
      const optimizer = createOptimizer('sgd', [{ name: 'all', params: toNamedParams(model.namedParameters()), lr: 0.1, weightDecay: 0 }], { momentum: 0 });
      return {
        optimizer,
        scheduler: {
          apply: (step) => {
            calls.push(`lr ${step}`);
            optimizer.setLr(0, 0.1 / (step + 1));
            return { all: optimizer.getLr(0) };
          },
        },
      };
    },
    onTrainEpochStart: (p) => void calls.push(`epoch start ${at(p)}`),
    onTrainBatchStart: (p) => void calls.push(`step start ${at(p)}`),
    adjustGradients: (grads, p) => {
      calls.push(`adjust ${at(p)}`);
      return grads;
    },
    onTrainBatchEnd: (p) => void calls.push(`step end ${at(p)}`),
  };
}

function sequence(module: ReturnType<typeof quadratic>): StepSequence<number> {
  const strategy = new SingleDeviceStrategy();
  const { optimizer, scheduler } = module.configureOptimizers({ totalSteps: 4, stepsPerEpoch: 2 });
  return new StepSequence({ module, strategy, optimizer, scheduler, variables: module.model.trainableParameters() });
}

describe('trainer step sequence', () => {
  before(async () => {
    await initEngine('cpu-js');
  });

  it('hooks around each step, the lr of the step index, the mean gradient of the micro-batches, progress advanced', async () => {
    const calls: string[] = [];
    const module = quadratic(calls);
    const steps = sequence(module);
    const progress: Progress = { epoch: 0, step: 0, batchInEpoch: 0, totalSteps: 4 };
    steps.addBatch(1, progress);
    steps.addBatch(3, progress);
    assert.equal(steps.pendingBatches, 2);
    const first = await steps.finishStep(progress);
    // w = 1, mean gradient (1 + 3) / 2 · w = 2, lr 0.1: w = 0.8.
    assert.ok(Math.abs(module.model.w.dataSync()[0] - 0.8) < 1e-7);
    assert.deepEqual(first.lrs, { all: 0.1 });
    assert.deepEqual(first.metrics.tensors.loss.shape, [], 'the metrics stay on the device, as scalars');
    steps.addBatch(2, progress);
    const second = await steps.finishStep(progress, { throughput: () => 7 });
    assert.ok(Math.abs(second.lrs.all - 0.05) < 1e-9, 'the lr of step 1');
    const [one, two] = await readMetrics([first.metrics, second.metrics], new SingleDeviceStrategy());
    tf.dispose([...Object.values(first.metrics.tensors), ...Object.values(second.metrics.tensors)]);
    assert.deepEqual(one, { local: { loss: 1 }, reduced: { loss: 1 } }, 'mean loss of the micro-batches (0.5 and 1.5), no throughput asked for');
    assert.deepEqual(Object.keys(two.reduced), ['loss', 'images_per_sec']);
    assert.ok(Math.abs(two.reduced.loss - 0.64) < 1e-6, 'w² at w = 0.8');
    assert.equal(two.reduced.images_per_sec, 7);
    // gradient 2 · 0.8, lr 0.05: w = 0.8 - 0.08.
    assert.ok(Math.abs(module.model.w.dataSync()[0] - 0.72) < 1e-6);
    assert.deepEqual(progress, { epoch: 0, step: 2, batchInEpoch: 3, totalSteps: 4 });
    assert.deepEqual(calls, [
      'epoch start 0/0/0',
      'step start 0/0/0',
      'batch 1',
      'batch 3',
      'lr 0',
      'adjust 0/0/2',
      'step end 0/1/2',
      'step start 0/1/2',
      'batch 2',
      'lr 1',
      'adjust 0/1/3',
      'step end 0/2/3',
    ]);
    await assert.rejects(steps.finishStep(progress), /no batch was added/);
  });

  it('the check is called only for a step with a non-finite value; one that throws leaves the parameters and the progress as they were, and frees the gradients and metrics', async () => {
    const calls: string[] = [];
    const module = quadratic(calls);
    const steps = sequence(module);
    const progress: Progress = { epoch: 1, step: 2, batchInEpoch: 0, totalSteps: 4 };
    const checked: number[] = [];
    steps.addBatch(1, progress);
    const good = await steps.finishStep(progress, { check: () => void checked.push(progress.step) });
    tf.dispose(Object.values(good.metrics.tensors));
    assert.deepEqual(checked, [], 'a finite step is not checked');
    const w = module.model.w.dataSync()[0];
    calls.length = 0;
    const tensors = tf.memory().numTensors;
    steps.addBatch(Infinity, progress);
    await assert.rejects(
      steps.finishStep(progress, {
        check: (reduced, gradient, lrs) => {
          assert.deepEqual([reduced.loss, gradient.flag, gradient.name, lrs.all], [Infinity, 1, module.model.w.name, 0.1 / 4]);
          throw new Error('vetoed');
        },
      }),
      /vetoed/,
    );
    assert.equal(module.model.w.dataSync()[0], w);
    assert.equal(progress.step, 3);
    assert.ok(!calls.some((c) => c.startsWith('step end') || c.startsWith('adjust')));
    assert.equal(tf.memory().numTensors, tensors);
    assert.equal(steps.pendingBatches, 0, 'the next step starts afresh');
  });

  it('applyStep applies what adjust returns and lets inspect read it', async () => {
    const module = quadratic([]);
    const strategy = new SingleDeviceStrategy();
    const { optimizer } = module.configureOptimizers({ totalSteps: 1, stepsPerEpoch: 1 });
    const variables = module.model.trainableParameters();
    const seen: number[] = [];
    const { metrics } = await applyStep(accumulateBatch(module, 4, variables), {
      strategy,
      optimizer,
      variables,
      adjust: (grads) => Object.fromEntries(Object.entries(grads).map(([k, g]) => [k, tf.mul(g, 0.5)])),
      inspect: (applied) => seen.push(...Object.values(applied).map((g) => g.dataSync()[0])),
    });
    tf.dispose(Object.values(metrics.tensors));
    assert.deepEqual(seen, [2]);
    assert.ok(Math.abs(module.model.w.dataSync()[0] - 0.8) < 1e-7);
  });
});
