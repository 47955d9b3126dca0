import { strict as assert } from 'node:assert';
import { createBackbone } from '../../src/backbones/index.js';
import { IterNorm } from '../../src/core/iter-norm.js';
import type { NormKind } from '../../src/core/layers.js';
import { Rng } from '../../src/core/random.js';
import { tf, type Tensor, type Tensor2D } from '../../src/core/tf.js';
import { vicregViews, viewsFor } from '../../src/data/augment/recipes.js';
import { syntheticDataset } from '../../src/data/synthetic.js';
import { vibcregLoss } from '../../src/losses/index.js';
import { hasBatchNorm, VIbCReg, type MethodArgs } from '../../src/methods/index.js';
import { getMethodClass, methodNames, resolveMethodArgs } from '../../src/methods/registry.js';

const SMALL = { projHiddenDim: 8, projOutputDim: 8, iternormGroups: 2 };

function build(args: MethodArgs = SMALL, norm: NormKind = 'batch'): VIbCReg {
  return new VIbCReg({
    createBackbone: (rng) => createBackbone('mlp', { inChannels: 1, imageSize: 8, rng, mlpHidden: [16], norm }),
    numClasses: 3,
    rng: new Rng(3),
    args: resolveMethodArgs('vibcreg', args),
    norm,
  });
}

function batch(seed: number, n = 12): { views: Tensor[]; labels: Tensor } {
  const rng = new Rng(seed);
  return {
    views: [0, 1].map(() => tf.tensor4d(rng.normalArray(n * 64), [n, 8, 8, 1])),
    labels: tf.tensor1d(
      Array.from({ length: n }, (_, i) => i % 3),
      'int32',
    ),
  };
}

const kinds = (m: VIbCReg) => m.projector.namedChildren().map(([, l]) => l.constructor.name);

describe('method vibcreg', () => {
  it("is registered with solo-learn's CIFAR recipe: projector 2048 ×3 with IterNorm (64 groups, T = 5), weights 25 / 25 / 200, LARS 0.3, VICReg's views", () => {
    assert.ok(methodNames().includes('vibcreg'));
    assert.equal(getMethodClass('vibcreg'), VIbCReg);
    assert.deepEqual(resolveMethodArgs('vibcreg', {}), {
      projHiddenDim: 2048,
      projOutputDim: 2048,
      simLossWeight: 25,
      varLossWeight: 25,
      covLossWeight: 200,
      iternorm: true,
      iternormGroups: 64,
      iternormIterations: 5,
    });
    assert.deepEqual(VIbCReg.optimDefaults, { optimizer: 'lars', lr: 0.3, classifierLr: 0.1, weightDecay: 1e-4 });
    const cifarLike = syntheticDataset({ split: 'train', size: 4, imageSize: 32, channels: 3 });
    assert.deepEqual(viewsFor(VIbCReg.viewRecipe, cifarLike), vicregViews(cifarLike));
    assert.match(VIbCReg.paper, /^Lee & Aune 2021, "VIbCReg/);
    assert.throws(() => resolveMethodArgs('vibcreg', { iternorm: 2 }), /method_args\.iternorm: 2 is not allowed; expected true or false/);
  });

  it('has a projector Linear-BN-GELU-Linear-BN-GELU-Linear-IterNorm (without IterNorm for iternorm=false)', () => {
    const m = build();
    assert.deepEqual(kinds(m), ['Linear', 'BatchNorm', 'GELU', 'Linear', 'BatchNorm', 'GELU', 'Linear', 'IterNorm']);
    const iterNorm = m.projector.namedChildren().at(-1)![1] as IterNorm;
    assert.deepEqual([iterNorm.groups, iterNorm.groupSize, iterNorm.iterations], [2, 4, 5]);
    const plain = build({ ...SMALL, iternorm: false });
    assert.deepEqual(kinds(plain), ['Linear', 'BatchNorm', 'GELU', 'Linear', 'BatchNorm', 'GELU', 'Linear']);
    m.dispose();
    plain.dispose();
  });

  it("one training step: the loss is vibcregLoss of the projections with the same gradients; IterNorm's parameters learn and its running statistics move", () => {
    const m = build();
    const { views, labels } = batch(7);
    const methodVars = m.parameterGroups()[0]!.params.map(([, v]) => v);
    const iterNorm = m.projector.namedChildren().at(-1)![1] as IterNorm;
    const runningBefore = iterNorm.runningWm.dataSync().slice();
    const viaStep = tf.variableGrads(() => {
      const out = m.trainingStep(views, labels);
      const loss = tf.clone(out.metrics.loss!);
      tf.dispose([out.loss, ...Object.values(out.metrics)]);
      return loss;
    }, methodVars);
    assert.notDeepEqual(iterNorm.runningWm.dataSync(), runningBefore);
    const direct = tf.variableGrads(() => {
      const [z1, z2] = views.map((v) => m.projector.forward(m.backbone.forward(v))) as Tensor2D[];
      return vibcregLoss(z1!, z2!, { simWeight: 25, varWeight: 25, covWeight: 200 });
    }, methodVars);
    const loss = viaStep.value.dataSync()[0]!;
    assert.ok(Number.isFinite(loss) && Math.abs(loss - direct.value.dataSync()[0]!) <= 1e-5 * Math.abs(loss), `${loss} vs ${direct.value.dataSync()[0]}`);
    for (const v of methodVars) {
      const [a, b] = [viaStep.grads[v.name]!, direct.grads[v.name]!];
      const scale = Math.max(
        1e-6,
        tf.tidy(() => tf.max(tf.abs(b)).dataSync()[0]!),
      );
      assert.ok(tf.tidy(() => tf.max(tf.abs(tf.sub(a, b))).dataSync()[0]!) <= 1e-4 * scale, v.name);
    }
    for (const v of [iterNorm.weight!, iterNorm.bias!]) assert.ok(tf.tidy(() => tf.norm(viaStep.grads[v.name]!).dataSync()[0]!) > 0, `${v.name} learns`);
    tf.dispose([viaStep.value, direct.value, ...Object.values(viaStep.grads), ...Object.values(direct.grads), ...views, labels]);
    m.dispose();
  });

  it('IterNorm couples the samples: with --norm layer the method still counts as batch-coupled (the gradient cache refuses it), unless iternorm=false', () => {
    const m = build(SMALL, 'layer');
    assert.equal(hasBatchNorm(m), true);
    const plain = build({ ...SMALL, iternorm: false }, 'layer');
    assert.equal(hasBatchNorm(plain), false);
    m.dispose();
    plain.dispose();
  });
});
