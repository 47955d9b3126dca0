/**
 * Unit tests of the MAE loss (patchify, masking, per-patch normalisation) and of W-MSE (the
 * whitening of sub-batches and the loss): closed forms, float64 loops, invariances, finite
 * differences, and the input checks. The PyTorch references and the W-rank runs are in
 * cases.test.ts and tests/distributed/losses.full.test.ts.
 */
import assert from 'node:assert/strict';
import { UserError } from '../../src/core/errors.js';
import { cholesky } from '../../src/core/linalg.js';
import { tf, type Tensor } from '../../src/core/tf.js';
import { maeLoss, patchify, whitenSubBatches, wmseLoss } from '../../src/losses/index.js';
import { gradCheck, randn, Rng, useCpuEngine } from './helpers.js';

type T2 = tf.Tensor2D;

function expectUserError(fn: () => unknown, field: string): void {
  assert.throws(fn, (err: unknown) => err instanceof UserError && err.message.startsWith(`${field}: `), field);
}

/** `[b, h, w, c]` images of seeded uniform pixels. */
function images(rng: Rng, b: number, h: number, w: number, c: number): tf.Tensor4D {
  return tf.tensor4d(rng.uniformArray(b * h * w * c), [b, h, w, c]);
}

describe('losses/patchify', () => {
  before(useCpuEngine);

  it('cuts NHWC images into row-major patches with (row, column, channel) pixel order', () => {
    tf.tidy(() => {
      // One 4 × 4 image, 2 channels, pixel (y, x, ch) = 100y + 10x + ch; patches of 2.
      const values = [];
      for (let y = 0; y < 4; y++) for (let x = 0; x < 4; x++) for (let ch = 0; ch < 2; ch++) values.push(100 * y + 10 * x + ch);
      const p = patchify(tf.tensor4d(values, [1, 4, 4, 2]), 2);
      assert.deepEqual(p.shape, [1, 4, 8]);
      // Patch 1 is the top-right one: rows 0–1, columns 2–3.
      assert.deepEqual(p.arraySync()[0]![1], [20, 21, 30, 31, 120, 121, 130, 131]);
      assert.deepEqual(p.arraySync()[0]![2], [200, 201, 210, 211, 300, 301, 310, 311]);
    });
  });

  it('refuses a patch size that does not divide the image, and a non-image', () => {
    tf.tidy(() => {
      expectUserError(() => patchify(tf.zeros([1, 6, 6, 1]) as tf.Tensor4D, 4), 'patchSize');
      expectUserError(() => patchify(tf.zeros([1, 6, 6, 1]) as tf.Tensor4D, 0), 'patchSize');
      assert.throws(() => patchify(tf.zeros([6, 6, 1]) as unknown as tf.Tensor4D, 2), /images must be \[B, H, W, C\]/);
    });
  });
});

