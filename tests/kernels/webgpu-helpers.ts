/**
 * Helpers of the WebGPU kernel tests: run the same computations on the `webgpu` engine
 * (ssl-zoo's WGSL kernels installed) and on `cpu-js` (tfjs's pure-JS kernels, the
 * reference), and compare.
 *
 * WebGPU in Node cannot read synchronously, and moving a tensor from webgpu to cpu reads
 * synchronously, so each computation builds its own inputs (seeded, on the engine that
 * runs it), every output is read with `await data()` before the engine changes, and
 * nothing created on one engine is used on the other.
 */
import assert from 'node:assert/strict';
import { initEngine } from '../../src/core/engine.js';
import { Rng } from '../../src/core/random.js';
import { tf, type Tensor } from '../../src/core/tf.js';
import { useWebGpu } from '../helpers/webgpu.js';

/** A computation: builds its inputs and returns its outputs (e.g. a result and its gradients). */
export type Computation = () => Tensor[];

/** The outputs of a computation, read back. */
export interface ReadBack {
  shapes: number[][];
  values: Float32Array[];
}

/** Seeded standard-normal float32 tensor (scaled and shifted). */
export function randn(shape: number[], seed: number, scale = 1, shift = 0): Tensor {
  const n = shape.reduce((a, b) => a * b, 1);
  return tf.tensor(new Rng(seed).normalArray(n, shift, scale), shape, 'float32');
}

/** `f(inputs)` and its gradients with respect to `inputs`, through `sum(f · r)` with a seeded `r`. */
export function valueAndGrads(f: (...xs: Tensor[]) => Tensor, inputs: Tensor[], seed: number): Tensor[] {
  const y = f(...inputs);
  const r = randn(y.shape, seed);
  const grads = tf.grads((...xs: Tensor[]) => tf.sum(tf.mul(f(...xs), r)))(inputs);
  return [y, ...grads];
}

/** Runs every computation on the current engine and reads its outputs back. */
export async function readAll(computations: Record<string, Computation>): Promise<Record<string, ReadBack>> {
  const out: Record<string, ReadBack> = {};
  for (const [name, compute] of Object.entries(computations)) {
    const tensors = tf.tidy(compute);
    out[name] = {
      shapes: tensors.map((t) => t.shape.slice()),
      values: await Promise.all(tensors.map(async (t) => Float32Array.from(await t.data()))),
    };
    tf.dispose(tensors);
  }
  return out;
}

/** Runs every computation on webgpu, then on cpu-js (the engine is cpu-js afterwards). */
export async function onBothEngines(
  computations: Record<string, Computation>,
): Promise<{ webgpu: Record<string, ReadBack>; reference: Record<string, ReadBack> }> {
  await useWebGpu();
  const webgpu = await readAll(computations);
  await initEngine('cpu-js');
  const reference = await readAll(computations);
  return { webgpu, reference };
}

/** `‖a − b‖₂ / ‖b‖₂` (0 when both are zero); NaNs must sit at the same places (then ignored). */
export function relativeNormError(a: Float32Array, b: Float32Array, what: string): number {
  assert.equal(a.length, b.length, `${what}: length`);
  let diff = 0;
  let ref = 0;
  for (let i = 0; i < a.length; i++) {
    if (Number.isNaN(a[i]) || Number.isNaN(b[i])) {
      assert.ok(Number.isNaN(a[i]) && Number.isNaN(b[i]), `${what}: NaN mismatch at ${i}: webgpu ${a[i]}, reference ${b[i]}`);
      continue;
    }
    diff += (a[i] - b[i]) ** 2;
    ref += b[i] ** 2;
  }
  if (diff === 0) return 0;
  return Math.sqrt(diff) / Math.sqrt(ref);
}

/**
 * The tolerance of the comparisons: 1e-5 relative in the L2 norm. float32 rounds at
 * 6e-8 relative; a sum of K terms accumulates about sqrt(K)·6e-8 in the norm (a few
 * 1e-6 at K = 2048, the largest reduction here), and the two engines sum in different
 * orders and use different exp/erf/sqrt, so correct kernels measure 1e-7 to 1e-6. A wrong
 * kernel (a wrong index, operand or broadcast) is off by 1e-2 to 1 relative.
 */
export const TOLERANCE = 1e-5;

/** Asserts equal shapes and every output within `tol` (relative, L2) of the reference. */
export function assertMatches(webgpu: ReadBack, reference: ReadBack, what: string, tol = TOLERANCE): void {
  assert.deepEqual(webgpu.shapes, reference.shapes, `${what}: shapes`);
  reference.values.forEach((ref, i) => {
    const err = relativeNormError(webgpu.values[i], ref, `${what} [output ${i}]`);
    assert.ok(err <= tol, `${what} [output ${i}]: relative error ${err.toExponential(2)} > ${tol} (webgpu vs cpu-js)`);
    assert.ok(
      ref.some((v) => v !== 0),
      `${what} [output ${i}]: the reference is all zeros (a test that cannot fail)`,
    );
  });
}
