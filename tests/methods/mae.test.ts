/**
 * MAE on one process: the keyed masks (exact counts, the same mask for a sample whatever its
 * batch), the encoder on the kept patches, the decoder's shapes and fixed position embeddings,
 * the loss on the masked patches only (negative controls: the loss over every patch, and
 * predictions of kept patches that must not matter), and the ViT-only check. (With W ranks:
 * tests/distributed/zoo-exactness.full.test.ts.)
 */
import { strict as assert } from 'node:assert';
import { createBackbone } from '../../src/backbones/index.js';
import { VisionTransformer } from '../../src/backbones/vit.js';
import { UserError } from '../../src/core/errors.js';
import { Rng } from '../../src/core/random.js';
import { tf, type Scalar, type Tensor } from '../../src/core/tf.js';
import { maeLoss } from '../../src/losses/mae.js';
import { keptPatches, MAE, randomMasks, sinCosPositionEmbedding, type SampleKeys } from '../../src/methods/index.js';
import { getMethodClass, resolveMethodArgs } from '../../src/methods/registry.js';

const SIZE = 16; // 4x4 patches of 4 px
const L = 16;
const SMALL_DECODER = { decoderEmbedDim: 16, decoderDepth: 1, decoderNumHeads: 2 };

function build(backbone = 'vit_tiny', args: Record<string, number> = SMALL_DECODER): MAE {
  return new (getMethodClass('mae'))({
    createBackbone: (rng) => createBackbone(backbone, { inChannels: 1, imageSize: SIZE, rng, mlpHidden: [8] }),
    numClasses: 3,
    rng: new Rng(5),
    args: resolveMethodArgs('mae', args),
  }) as MAE;
}

function images(n: number, seed: number): tf.Tensor4D {
  return tf.tensor4d(new Rng(seed).normalArray(n * SIZE * SIZE), [n, SIZE, SIZE, 1]);
}

function maskRow(samples: SampleKeys, row: number): number[] {
  return Array.from(randomMasks(samples, L, 0.75).mask.slice(row * L, (row + 1) * L));
}

describe('mae: masks keyed by (seed, epoch, sample index)', () => {
  it('masks exactly L - floor(L·(1 - r)) patches per sample, keep/mask/restore consistent', () => {
    const m = randomMasks({ seed: 1, epoch: 0, indices: Int32Array.of(4, 9, 2) }, L, 0.75);
    assert.equal(m.keptPerSample, 4);
    assert.equal(keptPatches(64, 0.75), 16);
    assert.equal(keptPatches(49, 0.75), 12); // int(49 · 0.25) as solo-learn
    for (let s = 0; s < 3; s++) {
      const row = m.mask.slice(s * L, (s + 1) * L);
      assert.equal(
        row.reduce((a, b) => a + b, 0),
        L - 4,
      );
      const kept = Array.from(m.keep.slice(s * 4, (s + 1) * 4));
      assert.equal(new Set(kept).size, 4);
      for (const p of kept) assert.equal(row[p], 0);
      const restore = Array.from(m.restore.slice(s * L, (s + 1) * L));
      assert.deepEqual(
        [...restore].sort((a, b) => a - b),
        Array.from({ length: L }, (_, i) => i),
      );
      kept.forEach((p, j) => assert.equal(restore[p], j));
    }
  });

  it('gives a sample the same mask whatever its batch and position; another epoch or seed another mask', () => {
    const alone = maskRow({ seed: 1, epoch: 3, indices: Int32Array.of(7) }, 0);
    assert.deepEqual(maskRow({ seed: 1, epoch: 3, indices: Int32Array.of(11, 2, 7) }, 2), alone);
    assert.deepEqual(maskRow({ seed: 1, epoch: 3, indices: Int32Array.of(7, 0) }, 0), alone);
    // Negative controls: the key must include the epoch, the seed and the sample.
    assert.notDeepEqual(maskRow({ seed: 1, epoch: 4, indices: Int32Array.of(7) }, 0), alone);
    assert.notDeepEqual(maskRow({ seed: 2, epoch: 3, indices: Int32Array.of(7) }, 0), alone);
    assert.notDeepEqual(maskRow({ seed: 1, epoch: 3, indices: Int32Array.of(8) }, 0), alone);
  });
});

