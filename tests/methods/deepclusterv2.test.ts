/**
 * DeepCluster v2 on one process: its recipe, epoch 0 (no clusters: loss 0, the bank filled by
 * dataset index after the step), an epoch start that clusters the bank and resets the
 * prototypes (frozen: no optimizer group holds them), the errors, and a resume at an epoch
 * boundary that is bit-exact. (With W ranks: tests/distributed/deepclusterv2.full.test.ts.)
 */
import { strict as assert } from 'node:assert';
import { join } from 'node:path';
import { createBackbone } from '../../src/backbones/index.js';
import { initEngine } from '../../src/core/engine.js';
import { Rng } from '../../src/core/random.js';
import { tf, type Tensor } from '../../src/core/tf.js';
import { DeepClusterV2, type BaseMethod } from '../../src/methods/index.js';
import { getMethodClass, resolveMethodArgs } from '../../src/methods/registry.js';
import { checkpointTensors } from '../distributed/checkpoints.js';
import { runCli, SMOKE_FLAGS, tempDir } from '../helpers/run.js';

const N = 12;
const B = 6;

function build(datasetSize: number | undefined, numPrototypes = 3): BaseMethod {
  return new (getMethodClass('deepclusterv2'))({
    createBackbone: (rng) => createBackbone('mlp', { inChannels: 1, imageSize: 8, rng, mlpHidden: [16] }),
    numClasses: 3,
    rng: new Rng(3),
    args: resolveMethodArgs('deepclusterv2', { projHiddenDim: 8, projOutputDim: 4, numPrototypes, heads: 2 }),
    datasetSize,
  });
}

function views(seed: number): Tensor[] {
  const rng = new Rng(seed);
  return [0, 1].map(() => tf.tensor4d(rng.normalArray(B * 64), [B, 8, 8, 1]));
}

function state(m: BaseMethod, name: string): number[] {
  return Array.from(m.stateDict()[name]!.dataSync());
}

/** One step's loss on samples `indices`, then the batch-end hook of `epoch`. */
function step(m: BaseMethod, indices: number[], epoch: number, seed: number): number {
  const v = views(seed);
  const out = m.trainingStep(v, tf.tensor1d([0, 1, 2, 0, 1, 2], 'int32'), { seed, epoch, indices: Int32Array.from(indices) });
  const loss = out.metrics.loss!.dataSync()[0]!;
  tf.dispose([out.loss, ...Object.values(out.metrics), ...v]);
  m.onTrainBatchEnd({ step: 1, totalSteps: 4, epoch });
  return loss;
}

describe('DeepClusterV2', () => {
  before(() => initEngine('cpu'));

  it("has solo-learn's CIFAR recipe", () => {
    const cls = getMethodClass('deepclusterv2');
    assert.equal(cls, DeepClusterV2);
    assert.deepEqual(cls.optimDefaults, { optimizer: 'lars', lr: 0.6, classifierLr: 0.1, weightDecay: 1e-6 });
    assert.deepEqual(resolveMethodArgs('deepclusterv2', {}), {
      projHiddenDim: 2048,
      projOutputDim: 128,
      numPrototypes: 3000,
      heads: 3,
      temperature: 0.1,
      kmeansIters: 10,
    });
    assert.equal(cls.viewRecipe, 'simclr');
  });

  it('epoch 0: loss 0; the step writes both views at their dataset indices; epoch 1 clusters them and resets the prototypes', () => {
    const m = build(N);
    m.onTrainEpochStart({ step: 0, totalSteps: 4, epoch: 0 });
    const prototypes = state(m, 'memory.prototypes');
    assert.equal(step(m, [11, 3, 5, 0, 8, 2], 0, 1), 0);
    assert.equal(step(m, [1, 4, 6, 7, 9, 10], 0, 2), 0);
    assert.deepEqual(state(m, 'memory.written_epoch'), Array(N).fill(0));
    const bank = state(m, 'memory.bank');
    for (let i = 0; i < 2 * N; i++) assert.ok(Math.abs(Math.hypot(...bank.slice(4 * i, 4 * i + 4)) - 1) < 1e-5, `bank row ${i} is a normalised projection`);
    assert.deepEqual(state(m, 'memory.assignments'), Array(2 * N).fill(-1));
    assert.deepEqual(state(m, 'memory.prototypes'), prototypes, 'no clustering before epoch 1');
    assert.ok(!m.parameterGroups().some((g) => g.params.some(([name]) => name.startsWith('memory.'))), 'the prototypes are not trained');

    m.onTrainEpochStart({ step: 2, totalSteps: 4, epoch: 1 });
    const assignments = state(m, 'memory.assignments');
    assert.ok(assignments.every((a) => a >= 0 && a < 3));
    assert.notDeepEqual(state(m, 'memory.prototypes'), prototypes);
    assert.ok(step(m, [0, 1, 2, 3, 4, 5], 1, 3) > 0, 'epoch 1 has targets');
    m.dispose();
  });

  it('refuses to build without the dataset size, to train without indices, and more prototypes than samples seen', () => {
    assert.throws(() => build(undefined), /needs the training set size/);
    const m = build(N, 8);
    const v = views(1);
    const labels = tf.tensor1d([0, 1, 2, 0, 1, 2], 'int32');
    assert.throws(() => m.trainingStep(v, labels), /dataset indices are needed/);
    tf.dispose([...v, labels]);
    step(m, [0, 1, 2, 3, 4, 5], 0, 1);
    assert.throws(
      () => m.onTrainEpochStart({ step: 1, totalSteps: 4, epoch: 1 }),
      /method_args.num_prototypes: 8 is not allowed; expected at most 6, the samples seen in epoch 0/,
    );
    m.dispose();
  });

  it('a prototype count above the training set size is one line naming method_args.num_prototypes, exit 2', () => {
    const { status, stderr } = runCli([
      ...SMOKE_FLAGS,
      '--synthetic-size',
      '64',
      '--method',
      'deepclusterv2',
      '--method-arg',
      'numPrototypes=65',
      '--epochs',
      '1',
    ]);
    assert.equal(status, 2, stderr);
    assert.equal(stderr.trim(), 'ssl-train: error: method_args.num_prototypes: 65 is not allowed; expected at most 64, the samples in the training set');
  });

  it('a run resumed at an epoch boundary (k-means re-run from the saved bank) ends bit-exactly as an uninterrupted one', () => {
    const flags = [
      ...SMOKE_FLAGS,
      '--synthetic-size',
      '64',
      '--method',
      'deepclusterv2',
      '--method-arg',
      'numPrototypes=8',
      '--epochs',
      '3',
      '--val-every',
      '0',
    ];
    const straight = join(tempDir(), 'run');
    assert.equal(runCli([...flags, '--run-dir', straight]).status, 0);
    const resumed = join(tempDir(), 'run');
    const first = runCli([...flags, '--run-dir', resumed, '--max-steps', '4']); // 2 steps an epoch: stops at the end of epoch 2
    assert.equal(first.status, 0, first.stderr);
    const second = runCli([...flags, '--run-dir', resumed, '--resume', 'auto']);
    assert.equal(second.status, 0, second.stderr);
    assert.match(second.stdout + second.stderr, /resuming from .*epoch/);
    const [a, b] = [checkpointTensors(straight), checkpointTensors(resumed)];
    assert.deepEqual(Object.keys(b).sort(), Object.keys(a).sort());
    for (const name of Object.keys(a)) assert.deepEqual(Array.from(b[name]!), Array.from(a[name]!), name);
  });
});
