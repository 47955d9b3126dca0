import assert from 'node:assert/strict';
import { createBackbone } from '../../src/backbones/index.js';
import { initEngine } from '../../src/core/engine.js';
import { Sequential } from '../../src/core/layers.js';
import { Rng } from '../../src/core/random.js';
import { tf, type Tensor } from '../../src/core/tf.js';
import { setGradCheckpointing, TransformerBlock } from '../../src/core/transformer.js';
import { randn } from './helpers.js';

/** Four pre-norm blocks of width 32 (2 heads) over `[4, 17, 32]` tokens. */
function blockStack(): Sequential {
  const rng = new Rng(3);
  return new Sequential(...Array.from({ length: 4 }, () => new TransformerBlock({ dim: 32, numHeads: 2, rng })));
}

/** The loss `<stack(x), w>`, its gradients with respect to `x` and every parameter, and the peak tensor memory of computing them (above what was live before). */
async function lossAndGradients(stack: Sequential, x: Tensor, w: Tensor): Promise<{ loss: number; grads: Float32Array[]; peakBytes: number }> {
  let out: { loss: number; grads: Float32Array[] } | undefined;
  // The profile's peak counts every live tensor, other tests' included: measure from the bytes live now.
  const bytesBefore = tf.memory().numBytes;
  const { peakBytes } = await tf.profile(() => {
    const params = stack.trainableParameters();
    const f = (...xs: Tensor[]) => tf.sum(tf.mul(stack.forward(xs[0]!), w));
    const { value, grads } = tf.valueAndGrads(f)([x, ...params]);
    out = { loss: value.dataSync()[0]!, grads: grads.map((g) => g.dataSync() as Float32Array) };
    tf.dispose([value, ...grads]);
  });
  return { ...out!, peakBytes: peakBytes - bytesBefore };
}

describe('core/checkpoint: activation checkpointing of transformer blocks', () => {
  before(async () => {
    await initEngine('cpu');
  });

  it('gives the same loss and gradients (input and every parameter), bit for bit, and keeps far less memory', async () => {
    const stack = blockStack();
    const x = randn([4, 17, 32], 1);
    const w = randn([4, 17, 32], 2);
    assert.equal(setGradCheckpointing(stack, false), 4);
    const tensorsBefore = tf.memory().numTensors;
    const plain = await lossAndGradients(stack, x, w);
    assert.equal(setGradCheckpointing(stack, true), 4);
    const checkpointed = await lossAndGradients(stack, x, w);
    assert.equal(tf.memory().numTensors, tensorsBefore, 'no tensor is left behind by either backward pass');
    assert.equal(checkpointed.loss, plain.loss);
    assert.equal(checkpointed.grads.length, 1 + stack.trainableParameters().length);
    checkpointed.grads.forEach((g, i) => assert.deepEqual(g, plain.grads[i], `gradient ${i} differs`));
    const [plainPeak, checkpointedPeak] = [plain.peakBytes, checkpointed.peakBytes];
    assert.ok(checkpointedPeak < 0.5 * plainPeak, `peak tensor memory ${checkpointedPeak} B with checkpointing vs ${plainPeak} B without`);
    stack.dispose();
    tf.dispose([x, w]);
  });

  it('leaves the forward without a gradient tape unchanged and leaks no tensor', () => {
    const stack = blockStack();
    const x = randn([2, 5, 32], 4);
    const plain = stack.forward(x);
    setGradCheckpointing(stack, true);
    const before = tf.memory().numTensors;
    const checkpointed = stack.forward(x);
    assert.equal(tf.memory().numTensors, before + 1);
    assert.deepEqual(checkpointed.dataSync(), plain.dataSync());
    tf.dispose([x, plain, checkpointed]);
    stack.dispose();
  });

  it('reaches every block of a ViT and none of a ResNet', () => {
    const vit = createBackbone('vit_tiny', { inChannels: 3, imageSize: 32, rng: new Rng(1) });
    const resnet = createBackbone('tiny_resnet', { inChannels: 1, imageSize: 28, rng: new Rng(1) });
    assert.equal(setGradCheckpointing(vit, true), 12);
    assert.equal(setGradCheckpointing(resnet, true), 0);
    vit.dispose();
    resnet.dispose();
  });
});
