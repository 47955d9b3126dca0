/**
 * Helpers of the native-kernel tests: run the same computation with the native (oneDNN)
 * kernels and with tfjs's pure-JS kernels, and compare.
 */
import assert from 'node:assert/strict';
import {
  installNativeKernels,
  nativeAddonPath,
  nativeKernelsAvailable,
  nativeKernelsError,
  nativeKernelStats,
  restoreJsKernels,
} from '../../src/core/native-kernels.js';
import { Rng } from '../../src/core/random.js';
import { tf, type Tensor } from '../../src/core/tf.js';

/**
 * Fails (never skips) when the addon is not built: CI installs libdnnl-dev, so a missing
 * addon there is a build failure to report, not a reason to test nothing.
 */
export function requireNativeKernels(): void {
  if (!nativeKernelsAvailable()) {
    assert.fail(
      `the oneDNN addon is not built or does not load (${nativeAddonPath()}): ${nativeKernelsError()}. ` +
        'Install libdnnl-dev (Debian/Ubuntu) and run `npm run build:native`.',
    );
  }
  assert.ok(installNativeKernels(), 'installNativeKernels() returned false');
}

/** Standard normal float32 tensor from a seeded generator. */
export function randn(shape: number[], seed: number, scale = 1, shift = 0): Tensor {
  const n = shape.reduce((a, b) => a * b, 1);
  const values = new Rng(seed).normalArray(n, shift, scale);
  return tf.tensor(values, shape, 'float32');
}

/** A seeded generator of small test parameters. */
export class Pick {
  private readonly rng: Rng;
  constructor(seed: number) {
    this.rng = new Rng(seed);
  }
  int(lo: number, hi: number): number {
    return lo + Math.floor(this.rng.uniform() * (hi - lo + 1));
  }
  one<T>(xs: readonly T[]): T {
    return xs[Math.floor(this.rng.uniform() * xs.length)];
  }
}

export interface Outputs {
  shapes: number[][];
  values: Float32Array[];
}

function snapshot(result: Tensor | Tensor[] | Record<string, Tensor>): Outputs {
  const list = Array.isArray(result) ? result : result instanceof tf.Tensor ? [result] : Object.values(result);
  const out = { shapes: list.map((t) => t.shape.slice()), values: list.map((t) => Float32Array.from(t.dataSync())) };
  tf.dispose(list);
  return out;
}

/**
 * Runs `fn` with the native kernels and with the JS kernels (native ones reinstalled
 * afterwards). Returns both outputs and the native-kernel call counts of the native run.
 */
export function bothEngines(fn: () => Tensor | Tensor[] | Record<string, Tensor>): {
  native: Outputs;
  js: Outputs;
  stats: Record<string, { native: number; fallback: number }>;
} {
  installNativeKernels();
  const before = nativeKernelStats();
  const native = snapshot(tf.tidy(fn));
  const after = nativeKernelStats();
  const stats: Record<string, { native: number; fallback: number }> = {};
  for (const [k, v] of Object.entries(after)) {
    const b = before[k] ?? { native: 0, fallback: 0 };
    if (v.native !== b.native || v.fallback !== b.fallback) stats[k] = { native: v.native - b.native, fallback: v.fallback - b.fallback };
  }
  restoreJsKernels();
  try {
    const js = snapshot(tf.tidy(fn));
    return { native, js, stats };
  } finally {
    installNativeKernels();
  }
}

/** `max |a - b| / max |b|`, NaNs required at the same places (then ignored). */
export function relativeMaxError(a: Float32Array, b: Float32Array, what: string): number {
  assert.equal(a.length, b.length, `${what}: length`);
  let diff = 0;
  let ref = 0;
  for (let i = 0; i < a.length; i++) {
    const an = Number.isNaN(a[i]);
    const bn = Number.isNaN(b[i]);
    if (an || bn) {
      assert.ok(an && bn, `${what}: NaN mismatch at ${i}: native ${a[i]}, js ${b[i]}`);
      continue;
    }
    if (a[i] === b[i]) continue; // also equal infinities
    diff = Math.max(diff, Math.abs(a[i] - b[i]));
    ref = Math.max(ref, Math.abs(b[i]));
  }
  for (let i = 0; i < b.length; i++) if (Number.isFinite(b[i])) ref = Math.max(ref, Math.abs(b[i]));
  return diff === 0 ? 0 : diff / Math.max(ref, 1e-30);
}

/** Asserts that native and JS outputs have equal shapes and agree to `tol` (relative to the largest value). */
export function assertClose(result: { native: Outputs; js: Outputs }, what: string, tol = 1e-4): void {
  const { native, js } = result;
  assert.deepEqual(native.shapes, js.shapes, `${what}: shapes`);
  native.values.forEach((v, i) => {
    const err = relativeMaxError(v, js.values[i], `${what} [output ${i}]`);
    assert.ok(err <= tol, `${what} [output ${i}]: relative error ${err.toExponential(2)} > ${tol}`);
  });
}

/** Asserts that `kernel` ran natively (and never fell back) in `stats`. */
export function assertRanNatively(stats: Record<string, { native: number; fallback: number }>, kernel: string, what: string): void {
  const s = stats[kernel];
  assert.ok(s != null && s.native > 0, `${what}: ${kernel} did not run natively (${JSON.stringify(stats)})`);
  assert.equal(s.fallback, 0, `${what}: ${kernel} fell back to JS ${s.fallback} time(s)`);
}

/**
 * Asserts that the gradients of `loss` with respect to `inputs` are the same (relative
 * 1e-4) when the native kernels are removed between its forward and backward pass (so the
 * backward falls back to tfjs ops) as when they stay. `loss(inputs, removeNative)` must call
 * `removeNative()` after its fused forward. Disposes `inputs` and every gradient, and
 * reinstalls the native kernels.
 */
export function assertFallbackGradients(loss: (inputs: Tensor[], removeNative: () => void) => Tensor, inputs: Tensor[]): void {
  const grads = (removeBeforeBackward: boolean) => tf.grads((...xs: Tensor[]) => loss(xs, removeBeforeBackward ? restoreJsKernels : () => undefined))(inputs);
  const native = grads(false);
  try {
    const fallback = grads(true);
    fallback.forEach((g, i) => {
      const err = relativeMaxError(g.dataSync() as Float32Array, native[i].dataSync() as Float32Array, `gradient ${i}`);
      assert.ok(err <= 1e-4, `gradient ${i}: relative error ${err.toExponential(2)}`);
    });
    tf.dispose(fallback);
  } finally {
    requireNativeKernels();
    tf.dispose([...inputs, ...native]);
  }
}
