/**
 * The WebGPU kernel of the nuclear norm (src/core/kernels/webgpu/nuclear-norm.ts: one-sided
 * Jacobi in float32) against the float64 cpu kernel, value and gradient `U Vᵀ`, on
 * SwiftShader: MMCR's centroid matrix (256 x 128: 64 pairs of columns a round, one per
 * thread), a batch of per-sample view matrices (128 x 8), a wide matrix (worked on
 * transposed), an odd number of columns, and rank-deficient matrices (zero singular values
 * cut, as on the cpu).
 */
import assert from 'node:assert/strict';
import { nuclearNorm } from '../../src/core/eigen.js';
import { initEngine } from '../../src/core/engine.js';
import { Rng } from '../../src/core/random.js';
import { tf, type Tensor } from '../../src/core/tf.js';
import { useCpu, useWebGpu } from '../helpers/webgpu.js';
import { maxRelativeDifference } from './helpers.js';

/** The norms `[S]` and their gradient `[S, R, C]` (of Σ_s w_s ‖X_s‖_*, seeded weights) on the current engine. */
async function compute(values: Float32Array, shape: [number, number, number]): Promise<Float32Array[]> {
  const x = tf.tensor3d(values, shape);
  const w = tf.tensor1d(Float32Array.from({ length: shape[0] }, (_, i) => 1 + i / 2));
  const norms = nuclearNorm(x);
  const [grad] = tf.grads((t: Tensor) => tf.sum(tf.mul(nuclearNorm(t as tf.Tensor3D), w)))([x]);
  const out = await Promise.all([norms, grad!].map(async (t) => Float32Array.from(await t.data())));
  tf.dispose([x, w, norms, grad!]);
  return out;
}

/** `[S, R, C]` standard-normal values; with `rank`, each matrix a product `[R, rank] x [rank, C]`. */
function matrices(shape: [number, number, number], seed: number, rank?: number): Float32Array {
  const [s, r, c] = shape;
  const rng = new Rng(seed);
  if (rank === undefined) return Float32Array.from(rng.normalArray(s * r * c, 0, 1));
  const out = new Float32Array(s * r * c);
  for (let b = 0; b < s; b++) {
    const [left, right] = [rng.normalArray(r * rank, 0, 1), rng.normalArray(rank * c, 0, 1)];
    for (let i = 0; i < r; i++)
      for (let j = 0; j < c; j++) for (let k = 0; k < rank; k++) out[b * r * c + i * c + j] += left[i * rank + k]! * right[k * c + j]!;
  }
  return out;
}

describe('core/eigen: the nuclear norm on the WebGPU engine (SwiftShader)', function () {
  this.timeout(300_000);
  before(async () => {
    await useWebGpu();
  });
  after(async () => {
    await useCpu();
  });

  const cases: Array<{ what: string; shape: [number, number, number]; rank?: number }> = [
    { what: "MMCR's centroids", shape: [1, 256, 128] },
    { what: 'per-sample view matrices', shape: [6, 128, 8] },
    { what: 'wide matrices (transposed)', shape: [3, 5, 40] },
    { what: 'an odd number of columns', shape: [2, 30, 7] },
    { what: 'rank 3 of 12 columns', shape: [2, 50, 12], rank: 3 },
    { what: 'rank 2, wide', shape: [1, 9, 33], rank: 2 },
  ];
  for (const { what, shape, rank } of cases) {
    it(`${what} [${shape.join(', ')}]${rank ? `, rank ${rank}` : ''}: the norm and U Vᵀ of the float64 cpu kernel to 1e-5`, async () => {
      const values = matrices(shape, shape[1] * 7 + shape[2], rank);
      await initEngine('cpu-js');
      const reference = await compute(values, shape);
      await tf.setBackend('webgpu');
      const gpu = await compute(values, shape);
      ['norms', 'gradient'].forEach((name, i) => {
        const error = maxRelativeDifference(gpu[i]!, reference[i]!);
        assert.ok(error < 1e-5, `${name}: relative error ${error.toExponential(2)}`);
      });
    });
  }
});
