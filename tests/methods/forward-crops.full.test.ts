import { strict as assert } from 'node:assert';
import { createBackbone, type Backbone } from '../../src/backbones/index.js';
import type { NormKind } from '../../src/core/layers.js';
import { Rng } from '../../src/core/random.js';
import { tf, type Scalar, type Tensor } from '../../src/core/tf.js';
import { crossEntropy, forwardCrops, SimCLR, type BaseMethod } from '../../src/methods/index.js';
import { gradCacheGradients } from '../../src/methods/grad-cache.js';
import { resolveMethodArgs } from '../../src/methods/registry.js';
import { randn } from '../core/helpers.js';
import { MultiCropSimCLR } from './multicrop-method.js';

/** Sizes of the views of a multi-crop batch, in batch order (sizes interleaved on purpose). */
const SIZES = [16, 7, 16, 7, 9, 7];
const B = 4;

function backbone(norm: NormKind, seed = 1): Backbone {
  return createBackbone('tiny_resnet', { inChannels: 1, imageSize: 16, rng: new Rng(seed), norm });
}

function views(seed: number): Tensor[] {
  return SIZES.map((s, v) => randn([B, s, s, 1], seed * 100 + v));
}

function maxAbsDiff(a: Tensor, b: Tensor): number {
  return tf.tidy(() => tf.max(tf.abs(tf.sub(a, b))).dataSync()[0]);
}

/** `forward`, counting its calls and the inputs it was given. */
function spy(forward: (x: Tensor) => Tensor): { forward: (x: Tensor) => Tensor; inputs: Tensor[] } {
  const inputs: Tensor[] = [];
  return {
    inputs,
    forward: (x) => {
      inputs.push(x);
      return forward(x);
    },
  };
}

function build(cls: typeof SimCLR, norm: NormKind): BaseMethod {
  return new cls({
    createBackbone: (rng) => createBackbone('tiny_resnet', { inChannels: 1, imageSize: 16, rng, norm }),
    numClasses: 3,
    rng: new Rng(5),
    args: resolveMethodArgs('simclr', { projHiddenDim: 16, projOutputDim: 8 }),
    norm,
  });
}

describe('methods/forwardCrops: one backbone pass per crop size', () => {
  it('with per-sample normalisation (group norm) equals forwarding each view alone: features and parameter gradients', () => {
    const net = backbone('group');
    const xs = views(1);
    const weights = SIZES.map((_, v) => randn([B, net.featureDim], 50 + v));
    const objective = (features: Tensor[]) => tf.addN(features.map((f, v) => tf.sum(tf.mul(f, weights[v])))) as Scalar;
    const counted = spy((x) => net.forward(x));
    const grouped = tf.variableGrads(() => {
      const features = forwardCrops(xs, counted.forward);
      features.forEach((f, v) => assert.deepEqual(f.shape, [B, net.featureDim], `view ${v}`));
      return objective(features);
    });
    assert.deepEqual(
      counted.inputs.map((x) => x.shape),
      [
        [2 * B, 16, 16, 1],
        [3 * B, 7, 7, 1],
        [B, 9, 9, 1],
      ],
      'one pass per size, in order of first appearance: 16 px (views 0, 2), 7 px (views 1, 3, 5), 9 px (view 4)',
    );
    assert.equal(counted.inputs[2], xs[4], 'a size with one view is forwarded as it is');
    const perView = tf.variableGrads(() => objective(xs.map((x) => net.forward(x))));
    const features = forwardCrops(xs, (x) => net.forward(x));
    xs.forEach((x, v) => {
      const alone = net.forward(x);
      assert.ok(maxAbsDiff(features[v], alone) < 1e-5, `view ${v}: ${maxAbsDiff(features[v], alone)}`);
    });
    assert.ok(Math.abs(grouped.value.dataSync()[0] - perView.value.dataSync()[0]) < 1e-3);
    for (const [name, g] of Object.entries(perView.grads)) {
      const scale = tf.tidy(() => tf.max(tf.abs(g)).dataSync()[0]);
      assert.ok(maxAbsDiff(grouped.grads[name], g) <= 1e-4 * Math.max(scale, 1e-3), `gradient of ${name}`);
    }
    net.dispose();
  });

  it('with batch norm in training mode normalises over each size group (not per view), as SwAV and DINO do', () => {
    const net = backbone('batch');
    const xs = views(2);
    const features = forwardCrops(xs, (x) => net.forward(x));
    const group16 = tf.split(net.forward(tf.concat([xs[0], xs[2]], 0)), 2, 0);
    assert.ok(maxAbsDiff(features[0], group16[0]) < 1e-5);
    assert.ok(maxAbsDiff(features[2], group16[1]) < 1e-5);
    assert.ok(maxAbsDiff(features[0], net.forward(xs[0])) > 1e-3, 'per-view statistics would differ');
    net.eval();
    const evalFeatures = forwardCrops(xs, (x) => net.forward(x));
    xs.forEach((x, v) => assert.ok(maxAbsDiff(evalFeatures[v], net.forward(x)) < 1e-5, `eval mode, view ${v}`));
    net.dispose();
  });
});