describe('mae: encoder on kept patches and decoder', () => {
  it('encodeKept with every patch kept in order gives forward()`s [CLS] feature', () => {
    const method = build();
    const x = images(2, 1);
    const keep = Int32Array.from({ length: 2 * L }, (_, i) => i % L);
    const cls = tf.squeeze(tf.slice(method.encoder.encodeKept(x, keep, L), [0, 0, 0], [2, 1, -1]), [1]);
    assert.ok((tf.max(tf.abs(tf.sub(cls, method.encoder.forward(x)))) as Scalar).arraySync() < 1e-5);
  });

  it("decodes [B, 1 + K, F] to [B, L, P·P·C]; the position embeddings are MAE's fixed sin-cos (a buffer)", () => {
    const method = build();
    const m = randomMasks({ seed: 0, epoch: 0, indices: Int32Array.of(0, 1, 2) }, L, 0.75);
    const encoded = method.encoder.encodeKept(images(3, 2), m.keep, m.keptPerSample);
    assert.deepEqual(encoded.shape, [3, 5, 192]);
    assert.deepEqual(method.decoder.decode(encoded, m.restore).shape, [3, L, 16]);
    assert.equal(method.decoder.posEmbed.trainable, false);
    const pe = sinCosPositionEmbedding(8, 4); // [1 + 16, 8]: CLS zeros; patch (i, j): [sin j, cos j | sin i, cos i] per frequency
    assert.deepEqual(Array.from(pe.slice(0, 8)), [0, 0, 0, 0, 0, 0, 0, 0]);
    const patch = (i: number, j: number) => Array.from(pe.slice((1 + i * 4 + j) * 8, (2 + i * 4 + j) * 8));
    const expected = [Math.sin(2), Math.sin(2 / 100), Math.cos(2), Math.cos(2 / 100), Math.sin(1), Math.sin(1 / 100), Math.cos(1), Math.cos(1 / 100)];
    patch(1, 2).forEach((v, t) => assert.ok(Math.abs(v - expected[t]!) < 1e-6, `value ${t}`));
  });

  it('refuses a non-ViT backbone with one user error naming the field', () => {
    assert.throws(
      () => build('mlp'),
      (e: unknown) => e instanceof UserError && /^backbone: .* a Vision Transformer/.test(e.message),
    );
  });
});

describe('mae: the loss is on the masked patches only', () => {
  it("the step's loss is maeLoss of the decoder's predictions with the keyed masks; kept patches' predictions do not matter", () => {
    const method = build();
    const x = images(4, 3);
    const samples: SampleKeys = { seed: 9, epoch: 1, indices: Int32Array.of(5, 0, 8, 3) };
    const labels = tf.tensor1d([0, 1, 2, 0], 'int32');
    const step = method.trainingStep([x], labels, samples);
    const m = randomMasks(samples, L, 0.75);
    const pred = method.decoder.decode(method.encoder.encodeKept(x, m.keep, m.keptPerSample), m.restore) as tf.Tensor3D;
    const mask = tf.tensor2d(m.mask, [4, L]);
    const value = (t: Tensor) => (t as Scalar).arraySync();
    const manual = value(maeLoss(x, pred, mask, { patchSize: 4 }));
    assert.ok(Math.abs(value(step.metrics.loss!) - manual) < 1e-5 * Math.max(1, manual));
    // Predictions changed on the kept patches only: same loss; on the masked ones: another loss.
    const onKept = tf.mul(tf.expandDims(tf.sub(1, mask), 2), 100);
    const onMasked = tf.mul(tf.expandDims(mask, 2), 100);
    assert.ok(Math.abs(value(maeLoss(x, tf.add(pred, onKept) as tf.Tensor3D, mask, { patchSize: 4 })) - manual) < 1e-5 * manual);
    assert.ok(value(maeLoss(x, tf.add(pred, onMasked) as tf.Tensor3D, mask, { patchSize: 4 })) > manual + 1);
    // Negative control: the mean over every patch is another number.
    const everyPatch = value(maeLoss(x, pred, tf.onesLike(mask) as tf.Tensor2D, { patchSize: 4 }));
    assert.ok(Math.abs(everyPatch - manual) > 1e-3 * manual);
  });

  it('a step gives the same loss for the same samples in another order (masks follow the samples)', () => {
    const method = build();
    const x = images(4, 4);
    const labels = tf.tensor1d([0, 1, 2, 0], 'int32');
    const loss = (order: number[]) =>
      (
        method.trainingStep([tf.gather(x, order)], tf.gather(labels, order), {
          seed: 2,
          epoch: 0,
          indices: Int32Array.from(order, (i) => 10 + i),
        }).metrics.loss as Scalar
      ).arraySync();
    assert.ok(Math.abs(loss([0, 1, 2, 3]) - loss([2, 0, 3, 1])) < 1e-5);
  });

  it('needs the sample keys', () => {
    assert.throws(() => build().trainingStep([images(2, 5)], tf.tensor1d([0, 1], 'int32')), /sample keys/);
  });
});

describe('mae: recipe', () => {
  it("is solo-learn's: adamw lr 2e-4, wd 0.05, one global crop, reconstruction views, vit_tiny by default", () => {
    assert.deepEqual(MAE.optimDefaults, { optimizer: 'adamw', lr: 2e-4, classifierLr: 2e-4, weightDecay: 0.05 });
    assert.equal(MAE.crops.globalCrops, 1);
    assert.equal(MAE.viewRecipe, 'reconstruction');
    assert.equal(MAE.defaultBackbone, 'vit_tiny');
    const args = resolveMethodArgs('mae', {});
    assert.deepEqual(args, { maskRatio: 0.75, decoderEmbedDim: 512, decoderDepth: 8, decoderNumHeads: 16, normPixLoss: true });
    assert.ok(build().backbone instanceof VisionTransformer);
  });
});
