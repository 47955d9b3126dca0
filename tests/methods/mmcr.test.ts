import { strict as assert } from 'node:assert';
import { createBackbone } from '../../src/backbones/index.js';
import { initEngine } from '../../src/core/engine.js';
import { nuclearNorm } from '../../src/core/eigen.js';
import { Rng } from '../../src/core/random.js';
import { tf, type Tensor, type Tensor2D } from '../../src/core/tf.js';
import { byolViews, viewsFor } from '../../src/data/augment/recipes.js';
import { syntheticDataset } from '../../src/data/synthetic.js';
import { mmcrLoss } from '../../src/losses/index.js';
import { MMCR, type MethodArgs } from '../../src/methods/index.js';
import { getMethodClass, methodNames, resolveMethodArgs } from '../../src/methods/registry.js';

const SMALL = { projHiddenDim: 8, projOutputDim: 6 };

function build(args: MethodArgs = SMALL): MMCR {
  return new MMCR({
    createBackbone: (rng) => createBackbone('mlp', { inChannels: 1, imageSize: 8, rng, mlpHidden: [16], norm: 'batch' }),
    numClasses: 3,
    rng: new Rng(3),
    args: resolveMethodArgs('mmcr', args),
    norm: 'batch',
  });
}

const maxAbs = (t: Tensor) => tf.tidy(() => tf.max(tf.abs(t)).dataSync()[0]!);

describe('method mmcr', () => {
  before(async () => {
    await initEngine('cpu-js');
  });

  it('is registered with the official CIFAR recipe: projector 512 -> 128 without biases, lambda 0, AdamW 1e-3, weight decay 1e-6; 8 views of the byol recipe', () => {
    assert.ok(methodNames().includes('mmcr'));
    assert.equal(getMethodClass('mmcr'), MMCR);
    assert.deepEqual(resolveMethodArgs('mmcr', {}), { projHiddenDim: 512, projOutputDim: 128, lambda: 0 });
    assert.deepEqual(MMCR.optimDefaults, { optimizer: 'adamw', lr: 1e-3, classifierLr: 1e-3, weightDecay: 1e-6 });
    assert.deepEqual(MMCR.crops, { globalCrops: 8, multiCrop: false });
    const cifarLike = syntheticDataset({ split: 'train', size: 4, imageSize: 32, channels: 3 });
    assert.deepEqual(viewsFor(MMCR.viewRecipe, cifarLike), byolViews(cifarLike));
    assert.match(MMCR.paper, /^Yerxa et al\. 2023/);
    const m = build();
    assert.deepEqual(
      m.projector.namedChildren().map(([, l]) => l.constructor.name),
      ['Linear', 'BatchNorm', 'ReLU', 'Linear'],
    );
    assert.ok(!Object.keys(m.stateDict()).some((k) => k.startsWith('projector.') && k.endsWith('.bias') && !k.includes('1.')), 'no Linear bias');
    m.dispose();
  });

  it('one training step on 8 views: the loss is mmcrLoss of the projections, with the same gradients', () => {
    const m = build({ ...SMALL, lambda: 0.1 });
    const rng = new Rng(7);
    const views = Array.from({ length: 8 }, () => tf.tensor4d(rng.normalArray(10 * 64), [10, 8, 8, 1]));
    const labels = tf.tensor1d(
      Array.from({ length: 10 }, (_, i) => i % 3),
      'int32',
    );
    const methodVars = m.parameterGroups()[0]!.params.map(([, v]) => v);
    const viaStep = tf.variableGrads(() => {
      const out = m.trainingStep(views, labels);
      const loss = tf.clone(out.metrics.loss!);
      tf.dispose([out.loss, ...Object.values(out.metrics)]);
      return loss;
    }, methodVars);
    const direct = tf.variableGrads(
      () =>
        mmcrLoss(
          views.map((v) => m.projector.forward(m.backbone.forward(v)) as Tensor2D),
          { lambda: 0.1 },
        ),
      methodVars,
    );
    const loss = viaStep.value.dataSync()[0]!;
    assert.ok(Number.isFinite(loss) && Math.abs(loss - direct.value.dataSync()[0]!) <= 1e-5 * Math.abs(loss), `${loss} vs ${direct.value.dataSync()[0]}`);
    for (const v of methodVars) {
      const [a, b] = [viaStep.grads[v.name]!, direct.grads[v.name]!];
      assert.ok(maxAbs(tf.sub(a, b)) <= 1e-4 * Math.max(1e-6, maxAbs(b)), v.name);
    }
    tf.dispose([viaStep.value, direct.value, ...Object.values(viaStep.grads), ...Object.values(direct.grads), ...views, labels]);
    m.dispose();
  });
});

describe('losses/mmcrLoss', () => {
  const rng = new Rng(13);
  const randn = (n: number, d: number) => tf.tensor2d(rng.normalArray(n * d), [n, d]);

  it("is −‖C‖_* of the normalised views' centroids, plus lambda times the mean per-sample nuclear norm", () => {
    tf.tidy(() => {
      const views = [randn(6, 4), randn(6, 4), randn(6, 4)];
      const unit = views.map((v) => tf.div(v, tf.norm(v, 2, 1, true)) as Tensor2D);
      const c = tf.div(tf.addN(unit), 3) as Tensor2D;
      const capacity = -nuclearNorm(c).dataSync()[0]!;
      assert.ok(Math.abs(mmcrLoss(views, { lambda: 0 }).dataSync()[0]! - capacity) < 1e-5);
      const local = tf.mean(nuclearNorm(tf.stack(unit, 2) as tf.Tensor3D)).dataSync()[0]!;
      assert.ok(Math.abs(mmcrLoss(views, { lambda: 0.5 }).dataSync()[0]! - (capacity + 0.5 * local)) < 1e-5);
    });
  });

  it('identical views of orthogonal samples: the centroids are orthonormal rows, ‖C‖_* = N; bad input is refused', () => {
    tf.tidy(() => {
      const eye = tf.eye(4) as Tensor2D;
      assert.ok(Math.abs(mmcrLoss([eye, tf.mul(eye, 3) as Tensor2D], { lambda: 0 }).dataSync()[0]! + 4) < 1e-5);
      assert.throws(() => mmcrLoss([eye], { lambda: 0 }), /needs V >= 2 views/);
      assert.throws(() => mmcrLoss([eye, eye], { lambda: -1 }), /lambda: -1 is not allowed/);
      assert.throws(() => mmcrLoss([eye, randn(4, 3)], { lambda: 0 }), /must have the same shape/);
    });
  });
});
