/**
 * vit_tiny / vit_small: names, parameter counts (timm's formula), shapes at the size the
 * position embeddings are made for and at multi-crop sizes, the patch-size option, gradients
 * reaching resized position embeddings, and no tensor leak over training steps.
 * (Numerical agreement with PyTorch: vit-parity.test.ts.)
 */
import assert from 'node:assert/strict';
import { createBackbone, VisionTransformer, type Backbone, type BackboneOptions } from '../../src/backbones/index.js';
import { initEngine } from '../../src/core/engine.js';
import { UserError } from '../../src/core/errors.js';
import { Rng } from '../../src/core/random.js';
import { tf } from '../../src/core/tf.js';
import { TransformerBlock } from '../../src/core/transformer.js';
import { randn } from '../core/helpers.js';

/** timm's VisionTransformer parameter count (no head): patch conv, [CLS], position embeddings, blocks, final norm. */
function timmParameterCount(dim: number, depth: number, mlpRatio: number, patch: number, channels: number, grid: number): number {
  const hidden = dim * mlpRatio;
  const linear = (i: number, o: number) => i * o + o;
  const block = 2 * 2 * dim + linear(dim, 3 * dim) + linear(dim, dim) + linear(dim, hidden) + linear(hidden, dim);
  return linear(patch * patch * channels, dim) + dim + (1 + grid * grid) * dim + depth * block + 2 * dim;
}

function build(name: string, overrides: Partial<BackboneOptions> = {}): Backbone {
  return createBackbone(name, { inChannels: 3, imageSize: 32, rng: new Rng(1), ...overrides });
}

function outputShape(net: Backbone, batch: number, size: number, channels: number): number[] {
  const x = randn([batch, size, size, channels], 2);
  const y = net.forward(x);
  assert.ok(y.dataSync().every(Number.isFinite));
  tf.dispose([x, y]);
  return y.shape;
}

describe('backbones: Vision Transformers', () => {
  before(async () => {
    await initEngine('cpu');
  });

  it("vit_tiny: timm's names, parameter count (5,360,832 with 4 px patches on 32x32x3) and init", () => {
    const net = build('vit_tiny') as VisionTransformer;
    assert.equal(net.featureDim, 192);
    assert.equal(net.numParameters(), timmParameterCount(192, 12, 4, 4, 3, 8));
    assert.equal(net.numParameters(), 5_360_832);
    const state = net.stateDict();
    assert.deepEqual(state['patch_embed.proj.weight'].shape, [4, 4, 3, 192]);
    assert.deepEqual(state.cls_token.shape, [1, 1, 192]);
    assert.deepEqual(state.pos_embed.shape, [1, 65, 192]);
    assert.deepEqual(state['blocks.11.attn.qkv.weight'].shape, [192, 576]);
    assert.deepEqual(state['blocks.0.mlp.fc1.weight'].shape, [192, 768]);
    assert.deepEqual(state['norm.bias'].shape, [192]);
    const std = Math.sqrt(tf.tidy(() => tf.moments(state.pos_embed).variance.dataSync()[0]));
    assert.ok(Math.abs(std - 0.02) < 0.002, `pos_embed std ${std} (trunc-normal 0.02)`);
    assert.ok(tf.tidy(() => tf.max(tf.abs(state['blocks.0.attn.qkv.bias'])).dataSync()[0]) === 0, 'zero linear biases');
    net.dispose();
  });

  it('vit_small: D 384, 6 heads; [B, 32, 32, 3] -> [B, 384]', () => {
    const net = build('vit_small');
    assert.equal(net.numParameters(), timmParameterCount(384, 12, 4, 4, 3, 8));
    assert.deepEqual(outputShape(net, 2, 32, 3), [2, 384]);
    net.dispose();
  });

  it('vit_tiny on 28 px grayscale: 7x7 patches, and 12 px local crops (3x3, resized embeddings) and 32 px (8x8)', () => {
    const net = build('vit_tiny', { inChannels: 1, imageSize: 28 }) as VisionTransformer;
    assert.equal(net.gridSize, 7);
    assert.deepEqual(outputShape(net, 2, 28, 1), [2, 192]);
    assert.deepEqual(outputShape(net, 3, 12, 1), [3, 192]);
    assert.deepEqual(outputShape(net, 1, 32, 1), [1, 192]);
    net.dispose();
  });

  it('patchSize option: 7 px patches on 28 px images give a 4x4 grid; bad values are user errors naming the field', () => {
    const net = build('vit_tiny', { inChannels: 1, imageSize: 28, patchSize: 7 }) as VisionTransformer;
    assert.equal(net.gridSize, 4);
    assert.deepEqual(net.stateDict().pos_embed.shape, [1, 17, 192]);
    assert.deepEqual(outputShape(net, 2, 28, 1), [2, 192]);
    net.dispose();
    for (const patchSize of [0, 2.5, 33]) {
      assert.throws(
        () => build('vit_tiny', { patchSize }),
        (e: Error) => e instanceof UserError && /patchSize/.test(e.message),
      );
    }
  });

  it('12 px crops: the resized position embeddings pass gradients to pos_embed (every grid entry) and cls_token', () => {
    const net = build('vit_tiny', { inChannels: 1, imageSize: 28 }) as VisionTransformer;
    const x = randn([2, 12, 12, 1], 4);
    const { value, grads } = tf.variableGrads(() => tf.sum(tf.square(net.forward(x))), [net.posEmbed, net.clsToken]);
    const rowNorms = tf.tidy(() => tf.norm(tf.reshape(grads[net.posEmbed.name], [50, 192]), 'euclidean', 1).dataSync());
    assert.ok(
      rowNorms.every((n) => n > 0),
      'every one of the 1 + 7x7 position embeddings gets a gradient',
    );
    assert.ok(tf.tidy(() => tf.norm(grads[net.clsToken.name]).dataSync()[0]) > 0);
    tf.dispose([x, value, grads]);
    net.dispose();
  });

  it('TransformerBlock: [B, N, D] -> [B, N, D]; other ranks are refused', () => {
    const block = new TransformerBlock({ dim: 8, numHeads: 2, rng: new Rng(3) });
    const x = randn([2, 5, 8], 1);
    const y = block.forward(x);
    assert.deepEqual(y.shape, [2, 5, 8]);
    assert.throws(() => block.forward(tf.zeros([10, 8])), /tokens \[B, N, D\]/);
    tf.dispose([x, y]);
    block.dispose();
  });

  it('no tensor leak over training steps (28 px and 12 px batches)', () => {
    const net = new VisionTransformer({ embedDim: 16, depth: 2, numHeads: 2, mlpRatio: 4, patchSize: 4 }, { inChannels: 1, imageSize: 28, rng: new Rng(5) });
    const batches = [randn([2, 28, 28, 1], 6), randn([2, 12, 12, 1], 7)];
    const step = (): void => {
      const { value, grads } = tf.variableGrads(
        () => tf.add(...(batches.map((b) => tf.sum(tf.square(net.forward(b)))) as [tf.Tensor, tf.Tensor])) as tf.Scalar,
      );
      tf.tidy(() => {
        for (const v of net.parameters()) v.assign(tf.sub(v, tf.mul(grads[v.name], 1e-3)));
      });
      tf.dispose([value, grads]);
    };
    step();
    const before = tf.memory().numTensors;
    for (let i = 0; i < 3; i++) step();
    assert.equal(tf.memory().numTensors, before);
    tf.dispose(batches);
    net.dispose();
  });
});
