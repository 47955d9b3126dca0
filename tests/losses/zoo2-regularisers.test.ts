/**
 * Unit tests of VIbCReg and All4One's feature term (closed forms, invariances, finite
 * differences, input checks), and what every zoo2 loss shares: the refusal of a multi-rank
 * job without a process group, and no leaked tensors.
 */
import assert from 'node:assert/strict';
import { UserError } from '../../src/core/errors.js';
import { recordJobSize } from '../../src/core/process-group.js';
import { tf, type Scalar, type Tensor } from '../../src/core/tf.js';
import { all4oneFeatureLoss, dinoLoss, maeLoss, sinkhornKnopp, swavLoss, vibcregLoss, wmseLoss } from '../../src/losses/index.js';
import { gradCheck, randn, Rng, useCpuEngine } from './helpers.js';

type T2 = tf.Tensor2D;

/** `[n, d]` (n a power of 2, d < n): columns 1..d of the Sylvester-Hadamard matrix times `scale`, orthogonal, each summing to 0 and of squared norm n·scale². */
function orthogonalCentred(n: number, d: number, scale: number): T2 {
  let h = [[1]];
  while (h.length < n) h = [...h.map((r) => [...r, ...r]), ...h.map((r) => [...r, ...r.map((x) => -x)])];
  return tf.tensor2d(h.map((row) => row.slice(1, d + 1).map((x) => x * scale)));
}

describe('losses/vibcregLoss', () => {
  before(useCpuEngine);

  it('closed forms: orthogonal centred columns of std ≥ 1 have no variance or correlation penalty; identical views no invariance term', () => {
    tf.tidy(() => {
      const z = orthogonalCentred(8, 4, 2); // std = 2·sqrt(8/7) > 1
      assert.ok(Math.abs(vibcregLoss(z, z).dataSync()[0]!) < 1e-6);
      // Columns of std 0.5: the hinge is 1 − sqrt(0.25·8/7 + 1e-4) per column, for each view (summed).
      const small = orthogonalCentred(8, 4, 0.5);
      const hinge = 1 - Math.sqrt((0.25 * 8) / 7 + 1e-4);
      const v = vibcregLoss(small, small, { simWeight: 0, varWeight: 1, covWeight: 0 }).dataSync()[0]!;
      assert.ok(Math.abs(v - 2 * hinge) < 1e-6, `${v} vs ${2 * hinge}`);
    });
  });

  it('the covariance term is that of the correlation matrix: unchanged by scaling or shifting a column; the invariance term is the MSE', () => {
    const rng = new Rng(1);
    tf.tidy(() => {
      const [a, b] = [randn(rng, 10, 5), randn(rng, 10, 5)];
      const cov = (x: T2, y: T2) => vibcregLoss(x, y, { simWeight: 0, varWeight: 0, covWeight: 1 }).dataSync()[0]!;
      const scaled = tf.add(tf.mul(a, tf.tensor1d([3, 0.2, 1, 7, 0.5])), tf.tensor1d([1, -2, 0, 4, 9])) as T2;
      assert.ok(Math.abs(cov(scaled, b) - cov(a, b)) < 1e-6);
      assert.ok(cov(a, b) > 0.01);
      const mse = tf.mean(tf.squaredDifference(a, b)).dataSync()[0]!;
      assert.ok(Math.abs(vibcregLoss(a, b, { simWeight: 1, varWeight: 0, covWeight: 0 }).dataSync()[0]! - mse) < 1e-6);
    });
  });

  it('gradients agree with finite differences; bad weights and a batch of one are refused', () => {
    const rng = new Rng(2);
    const xs = [randn(rng, 8, 4, 0.7), randn(rng, 8, 4, 0.7)];
    const { error, halvedError } = gradCheck((a, b) => vibcregLoss(a!, b!), xs, rng);
    assert.ok(error < 1e-2 && halvedError > 0.3, `${error}, ${halvedError}`);
    for (const field of ['simWeight', 'varWeight', 'covWeight'] as const) {
      assert.throws(
        () => vibcregLoss(xs[0]!, xs[1]!, { simWeight: 1, varWeight: 1, covWeight: 1, [field]: -1 }),
        (e: unknown) => e instanceof UserError && e.message.startsWith(`${field}: `),
      );
    }
    tf.tidy(() => assert.throws(() => vibcregLoss(randn(rng, 1, 4), randn(rng, 1, 4)), /batch size: 1 is not allowed/));
    tf.dispose(xs);
  });
});