describe('methods: crop policies in the training step', () => {
  it('a two-view method forwards each view alone (batch statistics as before multi-crop); a multi-crop method once per size', () => {
    for (const [cls, expected] of [
      [SimCLR, [16, 16]],
      [MultiCropSimCLR, [16, 7, 9]],
    ] as const) {
      const m = build(cls, 'batch');
      const all = views(3);
      const xs = cls === SimCLR ? [all[0], all[2]] : all;
      const calls: number[] = [];
      const forward = m.backbone.forward.bind(m.backbone);
      m.backbone.forward = (x: Tensor) => {
        calls.push(x.shape[1]!);
        return forward(x);
      };
      tf.tidy(() => {
        const features = m.viewFeatures(xs);
        assert.equal(features.length, xs.length);
      });
      assert.deepEqual(calls, expected, cls.name);
      m.dispose();
    }
  });

  it('the online classifier of a multi-crop method sees the global crops only (as solo-learn)', () => {
    const m = build(MultiCropSimCLR, 'batch');
    const labels = tf.tensor1d([0, 1, 2, 1], 'int32');
    for (const [i, p] of m.classifier.parameters().entries()) p.assign(randn(p.shape, 90 + i)); // not its zero-bias start: logits depend on the rows
    tf.tidy(() => {
      const features = SIZES.map((_, v) => randn([B, m.backbone.featureDim], 70 + v));
      const terms = m.classifierTerms(features, labels);
      const global = crossEntropy(m.classifier.forward(tf.concat(features.slice(0, 2), 0)), tf.tile(labels, [2]));
      const all = crossEntropy(m.classifier.forward(tf.concat(features, 0)), tf.tile(labels, [SIZES.length]));
      assert.ok(Math.abs(terms.class_loss.dataSync()[0] - global.dataSync()[0]) < 1e-6);
      assert.ok(Math.abs(terms.class_loss.dataSync()[0] - all.dataSync()[0]) > 1e-4);
    });
    m.dispose();
  });

  it('multi-crop with the gradient cache (group norm) gives the plain step gradients', () => {
    const m = build(MultiCropSimCLR, 'group');
    const xs = views(4);
    const labels = tf.tensor1d([0, 1, 2, 1], 'int32');
    const variables = m.trainableParameters();
    const plain = tf.variableGrads(() => m.trainingStep(xs, labels).loss, variables);
    const cached = gradCacheGradients(m, xs, labels, 3, variables);
    assert.ok(Number.isFinite(plain.value.dataSync()[0]));
    for (const [name, g] of Object.entries(plain.grads)) {
      const scale = tf.tidy(() => tf.max(tf.abs(g)).dataSync()[0]);
      assert.ok(maxAbsDiff(cached.grads[name], g) <= 1e-4 * Math.max(scale, 1e-6), `gradient of ${name}`);
    }
    m.dispose();
  });
});
