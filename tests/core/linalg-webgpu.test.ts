/**
 * The WebGPU kernels of the Cholesky factor and the lower-triangular solve
 * (src/core/kernels/webgpu/linalg.ts) against the float64 cpu kernels, forward and through
 * their gradients (which use the transposed solve), on SwiftShader; and NaN where the cpu
 * kernels throw.
 */
import assert from 'node:assert/strict';
import { initEngine } from '../../src/core/engine.js';
import { cholesky, solveLowerTriangular } from '../../src/core/linalg.js';
import { Rng } from '../../src/core/random.js';
import { tf, type Tensor } from '../../src/core/tf.js';
import { useCpu, useWebGpu } from '../helpers/webgpu.js';
import { maxRelativeDifference } from './helpers.js';

/** `[s, k, k]` symmetric positive-definite matrices `R Rᵀ / k + ½ I` (values, row-major). */
function spdValues(s: number, k: number, seed: number): Float32Array {
  const rng = new Rng(seed);
  const out = new Float32Array(s * k * k);
  for (let b = 0; b < s; b++) {
    const r = rng.normalArray(k * k, 0, 1);
    for (let i = 0; i < k; i++) {
      for (let j = 0; j < k; j++) {
        let dot = 0;
        for (let c = 0; c < k; c++) dot += r[i * k + c]! * r[j * k + c]!;
        out[b * k * k + i * k + j] = dot / k + (i === j ? 0.5 : 0);
      }
    }
  }
  return out;
}

/** The factor, the solve of `B` and the gradients of Σ W ⊙ L⁻¹(chol(A)) B with respect to A and B, on the current engine. */
async function compute(a: Float32Array, b: Float32Array, w: Float32Array, s: number, k: number, m: number): Promise<Float32Array[]> {
  const [at, bt, wt] = [tf.tensor3d(a, [s, k, k]), tf.tensor3d(b, [s, k, m]), tf.tensor3d(w, [s, k, m])];
  const l = cholesky(at);
  const x = solveLowerTriangular(l, bt);
  const f = (aa: Tensor, bb: Tensor) => tf.sum(tf.mul(solveLowerTriangular(cholesky(aa as tf.Tensor3D), bb as tf.Tensor3D), wt));
  const grads = tf.grads(f)([at, bt]);
  const out = await Promise.all([l, x, ...grads].map(async (t) => (await t.data()) as Float32Array));
  tf.dispose([at, bt, wt, l, x, ...grads]);
  return out;
}

describe('core/linalg on the WebGPU engine (SwiftShader)', function () {
  this.timeout(120_000);
  before(async () => {
    await useWebGpu();
  });
  after(async () => {
    await useCpu();
  });

  it('cholesky, the solve and their gradients equal the float64 cpu kernels to float32 round-off (K = 70 > the 64 threads)', async () => {
    for (const [s, k, m] of [
      [3, 5, 4],
      [2, 70, 70],
    ] as const) {
      const rng = new Rng(k);
      const [a, b, w] = [spdValues(s, k, 7), Float32Array.from(rng.normalArray(s * k * m, 0, 1)), Float32Array.from(rng.normalArray(s * k * m, 0, 1))];
      await initEngine('cpu-js');
      const reference = await compute(a, b, w, s, k, m);
      await tf.setBackend('webgpu');
      const gpu = await compute(a, b, w, s, k, m);
      ['L', 'X', 'grad A', 'grad B'].forEach((name, i) => {
        const error = maxRelativeDifference(gpu[i]!, reference[i]!);
        assert.ok(error < 2e-5, `K = ${k}: ${name}: relative error ${error}`);
      });
    }
  });

  it('gives NaN where the cpu kernels throw: a matrix that is not positive definite', async () => {
    await tf.setBackend('webgpu');
    const l = cholesky(tf.tensor2d([1, 2, 2, 1], [2, 2]));
    const values = await l.data();
    assert.equal(values[0], 1);
    assert.ok(Number.isNaN(values[3]), `pivot 1: ${values[3]}`);
    l.dispose();
  });
});
