import { strict as assert } from 'node:assert';
import { createBackbone } from '../../src/backbones/index.js';
import { Rng } from '../../src/core/random.js';
import { tf, type Tensor, type Tensor2D } from '../../src/core/tf.js';
import { defaultCrops } from '../../src/data/augment/crops.js';
import { symmetricWeakViews, viewsFor } from '../../src/data/augment/recipes.js';
import { syntheticDataset } from '../../src/data/synthetic.js';
import { fastSiamLoss, negativeCosineLoss } from '../../src/losses/index.js';
import { FastSiam, type MethodArgs } from '../../src/methods/index.js';
import { getMethodClass, methodNames, resolveMethodArgs } from '../../src/methods/registry.js';

const SMALL = { projHiddenDim: 8, projOutputDim: 6, predHiddenDim: 4 };

function build(args: MethodArgs = SMALL): FastSiam {
  return new FastSiam({
    createBackbone: (rng) => createBackbone('mlp', { inChannels: 1, imageSize: 8, rng, mlpHidden: [16], norm: 'batch' }),
    numClasses: 3,
    rng: new Rng(3),
    args: resolveMethodArgs('fastsiam', args),
    norm: 'batch',
  });
}

function batch(seed: number, views: number, n = 10): { views: Tensor[]; labels: Tensor } {
  const rng = new Rng(seed);
  return {
    views: Array.from({ length: views }, () => tf.tensor4d(rng.normalArray(n * 64), [n, 8, 8, 1])),
    labels: tf.tensor1d(
      Array.from({ length: n }, (_, i) => i % 3),
      'int32',
    ),
  };
}

const maxAbs = (t: Tensor) => tf.tidy(() => tf.max(tf.abs(t)).dataSync()[0]!);

describe('method fastsiam', () => {
  it("is registered with lightly's CIFAR-10 benchmark recipe: SimSiam's heads 2048/512, 4 views, SGD 0.06 at batch 512 (0.03 per 256), weight decay 5e-4", () => {
    assert.ok(methodNames().includes('fastsiam'));
    assert.equal(getMethodClass('fastsiam'), FastSiam);
    assert.deepEqual(resolveMethodArgs('fastsiam', {}), { projHiddenDim: 2048, projOutputDim: 2048, predHiddenDim: 512 });
    assert.deepEqual(FastSiam.optimDefaults, { optimizer: 'sgd', lr: 0.03, classifierLr: 0.1, weightDecay: 5e-4 });
    assert.deepEqual(FastSiam.crops, { globalCrops: 4, multiCrop: false });
    const cifarLike = syntheticDataset({ split: 'train', size: 4, imageSize: 32, channels: 3 });
    assert.deepEqual(viewsFor(FastSiam.viewRecipe, cifarLike), symmetricWeakViews(cifarLike));
    assert.equal(defaultCrops(FastSiam.crops, symmetricWeakViews(cifarLike))[0]!.count, 4);
    assert.match(FastSiam.paper, /^Pototzky et al\. 2022, "FastSiam/);
  });

  it("has SimSiam's heads (Linear-BN-ReLU x2, Linear-BN without affine; Linear-BN-ReLU-Linear) and one optimizer group besides the classifier's", () => {
    const m = build();
    const kinds = (s: typeof m.projector) => s.namedChildren().map(([, l]) => l.constructor.name);
    assert.deepEqual(kinds(m.projector), ['Linear', 'BatchNorm', 'ReLU', 'Linear', 'BatchNorm', 'ReLU', 'Linear', 'BatchNorm']);
    assert.deepEqual(kinds(m.predictor), ['Linear', 'BatchNorm', 'ReLU', 'Linear']);
    const groups = m.parameterGroups();
    assert.deepEqual(
      groups.map((g) => [g.classifier, g.staticLr ?? false]),
      [
        [false, false],
        [true, false],
      ],
    );
    assert.ok(groups[0]!.params.some(([name]) => name.startsWith('predictor.')));
    m.dispose();
  });

  it('one training step on 4 views: the loss is fastSiamLoss of the predictions and projections, with the same gradients', () => {
    const m = build();
    const { views, labels } = batch(7, 4);
    const methodVars = m.parameterGroups()[0]!.params.map(([, v]) => v);
    const viaStep = tf.variableGrads(() => {
      const out = m.trainingStep(views, labels);
      const loss = tf.clone(out.metrics.loss!);
      tf.dispose([out.loss, ...Object.values(out.metrics)]);
      return loss;
    }, methodVars);
    const direct = tf.variableGrads(() => {
      const z = views.map((v) => m.projector.forward(m.backbone.forward(v))) as Tensor2D[];
      return fastSiamLoss(
        z.map((zi) => m.predictor.forward(zi) as Tensor2D),
        z,
      );
    }, methodVars);
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

describe('losses/fastSiamLoss', () => {
  const rng = new Rng(11);
  const randn = (n: number, d: number) => tf.tensor2d(rng.normalArray(n * d), [n, d]);

  it("with two views it is SimSiam's symmetrised negative cosine loss", () => {
    tf.tidy(() => {
      const [p0, p1, z0, z1] = [randn(6, 5), randn(6, 5), randn(6, 5), randn(6, 5)];
      const simsiam = tf.div(tf.add(negativeCosineLoss(p0, z1), negativeCosineLoss(p1, z0)), 2);
      assert.ok(Math.abs(fastSiamLoss([p0, p1], [z0, z1]).dataSync()[0]! - simsiam.dataSync()[0]!) < 1e-6);
    });
  });

  it('each target is the mean of the OTHER views: predictions equal to that mean give −1; the projections get no gradient', () => {
    tf.tidy(() => {
      const z = [randn(5, 4), randn(5, 4), randn(5, 4)];
      const p = z.map((_, i) => tf.mul(tf.addN(z.filter((__, j) => j !== i)), 3) as Tensor2D);
      assert.ok(Math.abs(fastSiamLoss(p, z).dataSync()[0]! + 1) < 1e-6);
      // Predicting a view's own projection is not the target.
      assert.ok(fastSiamLoss(z, z).dataSync()[0]! > -0.99);
      const grads = tf.grads((...zs: Tensor[]) => fastSiamLoss(p, zs as Tensor2D[]))(z);
      for (const g of grads) assert.equal(maxAbs(g), 0);
    });
  });

  it('refuses fewer than two views, unequal counts and mismatched shapes', () => {
    tf.tidy(() => {
      assert.throws(() => fastSiamLoss([randn(4, 3)], [randn(4, 3)]), /needs V >= 2 predictions/);
      assert.throws(() => fastSiamLoss([randn(4, 3), randn(4, 3)], [randn(4, 3)]), /needs V >= 2 predictions and as many projections/);
      assert.throws(() => fastSiamLoss([randn(4, 3), randn(4, 3)], [randn(4, 3), randn(4, 2)]), /must have the same shape/);
    });
  });
});
