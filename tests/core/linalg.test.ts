/**
 * The Cholesky factor and the lower-triangular solve (src/core/linalg.ts): PyTorch parity of
 * values and autograd gradients (tests/fixtures/core/linalg-torch.json, float64, written by
 * scripts/gen_linalg_fixtures.py), closed forms, finite-difference gradient checks, which
 * triangle is read, and the errors.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { initEngine } from '../../src/core/engine.js';
import { cholesky, solveLowerTriangular } from '../../src/core/linalg.js';
import { tf, type Tensor } from '../../src/core/tf.js';
import { maxAbsDiff, randn } from './helpers.js';

interface Flat {
  shape: number[];
  data: number[];
}

const torchCase = JSON.parse(readFileSync(new URL('../../../tests/fixtures/core/linalg-torch.json', import.meta.url), 'utf8')) as Record<
  'A' | 'L' | 'grad_L' | 'grad_A' | 'B' | 'L_solve' | 'X' | 'grad_X' | 'grad_L_solve' | 'grad_B',
  Flat
>;

const tensorOf = (f: Flat) => tf.tensor3d(f.data, f.shape as [number, number, number], 'float32');

/** max |a − b| / max |b|. */
function relative(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let scale = 0;
  for (let i = 0; i < b.length; i++) scale = Math.max(scale, Math.abs(b[i]!));
  return maxAbsDiff(a, b) / scale;
}

/** The gradients of Σ upstream ⊙ f(inputs) with respect to the inputs (a vector-Jacobian product). */
function vjp(f: (...xs: Tensor[]) => Tensor, inputs: Tensor[], upstream: Tensor): Float32Array[] {
  const grads = tf.grads((...xs: Tensor[]) => tf.sum(tf.mul(f(...xs), upstream)))(inputs);
  const out = grads.map((g) => g.dataSync() as Float32Array);
  tf.dispose(grads);
  return out;
}

/** A `[k, k]` symmetric positive-definite matrix `R Rᵀ / k + shift·I` from a seeded generator. */
function spd(k: number, seed: number, shift = 0.5): tf.Tensor2D {
  return tf.tidy(() => {
    const r = randn([k, k], seed) as tf.Tensor2D;
    return tf.add(tf.div(tf.matMul(r, r, false, true), k), tf.mul(tf.eye(k), shift)) as tf.Tensor2D;
  });
}

/**
 * Central difference of φ(t) = Σ weights ⊙ op(x + t·pattern) at 0, with φ summed in float64
 * from the op's float32 outputs, the actual (float32-rounded) step in the denominator, and one
 * Richardson extrapolation: (4·D(h/2) − D(h)) / 3. `pattern` has entries 0 or 1 on coordinates
 * holding equal values (a diagonal entry, or a symmetric pair), so that each step moves them
 * all by the same rounded amount.
 */
function richardson(op: (x: Tensor) => Tensor, x: tf.Tensor, pattern: Float32Array, weights: ArrayLike<number>, h = 0.04): number {
  const base = x.dataSync();
  const at = (t: number) =>
    tf.tidy(() => {
      const moved = base.map((v, i) => (pattern[i] ? Math.fround(v + t) : v));
      const out = op(tf.tensor(moved, x.shape, 'float32')).dataSync();
      let phi = 0;
      for (let i = 0; i < out.length; i++) phi += weights[i]! * out[i]!;
      const i0 = pattern.indexOf(1);
      return { phi, at: moved[i0]! };
    });
  const central = (step: number) => {
    const plus = at(step);
    const minus = at(-step);
    return (plus.phi - minus.phi) / (plus.at - minus.at);
  };
  return (4 * central(h / 2) - central(h)) / 3;
}