describe('losses/all4oneFeatureLoss', () => {
  before(useCpuEngine);

  it('is 0 when each view’s online columns are the other view’s orthogonal momentum columns; 5·(on + off) in general (float64 loop)', () => {
    const rng = new Rng(3);
    tf.tidy(() => {
      const m1 = orthogonalCentred(8, 4, 1.5);
      const m2 = orthogonalCentred(8, 4, 0.3);
      assert.ok(all4oneFeatureLoss(m1, m2, m2, m1).dataSync()[0]! < 1e-6);
      const [a, b, c, d] = [randn(rng, 6, 3), randn(rng, 6, 3), randn(rng, 6, 3), randn(rng, 6, 3)];
      const unit = (x: T2) => {
        const rows = x.arraySync();
        const norms = rows[0]!.map((_, j) => Math.hypot(...rows.map((r) => r[j]!)));
        return rows.map((r) => r.map((v, j) => v / norms[j]!));
      };
      const corr = (x: number[][], y: number[][]) => x[0]!.map((_, i) => y[0]!.map((__, j) => x.reduce((s, row, k) => s + row[i]! * y[k]![j]!, 0)));
      const [c1, c2] = [corr(unit(a), unit(d)), corr(unit(b), unit(c))];
      const onMean = (m: number[][]) => m.reduce((s, row, i) => s + (row[i]! - 1) ** 2, 0) / 3;
      const offMean = (m: number[][]) => m.reduce((s, row, i) => s + row.reduce((t, v, j) => t + (i === j ? 0 : v * v), 0), 0) / 6;
      const expected = 5 * (Math.sqrt(0.5 * (onMean(c1) + onMean(c2))) + Math.sqrt(0.5 * (offMean(c1) + offMean(c2))));
      const v = all4oneFeatureLoss(a, b, c, d).dataSync()[0]!;
      assert.ok(Math.abs(v - expected) < 1e-5 * expected, `${v} vs ${expected}`);
    });
  });

  it('gradients agree with finite differences; the momentum projections get exactly zero; D = 1 is refused', () => {
    const rng = new Rng(4);
    const xs = [randn(rng, 6, 3), randn(rng, 6, 3), randn(rng, 6, 3), randn(rng, 6, 3)];
    const f = (a: T2, b: T2, c: T2, d: T2) => all4oneFeatureLoss(a, b, c, d);
    const { error, halvedError } = gradCheck(f as (...x: T2[]) => Scalar, xs, rng, [2, 3]);
    assert.ok(error < 1e-2 && halvedError > 0.3, `${error}, ${halvedError}`);
    const grads = tf.grads((...a: Tensor[]) => f(...(a as [T2, T2, T2, T2])))(xs);
    for (const g of grads.slice(0, 2)) assert.ok((g.dataSync() as Float32Array).every((v) => v === 0));
    tf.tidy(() => assert.throws(() => f(randn(rng, 4, 1), randn(rng, 4, 1), randn(rng, 4, 1), randn(rng, 4, 1)), /needs D >= 2/));
    tf.dispose([...xs, ...grads]);
  });
});

/** Every zoo2 loss on `[4, 6]`-row inputs (W-MSE on 8 rows of 2 columns), its differentiable inputs scaled by `s`. */
const LOSSES: Array<[string, (rng: Rng, s: Tensor) => Scalar]> = [
  [
    'swavLoss + sinkhornKnopp',
    (rng, s) => {
      const preds = [tf.mul(randn(rng, 4, 6), s) as T2, tf.mul(randn(rng, 4, 6), s) as T2];
      return swavLoss(preds, [sinkhornKnopp(preds[0]!, { epsilon: 0.05, iterations: 3 })], { temperature: 0.1 });
    },
  ],
  [
    'dinoLoss',
    (rng, s) => {
      const student = [tf.mul(randn(rng, 4, 6), s) as T2, tf.mul(randn(rng, 4, 6), s) as T2];
      const { loss, centre } = dinoLoss(student, [randn(rng, 4, 6)], tf.zeros([6]) as tf.Tensor1D, { studentTemperature: 0.1, teacherTemperature: 0.04 });
      centre.dispose();
      return loss;
    },
  ],
  [
    'maeLoss',
    (rng, s) => {
      const images = tf.tensor4d(rng.uniformArray(4 * 4 * 4), [4, 4, 4, 1]);
      return maeLoss(images, tf.mul(tf.reshape(randn(rng, 4, 16), [4, 4, 4]), s) as tf.Tensor3D, tf.ones([4, 4]) as T2, { patchSize: 2 });
    },
  ],
  [
    'wmseLoss',
    (rng, s) => wmseLoss([tf.mul(randn(rng, 8, 2), s) as T2, randn(rng, 8, 2)], { whiteningSize: 4, permutations: [Array.from(rng.permutation(8))] }),
  ],
  ['vibcregLoss', (rng, s) => vibcregLoss(tf.mul(randn(rng, 4, 6), s) as T2, randn(rng, 4, 6))],
  ['all4oneFeatureLoss', (rng, s) => all4oneFeatureLoss(randn(rng, 4, 6), randn(rng, 4, 6), tf.mul(randn(rng, 4, 6), s) as T2, randn(rng, 4, 6))],
];

describe('zoo2 losses: shared behaviour', () => {
  before(useCpuEngine);

  it('every loss refuses to run without a process group in a multi-rank job', () => {
    recordJobSize(3);
    try {
      for (const [name, f] of LOSSES) tf.tidy(() => assert.throws(() => f(new Rng(5), tf.scalar(1)), /without a process group in a 3-rank job/, name));
    } finally {
      recordJobSize(1);
    }
  });

  for (const [name, f] of LOSSES) {
    it(`${name}: value and gradient (through the whole loss) leave tf.memory().numTensors unchanged`, () => {
      const s = tf.scalar(1);
      const before = tf.memory().numTensors;
      for (let step = 0; step < 2; step++) {
        const { value, grad } = tf.valueAndGrad((x: Tensor) => f(new Rng(6), x))(s);
        assert.ok(Number.isFinite(grad.dataSync()[0]!) && grad.dataSync()[0] !== 0, `${name}: gradient ${grad.dataSync()[0]}`);
        tf.dispose([value, grad]);
      }
      assert.equal(tf.memory().numTensors, before);
      s.dispose();
    });
  }
});
