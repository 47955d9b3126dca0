import { strict as assert } from 'node:assert';
import { initEngine } from '../../src/core/engine.js';
import { Rng } from '../../src/core/random.js';
import { tf, type Tensor2D } from '../../src/core/tf.js';
import { simclrViews, viewsFor } from '../../src/data/augment/recipes.js';
import { syntheticDataset } from '../../src/data/synthetic.js';
import { ticoLoss } from '../../src/losses/index.js';
import { TiCo } from '../../src/methods/index.js';
import { getMethodClass, methodNames, resolveMethodArgs } from '../../src/methods/registry.js';
import { batchOf, buildMethod, methodContext, N, runStep, worstDifference } from './accumulation.js';
import { TicoCovariancePerMicroBatch } from './tico-covariance-per-micro-batch.js';

const SMALL = { projHiddenDim: 8, projOutputDim: 4 };
const TOL = 1e-4;

describe('method tico', () => {
  before(async () => {
    await initEngine('cpu-js');
  });

  it("is registered with lightly's CIFAR-10 benchmark recipe: projector 1024 -> 256, tau 0.996 -> 1, beta 0.9, rho 20, SGD 0.12 per 256, weight decay 5e-4, SimCLR's views", () => {
    assert.ok(methodNames().includes('tico'));
    assert.equal(getMethodClass('tico'), TiCo);
    assert.deepEqual(resolveMethodArgs('tico', {}), { baseTau: 0.996, finalTau: 1, projHiddenDim: 1024, projOutputDim: 256, beta: 0.9, rho: 20 });
    assert.deepEqual(TiCo.optimDefaults, { optimizer: 'sgd', lr: 0.12, classifierLr: 0.1, weightDecay: 5e-4 });
    const cifarLike = syntheticDataset({ split: 'train', size: 4, imageSize: 32, channels: 3 });
    assert.deepEqual(viewsFor(TiCo.viewRecipe, cifarLike), simclrViews(cifarLike));
    assert.match(TiCo.paper, /^Zhu, Liu & Huang 2022, "TiCo/);
    assert.throws(() => resolveMethodArgs('tico', { beta: 1 }), /method_args\.beta: 1 is not allowed/);
  });

  it('has a projector Linear-BN-ReLU-Linear with an EMA copy and a [D, D] running covariance buffer of zeros, in the state dict', () => {
    const m = buildMethod('tico', SMALL) as TiCo;
    assert.deepEqual(
      m.projector.namedChildren().map(([, l]) => l.constructor.name),
      ['Linear', 'LayerNorm', 'ReLU', 'Linear'],
    );
    assert.deepEqual(m.covariance.shape, [4, 4]);
    assert.deepEqual(Array.from(m.stateDict().covariance!.dataSync()), new Array(16).fill(0));
    assert.ok(Object.keys(m.stateDict()).some((k) => k.startsWith('momentumProjector.')));
    m.dispose();
  });

  it('one step: the loss is ticoLoss(online view 1, momentum view 2, the step-start covariance); the covariance moves after the step to that of the batch', async () => {
    const m = buildMethod('tico', SMALL) as TiCo;
    const batch = batchOf(2, 0, 2 * N);
    const expected = tf.tidy(() => {
      const [v1, v2] = batch.views.map((v) => tf.tensor4d(v, batch.shape));
      const za = m.projector.forward(m.backbone.forward(v1!)) as Tensor2D;
      const zb = m.momentumProjector.forward(m.momentumBackbone.forward(v2!)) as Tensor2D;
      const { loss, covariance } = ticoLoss(za, zb, tf.zeros([4, 4]), { beta: 0.9, rho: 20 });
      return { loss: loss.dataSync()[0]!, covariance: Float32Array.from(covariance.dataSync()) };
    });
    const step = await runStep(m, [batch]);
    assert.ok(Math.abs(step.loss - expected.loss) < 1e-5 * Math.abs(expected.loss), `${step.loss} vs ${expected.loss}`);
    const got = worstDifference({ covariance: step.state.covariance! }, { covariance: expected.covariance }, ['covariance']);
    assert.ok(got.difference < 1e-5, `covariance differs by ${got.difference}`);
  });

  it("gradient accumulation: 2 micro-batches of N leave the batch of 2N's covariance (moved once, after the step), each micro-batch's loss the one it gives alone from the step's start; the covariance moved per micro-batch fails both", async () => {
    const whole = await runStep(buildMethod('tico', SMALL), [batchOf(2, 0, 2 * N)]);
    const halves = [batchOf(2, 0, N), batchOf(2, N, N)];
    const accumulated = await runStep(buildMethod('tico', SMALL), halves);
    const alone = await Promise.all(halves.map((h) => runStep(buildMethod('tico', SMALL), [h])));
    const perMicroBatch = await runStep(new TicoCovariancePerMicroBatch(methodContext('tico', SMALL)), halves);
    assert.ok(Math.max(...Array.from(whole.state.covariance!, Math.abs)) > 1e-3, 'the covariance moved');
    const got = worstDifference(accumulated.state, whole.state, ['covariance']);
    assert.ok(got.difference < TOL, `accumulated vs one batch: the covariance differs by ${got.difference}`);
    // The loss couples the rows of a micro-batch (C's batch part), so the parameters are not the batch of 2N's: the loss is the micro-batches' mean.
    const meanAlone = (alone[0]!.loss + alone[1]!.loss) / 2;
    assert.ok(Math.abs(accumulated.loss - meanAlone) < TOL * Math.abs(meanAlone), `loss ${accumulated.loss} vs ${meanAlone}`);
    const covariance = worstDifference(perMicroBatch.state, whole.state, ['covariance']);
    assert.ok(covariance.difference > 0.05, `negative control: the per-micro-batch covariance differs by only ${covariance.difference}`);
    assert.ok(Math.abs(perMicroBatch.loss - meanAlone) > TOL * Math.abs(meanAlone), 'negative control: the second micro-batch saw a moved covariance');
  });
});

describe('losses/ticoLoss', () => {
  const rng = new Rng(5);
  const randn = (n: number, d: number) => tf.tensor2d(rng.normalArray(n * d), [n, d]);

  it('identical views and a zero covariance with rho 0 give 0; the contrast term is rho · mean_i ẑ_i C ẑ_iᵀ; the new covariance is beta C + (1 − beta) ẑᵀẑ / N', () => {
    tf.tidy(() => {
      const z = randn(6, 3);
      const zero = tf.zeros([3, 3]) as Tensor2D;
      assert.ok(Math.abs(ticoLoss(z, z, zero, { beta: 0.5, rho: 0 }).loss.dataSync()[0]!) < 1e-6);
      const zn = tf.div(z, tf.norm(z, 2, 1, true)) as Tensor2D;
      const prior = tf.eye(3) as Tensor2D;
      const { loss, covariance } = ticoLoss(z, z, prior, { beta: 0.5, rho: 2 });
      const c = tf.add(tf.mul(prior, 0.5), tf.mul(tf.div(tf.matMul(zn, zn, true, false), 6), 0.5));
      const contrast = tf.mean(tf.sum(tf.mul(tf.matMul(zn, c), zn), 1));
      assert.ok(Math.abs(loss.dataSync()[0]! - 2 * contrast.dataSync()[0]!) < 1e-5);
      assert.ok(tf.max(tf.abs(tf.sub(covariance, c))).dataSync()[0]! < 1e-6);
    });
  });

  it('the covariance state gets no gradient; bad shapes and hyper-parameters are refused', () => {
    tf.tidy(() => {
      const [a, b, c] = [randn(4, 3), randn(4, 3), tf.eye(3) as Tensor2D];
      const [gc] = tf.grads((cov: tf.Tensor) => ticoLoss(a, b, cov as Tensor2D).loss)([c]);
      assert.equal(tf.max(tf.abs(gc!)).dataSync()[0], 0);
      assert.throws(() => ticoLoss(a, b, tf.eye(2) as Tensor2D), /covariance must be float32 \[3, 3\]/);
      assert.throws(() => ticoLoss(a, b, c, { beta: 1, rho: 1 }), /beta: 1 is not allowed; expected a number in \[0, 1\)/);
      assert.throws(() => ticoLoss(a, b, c, { beta: 0.9, rho: -1 }), /rho: -1 is not allowed/);
    });
  });
});
