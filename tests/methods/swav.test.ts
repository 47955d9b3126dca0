/**
 * SwAV on one process: the weight-normalised prototypes, the loss as the composition of the
 * pure Sinkhorn-Knopp and swapped-prediction losses, the queue (written from the gathered
 * projections, joining the assignments from `epochQueueStarts`), the frozen prototypes
 * (no gradient, no optimizer state) and the gradient cache. (W ranks:
 * tests/distributed/zoo-exactness.full.test.ts.)
 */
import { strict as assert } from 'node:assert';
import { createBackbone } from '../../src/backbones/index.js';
import { initEngine } from '../../src/core/engine.js';
import { l2NormalizeRows } from '../../src/core/ops.js';
import { Rng } from '../../src/core/random.js';
import { tf, type Scalar, type Tensor, type Tensor2D } from '../../src/core/tf.js';
import { sinkhornKnopp } from '../../src/losses/sinkhorn.js';
import { swavLoss } from '../../src/losses/swav.js';
import { gradCacheGradients } from '../../src/methods/grad-cache.js';
import { WeightNormLinear } from '../../src/methods/heads.js';
import { getMethodClass, resolveMethodArgs } from '../../src/methods/registry.js';
import type { SwAV } from '../../src/methods/swav.js';
import { SslTask } from '../../src/methods/task.js';
import type { MultiViewBatch } from '../../src/data/loader.js';
import { accumulateBatch, applyStep } from '../../src/trainer/step.js';
import { SingleDeviceStrategy } from '../../src/trainer/strategy.js';

const SMALL = { projHiddenDim: 8, projOutputDim: 4, numPrototypes: 5, queueSize: 12, epochQueueStarts: 1, freezePrototypesEpochs: 1 };

function build(args: Record<string, number> = {}, seed = 3): SwAV {
  const cls = getMethodClass('swav');
  return new cls({
    createBackbone: (rng) => createBackbone('mlp', { inChannels: 1, imageSize: 8, rng, mlpHidden: [16], norm: 'layer' }),
    numClasses: 3,
    rng: new Rng(seed),
    args: resolveMethodArgs('swav', { ...SMALL, ...args }),
    norm: 'layer',
  }) as SwAV;
}

/** 2 global + 2 local crops (all 8 x 8: the mlp backbone takes one size) of 6 samples. */
function crops(seed: number): { views: Tensor[]; labels: Tensor } {
  const rng = new Rng(seed);
  return {
    views: [0, 1, 2, 3].map(() => tf.tensor4d(rng.normalArray(6 * 64), [6, 8, 8, 1])),
    labels: tf.tensor1d([0, 1, 2, 0, 1, 2], 'int32'),
  };
}

/** The SwAV loss recomputed from the method's modules and the pure losses. */
function expectedLoss(m: SwAV, views: Tensor[], withQueue: boolean): number {
  return tf.tidy(() => {
    const z = views.map((v) => l2NormalizeRows(m.projector.forward(m.backbone.forward(v))));
    const c = tf.div(m.prototypes.weight, tf.norm(m.prototypes.weight, 'euclidean', 0, true));
    const preds = z.map((zv) => tf.matMul(zv, c) as Tensor2D);
    const assignments = [0, 1].map((g) =>
      sinkhornKnopp(preds[g]!, { epsilon: 0.05, iterations: 3, queueScores: withQueue ? (tf.matMul(m.queue!.rows(g), c) as Tensor2D) : undefined }),
    );
    return swavLoss(preds, assignments, { temperature: 0.1 }).dataSync()[0]!;
  });
}

function lossOf(m: SwAV, views: Tensor[], labels: Tensor): number {
  const out = m.trainingStep(views, labels);
  const value = out.metrics.loss.dataSync()[0]!;
  tf.dispose([out.loss, ...Object.values(out.metrics)]);
  return value;
}