describe('losses/maeLoss', () => {
  before(useCpuEngine);

  it('without normalisation: the mean over masked patches of the per-patch MSE (float64 loop); unmasked patches do not count', () => {
    const rng = new Rng(1);
    tf.tidy(() => {
      const img = images(rng, 3, 4, 4, 1);
      const pred = tf.tensor3d(rng.normalArray(3 * 4 * 4), [3, 4, 4]);
      const mask = tf.tensor2d([1, 0, 0, 1, 0, 0, 0, 1, 1, 1, 1, 0], [3, 4], 'int32');
      const target = patchify(img, 2).arraySync();
      const p = pred.arraySync();
      const m = mask.arraySync();
      let sum = 0;
      let count = 0;
      for (let i = 0; i < 3; i++)
        for (let l = 0; l < 4; l++) {
          if (!m[i]![l]) continue;
          sum += p[i]![l]!.reduce((s, v, d) => s + (v - target[i]![l]![d]!) ** 2, 0) / 4;
          count++;
        }
      const v = maeLoss(img, pred, mask, { patchSize: 2, normPixLoss: false }).dataSync()[0]!;
      assert.ok(Math.abs(v - sum / count) < 1e-6 * (sum / count), `${v} vs ${sum / count}`);
      // Any prediction on an unmasked patch: same loss, zero gradient there.
      const other = tf.where(tf.cast(tf.expandDims(mask, 2), 'bool'), pred, tf.fill(pred.shape, 9)) as tf.Tensor3D;
      assert.equal(maeLoss(img, other, mask, { patchSize: 2, normPixLoss: false }).dataSync()[0], v);
      const g = tf
        .grad((x: Tensor) => maeLoss(img, x as tf.Tensor3D, mask, { patchSize: 2 }))(pred)
        .arraySync() as number[][][];
      for (let i = 0; i < 3; i++) for (let l = 0; l < 4; l++) if (!m[i]![l]) assert.ok(g[i]![l]!.every((x) => x === 0));
    });
  });

  it('with normPixLoss: predicting each patch’s standardised pixels gives 0; bool, int32 and float32 masks agree', () => {
    const rng = new Rng(2);
    tf.tidy(() => {
      const img = images(rng, 2, 4, 4, 3);
      const t = patchify(img, 2);
      const mean = tf.mean(t, 2, true);
      const variance = tf.div(tf.sum(tf.square(tf.sub(t, mean)), 2, true), 11);
      const standardised = tf.div(tf.sub(t, mean), tf.sqrt(tf.add(variance, 1e-6))) as tf.Tensor3D;
      const mask = tf.tensor2d([1, 1, 0, 1, 0, 1, 1, 1], [2, 4], 'int32');
      assert.ok(maeLoss(img, standardised, mask, { patchSize: 2 }).dataSync()[0]! < 1e-10);
      const pred = tf.add(standardised, 0.5) as tf.Tensor3D;
      const values = [mask, tf.cast(mask, 'bool'), tf.cast(mask, 'float32')].map((m) => maeLoss(img, pred, m as T2, { patchSize: 2 }).dataSync()[0]!);
      assert.ok(Math.abs(values[0]! - 0.25) < 1e-5, `${values[0]}`);
      assert.deepEqual(values, [values[0], values[0], values[0]]);
    });
  });

  it('gradients agree with finite differences; the images get exactly zero', () => {
    const rng = new Rng(3);
    const img = images(rng, 2, 4, 4, 1);
    const mask = tf.tensor2d([1, 0, 1, 1, 0, 1, 0, 0], [2, 4], 'int32');
    const pred = tf.reshape(randn(rng, 2, 16), [2, 4, 4]) as tf.Tensor3D;
    const f = (p: T2, i: T2) => maeLoss(tf.reshape(i, [2, 4, 4, 1]) as tf.Tensor4D, tf.reshape(p, [2, 4, 4]) as tf.Tensor3D, mask, { patchSize: 2 });
    const xs = [tf.reshape(pred, [2, 16]) as T2, tf.reshape(img, [2, 16]) as T2];
    const { error, halvedError } = gradCheck(f, xs, rng, [0]);
    assert.ok(error < 1e-2 && halvedError > 0.3, `${error}, ${halvedError}`);
    const grads = tf.grads((...a: Tensor[]) => f(a[0] as T2, a[1] as T2))(xs);
    assert.ok((grads[1]!.dataSync() as Float32Array).every((v) => v === 0));
    tf.dispose([img, mask, pred, ...xs, ...grads]);
  });

  it('refuses mismatched predictions and mask and 1-value patches; NaN for mask values other than 0 and 1 and an all-zero mask', () => {
    tf.tidy(() => {
      const img = tf.zeros([2, 4, 4, 1]) as tf.Tensor4D;
      const pred = tf.zeros([2, 4, 4]) as tf.Tensor3D;
      const mask = tf.ones([2, 4]) as T2;
      assert.throws(() => maeLoss(img, tf.zeros([2, 4, 5]) as tf.Tensor3D, mask, { patchSize: 2 }), /predictions must be float32 \[2, 4, 4\]/);
      assert.throws(() => maeLoss(img, pred, tf.ones([2, 3]) as T2, { patchSize: 2 }), /mask must be \[2, 4\]/);
      // Checked on the device (no read of the mask): the loss is NaN.
      assert.ok(Number.isNaN(maeLoss(img, pred, tf.fill([2, 4], 2) as T2, { patchSize: 2 }).dataSync()[0]), 'mask value 2');
      assert.ok(Number.isNaN(maeLoss(img, pred, tf.zeros([2, 4]) as T2, { patchSize: 2 }).dataSync()[0]), 'all-zero mask');
      assert.ok(Number.isFinite(maeLoss(img, pred, mask, { patchSize: 2 }).dataSync()[0]), 'a valid mask');
      expectUserError(() => maeLoss(img, tf.zeros([2, 16, 1]) as tf.Tensor3D, tf.ones([2, 16]) as T2, { patchSize: 1 }), 'patchSize');
      assert.equal(maeLoss(img, tf.zeros([2, 16, 1]) as tf.Tensor3D, tf.ones([2, 16]) as T2, { patchSize: 1, normPixLoss: false }).dataSync()[0], 0);
    });
  });
});

