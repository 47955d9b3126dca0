/**
 * The symmetric eigen-solver and the nuclear norm (src/core/eigen.ts) against float64 PyTorch
 * (`torch.linalg.eigvalsh`, `torch.linalg.svdvals(x).sum()` and its autograd gradient; the
 * values below were printed by PyTorch 1.13 for x[i] = sin(0.7 i + 0.3 i² + 1), flat, reshaped;
 * full rank, singular values 0.30 to 1.85), a
 * reconstruction check, the rank-deficient case and the errors.
 */
import assert from 'node:assert/strict';
import { initEngine } from '../../src/core/engine.js';
import { nuclearNorm, symmetricEigen, traceSqrtPsd } from '../../src/core/eigen.js';
import { Rng } from '../../src/core/random.js';
import { tf } from '../../src/core/tf.js';

const sinInput = (shape: number[]) => {
  const n = shape.reduce((a, b) => a * b, 1);
  return Array.from({ length: n }, (_, i) => Math.sin(0.7 * i + 0.3 * i * i + 1));
};

/** torch.linalg.svdvals(x).sum(-1) and d(sum)/dx for x = sinInput([5, 3]) and sinInput([2, 3, 4]) (singular values 0.30 to 1.79). */
const TORCH = {
  matrix: {
    value: [4.363899185376],
    grad: [
      0.762185635416, 0.551846463595, -0.324059266072, -0.312321643421, 0.3636377725, -0.355232108309, -0.193553492918, 0.566784050773, 0.518654447762,
      0.137983767889, 0.216992597441, 0.6465377319, 0.514806539775, -0.441478315973, 0.285975989109,
    ],
  },
  batch: {
    value: [3.65405653478, 3.310993639],
    grad: [
      0.617630619748, 0.59481082952, -0.384771917272, -0.341589031316, 0.493927108636, -0.532163074272, -0.472950296185, 0.499155778363, 0.325663964353,
      0.398317998276, 0.568983419435, 0.64151665838, 0.261023522217, -0.659967114473, 0.458342565351, -0.535006748977, 0.781075260717, -0.276243321255,
      -0.443590623681, 0.341816358795, -0.350557334313, -0.310942486456, -0.764602052308, -0.442502007998,
    ],
  },
};

const maxDiff = (a: ArrayLike<number>, b: ArrayLike<number>) => Array.from(a).reduce((m, x, i) => Math.max(m, Math.abs(x - b[i]!)), 0);

describe('core/eigen', () => {
  before(async () => {
    await initEngine('cpu-js');
  });

  it("symmetricEigen: torch.linalg.eigvalsh's values of a 3 x 3 matrix, and V diag(λ) Vᵀ rebuilds a random 40 x 40 one to 1e-12", () => {
    const { values } = symmetricEigen([4, 1, -2, 1, 2, 0, -2, 0, 3], 3);
    assert.ok(maxDiff(Float64Array.from(values).sort(), [1, 2.267949192431123, 5.732050807568877]) < 1e-12, `${values}`);
    const n = 40;
    const x = new Rng(1).normalArray(n * n);
    const a = Array.from({ length: n * n }, (_, k) => x[k]! + x[(k % n) * n + Math.floor(k / n)]!);
    const { values: l, vectors: v } = symmetricEigen(a, n);
    let worst = 0;
    for (let i = 0; i < n; i++) {
      for (let j = 0; j < n; j++) {
        let sum = 0;
        for (let e = 0; e < n; e++) sum += v[i * n + e]! * l[e]! * v[j * n + e]!;
        worst = Math.max(worst, Math.abs(sum - a[i * n + j]!));
      }
    }
    assert.ok(worst < 1e-12, `reconstruction error ${worst}`);
  });

  it('nuclearNorm of a matrix and of a batch: the values and gradients of float64 PyTorch (1e-6)', () => {
    for (const [shape, ref] of [
      [[5, 3], TORCH.matrix],
      [[2, 3, 4], TORCH.batch],
    ] as const) {
      tf.tidy(() => {
        const x = tf.tensor(sinInput([...shape]), [...shape]) as tf.Tensor2D | tf.Tensor3D;
        const value = nuclearNorm(x);
        assert.ok(maxDiff(value.dataSync(), ref.value) < 1e-6, `${shape}: ${value.dataSync()}`);
        const [g] = tf.grads((t: tf.Tensor) => tf.sum(nuclearNorm(t as tf.Tensor2D | tf.Tensor3D)))([x]);
        assert.ok(maxDiff(g!.dataSync(), ref.grad) < 1e-6, `${shape}: gradient`);
      });
    }
  });

  it('a rank-deficient matrix: the zero singular values count as zero (value and a finite gradient); traceSqrtPsd of the identity', () => {
    tf.tidy(() => {
      // Rank 1: [1 2; 2 4; 3 6] has the one singular value sqrt(70).
      const x = tf.tensor2d([1, 2, 2, 4, 3, 6], [3, 2]);
      assert.ok(Math.abs(nuclearNorm(x).dataSync()[0]! - Math.sqrt(70)) < 1e-5);
      const [g] = tf.grads((t: tf.Tensor) => nuclearNorm(t as tf.Tensor2D))([x]);
      assert.ok(Array.from(g!.dataSync()).every(Number.isFinite));
    });
    const { trace, inverseSqrt } = traceSqrtPsd([4, 0, 0, 4], 2);
    assert.equal(trace, 4);
    assert.deepEqual(Array.from(inverseSqrt), [0.5, 0, 0, 0.5]);
  });

  it('refuses other shapes and dtypes', () => {
    assert.throws(() => symmetricEigen([1, 2, 3], 2), /expected 4 entries/);
    tf.tidy(() => {
      assert.throws(() => nuclearNorm(tf.tensor1d([1, 2]) as unknown as tf.Tensor2D), /expected \[R, C\] or \[S, R, C\]/);
      assert.throws(() => nuclearNorm(tf.tensor2d([1, 2], [1, 2], 'int32')), /expected float32/);
    });
  });
});