describe('SwAV', () => {
  before(async () => {
    await initEngine('cpu-js');
  });

  it('WeightNormLinear: y = x · V/‖V‖ column-wise, V is not re-normalised, and its gradient is orthogonal to each column (scale invariance)', () => {
    const layer = new WeightNormLinear(4, 3, new Rng(5));
    tf.tidy(() => layer.weight.assign(tf.mul(layer.weight, 7)));
    const x = tf.tensor2d(new Rng(6).normalArray(10 * 4), [10, 4]);
    const v = layer.weight.arraySync() as number[][];
    const norms = [0, 1, 2].map((k) => Math.hypot(...v.map((row) => row[k]!)));
    assert.ok(
      norms.every((n) => Math.abs(n - 1) > 0.1),
      'the parameter keeps its own norm',
    );
    const y = layer.forward(x).arraySync() as number[][];
    const xs = x.arraySync() as number[][];
    for (let i = 0; i < 10; i++)
      for (let k = 0; k < 3; k++) {
        const want = xs[i]!.reduce((s, xi, j) => s + (xi * v[j]![k]!) / norms[k]!, 0);
        assert.ok(Math.abs(y[i]![k]! - want) < 1e-5, `y[${i}][${k}]`);
      }
    const { grads } = tf.variableGrads(() => tf.sum(tf.square(layer.forward(x))) as Scalar, [layer.weight]);
    const g = grads[layer.weight.name]!.arraySync() as number[][];
    for (let k = 0; k < 3; k++) {
      const dot = v.reduce((s, row, j) => s + row[k]! * g[j]![k]!, 0);
      const gNorm = Math.hypot(...g.map((row) => row[k]!));
      assert.ok(gNorm > 1e-3 && Math.abs(dot) < 1e-4 * gNorm * norms[k]!, `column ${k}: <v, g> = ${dot}, |g| = ${gNorm}`);
    }
    tf.dispose([x, ...Object.values(grads)]);
    layer.dispose();
  });

  it('its loss is the swapped prediction of the Sinkhorn assignments of the global crops; the queue joins them from epochQueueStarts', () => {
    const m = build();
    const { views, labels } = crops(1);
    // Epoch 0: the queue is not used (its random rows would change the assignments).
    m.onTrainBatchStart({ step: 0, totalSteps: 4, epoch: 0 });
    const noQueue = lossOf(m, views, labels);
    assert.ok(Math.abs(noQueue - expectedLoss(m, views, false)) < 1e-5 * Math.abs(noQueue), `${noQueue}`);
    m.onTrainBatchEnd({ step: 1, totalSteps: 4, epoch: 0 });
    // The queue got the normalised projections of the two global crops.
    const z = tf.tidy(() => [0, 1].map((g) => l2NormalizeRows(m.projector.forward(m.backbone.forward(views[g]!))).arraySync() as number[][]));
    for (const g of [0, 1]) {
      const rows = m.queue!.rows(g).arraySync() as number[][];
      for (let i = 0; i < 6; i++) rows[i]!.forEach((value, d) => assert.ok(Math.abs(value - z[g]![i]![d]!) < 1e-6, `queue[${g}][${i}]`));
    }
    m.onTrainBatchStart({ step: 1, totalSteps: 4, epoch: 1 });
    const withQueue = lossOf(m, views, labels);
    assert.ok(Math.abs(withQueue - expectedLoss(m, views, true)) < 1e-5 * Math.abs(withQueue), `${withQueue}`);
    assert.ok(Math.abs(withQueue - noQueue) > 1e-3, `the queue changes the assignments: ${withQueue} vs ${noQueue}`);
    tf.dispose([...views, labels]);
    m.dispose();
  });

  it('prototypes get no gradient and no optimizer state during the first freezePrototypesEpochs epochs, then train', async () => {
    const m = build({ queueSize: 0 });
    const task = new SslTask(m, {
      ...{ optimizer: 'lars', lr: 0.6, classifierLr: 0.1, weightDecay: 1e-6, momentum: 0.9, larsEta: 0.02, larsClipLr: true },
      ...{ warmupEpochs: 0, warmupStartLr: 0, minLr: 0, globalBatch: 6 },
    });
    const strategy = new SingleDeviceStrategy();
    task.setup({ group: strategy.group });
    const { optimizer, scheduler } = task.configureOptimizers({ totalSteps: 4, stepsPerEpoch: 2 });
    const variables = m.trainableParameters();
    const { views, labels } = crops(2);
    const shape: [number, number, number, number] = [6, 8, 8, 1];
    const batch: MultiViewBatch = {
      ...{ views: views.map((v) => v.dataSync() as Float32Array), labels: labels.dataSync() as Int32Array },
      ...{ shape, shapes: views.map(() => shape), indices: new Int32Array(6), index: 0 },
    };
    const snapshot = () => ({
      prototypes: Float32Array.from(m.prototypes.weight.dataSync()),
      projector: Float32Array.from(m.projector.parameters()[0]!.dataSync()),
    });
    const slots = () => Object.keys(optimizer.stateDict().tensors).filter((n) => n.startsWith('prototypes.'));
    const trainStep = async (epoch: number, step: number) => {
      const progress = { epoch, step, batchInEpoch: 0, totalSteps: 4 };
      scheduler.apply(step);
      const acc = accumulateBatch(task, batch, variables);
      const { metrics } = await applyStep(acc, { strategy, optimizer, variables, adjust: (g) => task.adjustGradients(g, progress) });
      tf.dispose(Object.values(metrics.tensors));
    };
    const start = snapshot();
    await trainStep(0, 0);
    const afterFrozen = snapshot();
    assert.deepEqual(afterFrozen.prototypes, start.prototypes, 'frozen: not updated, not decayed');
    assert.notDeepEqual(afterFrozen.projector, start.projector);
    assert.deepEqual(slots(), [], 'frozen: no momentum');
    await trainStep(1, 1);
    assert.notDeepEqual(snapshot().prototypes, start.prototypes, 'epoch 1: the prototypes train');
    assert.ok(slots().length > 0);
    // The hook alone: only the prototypes' gradient is dropped, and only before freezePrototypesEpochs.
    const grads = Object.fromEntries(variables.map((v) => [v.name, v]));
    const kept = Object.keys(m.adjustGradients(grads, { step: 0, totalSteps: 4, epoch: 0 }));
    assert.deepEqual(
      kept,
      Object.keys(grads).filter((n) => n !== m.prototypes.weight.name),
    );
    assert.equal(Object.keys(m.adjustGradients(grads, { step: 0, totalSteps: 4, epoch: 1 })).length, variables.length);
    optimizer.dispose();
    tf.dispose([...views, labels]);
    m.dispose();
  });

  it('the gradient cache (chunks of 2) gives the gradients of one pass, the queued projections (no loss gradient) included', () => {
    const m = build();
    m.setup({ group: new SingleDeviceStrategy().group });
    m.onTrainBatchStart({ step: 0, totalSteps: 4, epoch: 1 });
    const { views, labels } = crops(3);
    const variables = m.trainableParameters();
    const whole = tf.variableGrads(() => {
      const out = m.trainingStep(views, labels);
      tf.dispose(Object.values(out.metrics));
      return out.loss;
    }, variables);
    const fresh = build();
    fresh.setup({ group: new SingleDeviceStrategy().group });
    fresh.onTrainBatchStart({ step: 0, totalSteps: 4, epoch: 1 });
    const chunked = gradCacheGradients(fresh, views, labels, 2, fresh.trainableParameters());
    const names = new Map(fresh.trainableParameters().map((v, i) => [v.name, variables[i]!.name]));
    let worst = 0;
    for (const [name, g] of Object.entries(chunked.grads)) {
      const a = g.dataSync();
      const b = whole.grads[names.get(name)!]!.dataSync();
      const scale = Math.max(...Array.from(b, Math.abs), 1e-6);
      for (let i = 0; i < a.length; i++) worst = Math.max(worst, Math.abs(a[i]! - b[i]!) / scale);
    }
    assert.ok(worst < 1e-4, `worst relative difference ${worst}`);
    tf.dispose([...views, labels, ...Object.values(whole.grads), whole.value, ...Object.values(chunked.grads)]);
    m.dispose();
    fresh.dispose();
  });
});