/** The covariance `Σ (y − ȳ)(y − ȳ)ᵀ / (w − 1)` of each sub-batch `[S, w, D] -> [S, D, D]`. */
function covariances(y: tf.Tensor3D): tf.Tensor3D {
  const c = tf.sub(y, tf.mean(y, 1, true));
  return tf.div(tf.matMul(c, c, true, false), y.shape[1] - 1) as tf.Tensor3D;
}

/** A lower-triangular map with a positive diagonal, `[D, D]`. */
function lowerMap(rng: Rng, d: number): T2 {
  return tf.tidy(() => tf.add(tf.linalg.bandPart(randn(rng, d, d, 0.5), -1, 0), tf.mul(tf.eye(d), 2)) as T2);
}

describe('losses/whitenSubBatches and wmseLoss (W-MSE)', () => {
  before(useCpuEngine);

  it('whitens each sub-batch: zero mean and identity covariance (eps 0); the shrunk covariance with eps > 0', () => {
    const rng = new Rng(4);
    tf.tidy(() => {
      const x = tf.add(tf.matMul(tf.reshape(randn(rng, 3 * 10, 4), [3, 10, 4]), tf.tile(tf.expandDims(lowerMap(rng, 4), 0), [3, 1, 1])), 3) as tf.Tensor3D;
      const y = whitenSubBatches(x);
      assert.ok(tf.max(tf.abs(tf.mean(y, 1))).dataSync()[0]! < 1e-5);
      assert.ok(tf.max(tf.abs(tf.sub(covariances(y), tf.eye(4)))).dataSync()[0]! < 1e-4);
      // eps > 0: the output's covariance is L⁻¹ C L⁻ᵀ with L Lᵀ = (1 − ε) C + ε I, i.e. L cov(y) Lᵀ = C.
      const c = covariances(x);
      const l = cholesky(tf.add(tf.mul(c, 0.5), tf.mul(tf.eye(4), 0.5)) as tf.Tensor3D);
      const back = tf.matMul(tf.matMul(l, covariances(whitenSubBatches(x, 0.5))), l, false, true);
      assert.ok(tf.max(tf.abs(tf.sub(back, c))).dataSync()[0]! < 1e-4 * tf.max(tf.abs(c)).dataSync()[0]!);
      assert.ok(tf.max(tf.abs(tf.sub(covariances(whitenSubBatches(x, 0.5)), tf.eye(4)))).dataSync()[0]! > 0.1, 'not whitened to I');
    });
  });

  it('the loss is invariant to a lower-triangular map and a shift of each view, and to the order within sub-batches', () => {
    const rng = new Rng(5);
    tf.tidy(() => {
      const views = [randn(rng, 12, 3), randn(rng, 12, 3), randn(rng, 12, 3)];
      const permutations = [Array.from(rng.permutation(12)), Array.from(rng.permutation(12))];
      const options = { whiteningSize: 6, permutations };
      const v = wmseLoss(views, options).dataSync()[0]!;
      const mapped = views.map((z, i) => tf.add(tf.matMul(z, lowerMap(rng, 3), false, true), i) as T2);
      assert.ok(Math.abs(wmseLoss(mapped, options).dataSync()[0]! - v) < 1e-4, 'lower-triangular map');
      // Reverse each sub-batch of 6 rows: the same sub-batches.
      const reordered = permutations.map((p) => [...p.slice(0, 6).reverse(), ...p.slice(6).reverse()]);
      assert.ok(Math.abs(wmseLoss(views, { whiteningSize: 6, permutations: reordered }).dataSync()[0]! - v) < 1e-6);
      // Other sub-batches give another value.
      assert.ok(Math.abs(wmseLoss(views, { whiteningSize: 6, permutations: [Array.from({ length: 12 }, (_, i) => i)] }).dataSync()[0]! - v) > 1e-3);
    });
  });

  it('is 2 − 2·mean cos of the whitened rows (float64 loop on one sub-batch, two views)', () => {
    const rng = new Rng(6);
    tf.tidy(() => {
      const [a, b] = [randn(rng, 8, 3), randn(rng, 8, 3)];
      const identity = Array.from({ length: 8 }, (_, i) => i);
      const [wa, wb] = [a, b].map((z) => (tf.reshape(whitenSubBatches(tf.reshape(z, [1, 8, 3]) as tf.Tensor3D), [8, 3]) as T2).arraySync());
      let cos = 0;
      for (let i = 0; i < 8; i++) {
        const dot = wa[i]!.reduce((s, x, k) => s + x * wb[i]![k]!, 0);
        cos += dot / (Math.hypot(...wa[i]!) * Math.hypot(...wb[i]!));
      }
      const v = wmseLoss([a, b], { whiteningSize: 8, permutations: [identity] }).dataSync()[0]!;
      assert.ok(Math.abs(v - (2 - (2 * cos) / 8)) < 1e-5, `${v}`);
    });
  });

  it('gradients agree with finite differences (through the whitening, Cholesky and solve)', () => {
    const rng = new Rng(7);
    const xs = [randn(rng, 12, 3), randn(rng, 12, 3)];
    const permutations = [Array.from(rng.permutation(12))];
    const { error, halvedError } = gradCheck((a, b) => wmseLoss([a!, b!], { whiteningSize: 6, permutations, eps: 0.1 }), xs, rng, [0, 1], { h: 1e-2 });
    assert.ok(error < 2e-2 && halvedError > 0.3, `${error}, ${halvedError}`);
    tf.dispose(xs);
  });

  it('refuses a sub-batch size that does not divide N or is at most D without eps, bad permutations and eps, and rank-deficient sub-batches', () => {
    const rng = new Rng(8);
    tf.tidy(() => {
      const views = [randn(rng, 12, 4), randn(rng, 12, 4)];
      const perm = [Array.from({ length: 12 }, (_, i) => i)];
      expectUserError(() => wmseLoss(views, { whiteningSize: 5, permutations: perm }), 'whiteningSize');
      expectUserError(() => wmseLoss(views, { whiteningSize: 4, permutations: perm }), 'whiteningSize');
      assert.ok(Number.isFinite(wmseLoss(views, { whiteningSize: 4, permutations: perm, eps: 0.2 }).dataSync()[0]!), 'w ≤ D with shrinkage');
      expectUserError(() => wmseLoss(views, { whiteningSize: 6, permutations: [] }), 'permutations');
      expectUserError(() => wmseLoss(views, { whiteningSize: 6, permutations: [undefined as unknown as number[]] }), 'permutations[0]');
      expectUserError(() => wmseLoss(views, { whiteningSize: 6, permutations: [[...perm[0]!.slice(1), 0, 1]] }), 'permutations[0]');
      expectUserError(() => wmseLoss(views, { whiteningSize: 6, permutations: [perm[0]!, perm[0]!.map((i) => (i === 3 ? 4 : i))] }), 'permutations[1]');
      expectUserError(() => wmseLoss(views, { whiteningSize: 6, permutations: perm, eps: 1 }), 'eps');
      assert.throws(() => wmseLoss([views[0]!], { whiteningSize: 6, permutations: perm }), /at least 2 views/);
      // A constant view: its covariance is 0.
      const constant = tf.fill([12, 4], 0.5) as T2;
      assert.throws(
        () => wmseLoss([constant, views[1]!], { whiteningSize: 6, permutations: perm }),
        /cholesky: the matrix is not positive definite \(pivot 0 of 4 is 0\)/,
      );
    });
  });
});
