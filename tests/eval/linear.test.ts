import { strict as assert } from 'node:assert';
import { initEngine } from '../../src/core/engine.js';
import { Linear } from '../../src/core/layers.js';
import { Rng } from '../../src/core/random.js';
import { tf, type Tensor } from '../../src/core/tf.js';
import { evaluateLinear, fitLinearEval, linearEvalSchedule, linearStepsPerEpoch, type LabelledSet, type LinearEvalModel } from '../../src/eval/linear.js';
import { toNamedParams } from '../../src/optim/index.js';

/** `n` points in `classes` well-separated Gaussian blobs in `dim` dimensions: `[n, dim]` and labels. */
function blobs(n: number, classes: number, dim: number, seed: number): { features: Tensor; labels: Int32Array } {
  const rng = new Rng(seed);
  const values = new Float32Array(n * dim);
  const labels = new Int32Array(n);
  for (let i = 0; i < n; i++) {
    labels[i] = i % classes;
    for (let j = 0; j < dim; j++) values[i * dim + j] = (j === labels[i] ? 4 : 0) + 0.5 * rng.normal();
  }
  return { features: tf.tensor2d(values, [n, dim]), labels };
}

function featureSet(features: Tensor, labels: Int32Array): LabelledSet {
  return { length: labels.length, labels, inputs: (indices) => tf.gather(features, tf.tensor1d(indices, 'int32')) };
}

function linearModel(dim: number, classes: number): { model: LinearEvalModel; layer: Linear } {
  const layer = new Linear(dim, classes, { rng: new Rng(1) });
  return { layer, model: { logits: (x) => layer.forward(x), trainableParameters: () => toNamedParams(layer.namedParameters('classifier')) } };
}

describe('eval/linear', () => {
  before(async () => {
    await initEngine('cpu-js');
  });

  it('the cosine schedule starts at the lr, halves at mid-run and ends at 0 (solo-learn warmup_cosine without warmup)', () => {
    const schedule = linearEvalSchedule(10, 5);
    assert.equal(schedule.lrAt(0, 0.2), 0.2);
    assert.ok(Math.abs(schedule.lrAt(25, 0.2) - 0.1) < 1e-12);
    assert.ok(Math.abs(schedule.lrAt(10, 0.2) - (0.2 * (1 + Math.cos(Math.PI / 5))) / 2) < 1e-12);
    assert.equal(schedule.lrAt(50, 0.2), 0);
    assert.equal(linearStepsPerEpoch(1000, 512), 1, 'the incomplete last batch is dropped');
  });

  it('a linear probe learns separable blobs (accuracy from chance to > 95%) and logs every epoch', async () => {
    const train = blobs(400, 4, 8, 0);
    const val = blobs(200, 4, 8, 1);
    const { model, layer } = linearModel(8, 4);
    const before = await evaluateLinear(model, featureSet(val.features, val.labels), 64);
    assert.ok(before.accuracy.top1 < 0.6, `untrained accuracy ${before.accuracy.top1}`);
    const seen: number[] = [];
    const history = await fitLinearEval(
      model,
      featureSet(train.features, train.labels),
      featureSet(val.features, val.labels),
      { epochs: 5, batchSize: 32, lr: 0.1, momentum: 0.9, weightDecay: 0, seed: 0 },
      (e) => void seen.push(e.epoch),
    );
    assert.deepEqual(seen, [0, 1, 2, 3, 4]);
    assert.equal(history[4].step, 5 * 12);
    assert.ok(history[4].val.top1 > 0.95, `top-1 ${history[4].val.top1}`);
    assert.equal(history[4].val.top5, 1, 'top-5 of 4 classes is always right');
    assert.ok(history[4].trainLoss < history[0].trainLoss);
    assert.ok(history[4].lr < 0.1 * 0.01, `the lr decays to ~0 (${history[4].lr})`);
    tf.dispose([train.features, val.features]);
    layer.dispose();
  });

  it('the same seed gives the same classifier; another seed shuffles differently', async () => {
    const train = blobs(128, 4, 8, 2);
    const run = async (seed: number) => {
      const { model, layer } = linearModel(8, 4);
      await fitLinearEval(model, featureSet(train.features, train.labels), featureSet(train.features, train.labels), {
        epochs: 1,
        batchSize: 16,
        lr: 0.1,
        momentum: 0.9,
        weightDecay: 0,
        seed,
      });
      const w = Array.from(layer.weight.dataSync());
      layer.dispose();
      return w;
    };
    const [a, b, c] = [await run(0), await run(0), await run(1)];
    assert.deepEqual(a, b);
    assert.notDeepEqual(a, c);
    train.features.dispose();
  });

  it('inputs read asynchronously (a promise per batch, as from disk) train and evaluate exactly as synchronous ones', async () => {
    const train = blobs(96, 4, 8, 3);
    const val = blobs(40, 4, 8, 4);
    const settings = { epochs: 2, batchSize: 16, lr: 0.1, momentum: 0.9, weightDecay: 0, seed: 0, evalBatchSize: 7 };
    const later = (set: LabelledSet): LabelledSet => ({
      ...set,
      inputs: (indices, epoch) => new Promise((resolve) => setTimeout(() => resolve(set.inputs(indices, epoch)), 1)),
    });
    const run = async (wrap: (set: LabelledSet) => LabelledSet) => {
      const { model, layer } = linearModel(8, 4);
      const history = await fitLinearEval(model, wrap(featureSet(train.features, train.labels)), wrap(featureSet(val.features, val.labels)), settings);
      const weights = Array.from(layer.weight.dataSync());
      layer.dispose();
      return { history, weights };
    };
    const sync = await run((set) => set);
    const promised = await run(later);
    assert.deepEqual(promised, sync);
    assert.ok(sync.history[1].val.top1 > 0.5, `top-1 ${sync.history[1].val.top1}`);
    tf.dispose([train.features, val.features]);
  });
});