describe('core/linalg: Cholesky factor and lower-triangular solve', () => {
  before(() => initEngine('cpu'));

  it('matches PyTorch float64: cholesky and its autograd gradient (a batch of 2 SPD 5 × 5 matrices)', () => {
    tf.tidy(() => {
      const a = tensorOf(torchCase.A);
      assert.ok(relative(cholesky(a).dataSync(), torchCase.L.data) < 1e-6);
      const [gradA] = vjp((x) => cholesky(x as tf.Tensor3D), [a], tensorOf(torchCase.grad_L));
      const e = relative(gradA!, torchCase.grad_A.data);
      assert.ok(e < 1e-5, `cholesky gradient: relative error ${e}`);
      // The same through the single-matrix path.
      const second = (x: tf.Tensor3D) => tf.reshape(tf.slice(x, [1, 0, 0], [1, 5, 5]), [5, 5]) as tf.Tensor2D;
      const [g0] = vjp((x) => cholesky(x as tf.Tensor2D), [second(a)], second(tensorOf(torchCase.grad_L)));
      assert.ok(relative(g0!, torchCase.grad_A.data.slice(25)) < 1e-5);
    });
  });

  it('matches PyTorch float64: the solve L X = B and its autograd gradients (batch of 2, B 5 × 3)', () => {
    tf.tidy(() => {
      const l = tensorOf(torchCase.L_solve);
      const b = tensorOf(torchCase.B);
      assert.ok(relative(solveLowerTriangular(l, b).dataSync(), torchCase.X.data) < 1e-6);
      const [gradL, gradB] = vjp((x, y) => solveLowerTriangular(x as tf.Tensor3D, y as tf.Tensor3D), [l, b], tensorOf(torchCase.grad_X));
      const eL = relative(gradL!, torchCase.grad_L_solve.data);
      const eB = relative(gradB!, torchCase.grad_B.data);
      assert.ok(eL < 1e-5 && eB < 1e-5, `solve gradients: relative errors ${eL} (L), ${eB} (B)`);
    });
  });

  it('closed forms: L Lᵀ = A, the factor of a diagonal matrix, L⁻¹ L = I', () => {
    tf.tidy(() => {
      const a = spd(7, 3);
      const l = cholesky(a);
      assert.ok(relative(tf.matMul(l, l, false, true).dataSync(), a.dataSync()) < 1e-6);
      const upper = tf.sub(l, tf.linalg.bandPart(l, -1, 0));
      assert.equal(tf.max(tf.abs(upper)).dataSync()[0], 0, 'zeros above the diagonal');
      const diag = tf.diag(tf.tensor1d([4, 9, 0.25]));
      assert.deepEqual(Array.from(cholesky(diag as tf.Tensor2D).dataSync()), [2, 0, 0, 0, 3, 0, 0, 0, 0.5]);
      const inverse = solveLowerTriangular(l, tf.eye(7) as tf.Tensor2D);
      assert.ok(maxAbsDiff(tf.matMul(inverse, l).dataSync(), tf.eye(7).dataSync()) < 1e-5);
    });
  });

  it('reads only the lower triangle (of A and of L), and gives L a lower-triangular gradient', () => {
    tf.tidy(() => {
      const a = spd(5, 4);
      const strictUpper = tf.sub(tf.ones([5, 5]), tf.linalg.bandPart(tf.ones([5, 5]), -1, 0)); // 1 above the diagonal
      assert.deepEqual(cholesky(tf.add(a, tf.mul(strictUpper, 7)) as tf.Tensor2D).dataSync(), cholesky(a).dataSync());
      const l = cholesky(a);
      const b = randn([5, 2], 5) as tf.Tensor2D;
      assert.deepEqual(solveLowerTriangular(tf.add(l, tf.mul(strictUpper, 3)) as tf.Tensor2D, b).dataSync(), solveLowerTriangular(l, b).dataSync());
      const [gl] = vjp((x) => solveLowerTriangular(x as tf.Tensor2D, b), [l], randn([5, 2], 6));
      for (let i = 0; i < 5; i++) for (let j = i + 1; j < 5; j++) assert.equal(gl![i * 5 + j], 0);
    });
  });

  it('gradients agree with finite differences (symmetric perturbations of A; every input of the solve); halved gradients do not', () => {
    tf.tidy(() => {
      const k = 6;
      const a = spd(k, 8);
      const weights = randn([k, k], 9);
      const [gradA] = vjp((x) => cholesky(x as tf.Tensor2D), [a], weights);
      const w = weights.dataSync();
      let worst = 0;
      let worstHalved = 0;
      for (const [i, j] of [
        [0, 0],
        [3, 3],
        [5, 5],
        [2, 0],
        [4, 1],
        [5, 3],
      ] as const) {
        const pattern = new Float32Array(k * k);
        pattern[i * k + j] = 1;
        pattern[j * k + i] = 1;
        const fd = richardson((x) => cholesky(x as tf.Tensor2D), a, pattern, w);
        const analytic = i === j ? gradA![i * k + i]! : 2 * gradA![i * k + j]!;
        worst = Math.max(worst, Math.abs(fd - analytic) / Math.max(Math.abs(analytic), 1e-3));
        worstHalved = Math.max(worstHalved, Math.abs(fd - analytic / 2) / Math.max(Math.abs(analytic), 1e-3));
      }
      assert.ok(worst < 2e-4, `cholesky: finite-difference error ${worst}`);
      assert.ok(worstHalved > 0.3, `cholesky: a halved gradient was not caught (${worstHalved})`);

      const l = cholesky(spd(k, 10));
      const b = randn([k, 3], 11) as tf.Tensor2D;
      const upstream = randn([k, 3], 12);
      const [gl, gb] = vjp((x, y) => solveLowerTriangular(x as tf.Tensor2D, y as tf.Tensor2D), [l, b], upstream);
      const u = upstream.dataSync();
      let worstSolve = 0;
      for (const [i, j] of [
        [0, 0],
        [4, 4],
        [3, 1],
        [5, 0],
      ] as const) {
        const pattern = new Float32Array(k * k);
        pattern[i * k + j] = 1;
        const fd = richardson((x) => solveLowerTriangular(x as tf.Tensor2D, b), l, pattern, u);
        worstSolve = Math.max(worstSolve, Math.abs(fd - gl![i * k + j]!) / Math.max(Math.abs(gl![i * k + j]!), 1e-3));
      }
      for (const index of [0, 7, 17]) {
        const pattern = new Float32Array(k * 3);
        pattern[index] = 1;
        const fd = richardson((y) => solveLowerTriangular(l, y as tf.Tensor2D), b, pattern, u);
        worstSolve = Math.max(worstSolve, Math.abs(fd - gb![index]!) / Math.max(Math.abs(gb![index]!), 1e-3));
      }
      assert.ok(worstSolve < 2e-4, `solve: finite-difference error ${worstSolve}`);
    });
  });

  it('refuses a non-square or non-float32 matrix, a matrix that is not positive definite, a zero pivot and a mismatched B', () => {
    tf.tidy(() => {
      assert.throws(() => cholesky(tf.zeros([3, 4]) as tf.Tensor2D), /cholesky: A must be a square matrix \[K, K\] or a batch \[S, K, K\], got shape \[3, 4\]/);
      assert.throws(() => cholesky(tf.zeros([3, 3], 'int32') as tf.Tensor2D), /A must be float32, got int32/);
      assert.throws(() => cholesky(tf.tensor2d([1, 2, 2, 1], [2, 2])), /not positive definite \(pivot 1 of 2 is -3\)/);
      assert.throws(() => cholesky(tf.tensor2d([NaN, 0, 0, 1], [2, 2])), /not positive definite \(pivot 0 of 2 is NaN\)/);
      assert.throws(() => solveLowerTriangular(tf.tensor2d([1, 0, 1, 0], [2, 2]), tf.ones([2, 1]) as tf.Tensor2D), /diagonal entry 1 of L is 0/);
      assert.throws(
        () => solveLowerTriangular(tf.eye(2) as tf.Tensor2D, tf.ones([3, 1]) as tf.Tensor2D),
        /B must be float32 \[2, M\] for L \[2, 2\], got float32 \[3, 1\]/,
      );
      assert.throws(() => solveLowerTriangular(tf.ones([2, 3, 3]) as tf.Tensor3D, tf.ones([1, 3, 1]) as tf.Tensor3D), /B must be float32 \[2, 3, M\]/);
    });
  });

  it('leaves no tensors behind, forward and backward', () => {
    const a = spd(4, 13);
    const before = tf.memory().numTensors;
    tf.tidy(() => vjp((x) => solveLowerTriangular(cholesky(x as tf.Tensor2D), tf.eye(4) as tf.Tensor2D), [a], tf.ones([4, 4])));
    assert.equal(tf.memory().numTensors, before);
    a.dispose();
  });
});
