/** Shared test utilities: finite-difference gradient checks and array comparisons. */
import { Rng } from '../../src/core/random.js';
import { tf, type Scalar, type Tensor, type Variable } from '../../src/core/tf.js';

/** A float32 tensor of standard normal draws from a seeded generator. */
export function randn(shape: number[], seed: number, scale = 1): Tensor {
  const n = shape.reduce((a, b) => a * b, 1);
  return tf.tensor(new Rng(seed).normalArray(n, 0, scale), shape);
}

/** `||a - b|| / ||b||` (Euclidean norms), b the reference. */
export function relativeError(a: ArrayLike<number>, b: ArrayLike<number>): number {
  if (a.length !== b.length) throw new Error(`length ${a.length} != ${b.length}`);
  let diff = 0;
  let ref = 0;
  for (let i = 0; i < a.length; i++) {
    diff += (a[i] - b[i]) ** 2;
    ref += b[i] ** 2;
  }
  return Math.sqrt(diff) / Math.max(Math.sqrt(ref), 1e-12);
}

/** `max |a - b|`. */
export function maxAbsDiff(a: ArrayLike<number>, b: ArrayLike<number>): number {
  if (a.length !== b.length) throw new Error(`length ${a.length} != ${b.length}`);
  let worst = 0;
  for (let i = 0; i < a.length; i++) worst = Math.max(worst, Math.abs(a[i] - b[i]));
  return worst;
}

/**
 * Compares autodiff gradients of `loss` with central finite differences, coordinate by
 * coordinate (the variables are perturbed in place and restored). Returns, per variable,
 * the relative error `||numeric - autodiff|| / ||autodiff||` and the gradient norm.
 */
export function gradientCheck(loss: () => Scalar, vars: Variable[], eps = 1e-2): Array<{ error: number; norm: number }> {
  const { value, grads } = tf.variableGrads(loss, vars);
  value.dispose();
  const evaluate = () => tf.tidy(() => loss().dataSync()[0]);
  const result = vars.map((v) => {
    const autodiff = Array.from(grads[v.name].dataSync());
    const base = Float32Array.from(v.dataSync());
    const numeric = new Float64Array(base.length);
    const set = (values: Float32Array) => tf.tidy(() => v.assign(tf.tensor(values, v.shape)));
    for (let i = 0; i < base.length; i++) {
      const plus = base.slice();
      const minus = base.slice();
      plus[i] += eps;
      minus[i] -= eps;
      set(plus);
      const fPlus = evaluate();
      set(minus);
      const fMinus = evaluate();
      numeric[i] = (fPlus - fMinus) / (plus[i] - minus[i]);
    }
    set(base);
    const norm = Math.sqrt(autodiff.reduce((s, g) => s + g * g, 0));
    return { error: relativeError(numeric, autodiff), norm };
  });
  tf.dispose(grads);
  return result;
}

/** max |a − b| / max |b| (the largest difference against the reference's largest magnitude). */
export function maxRelativeDifference(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let [worst, scale] = [0, 0];
  for (let i = 0; i < b.length; i++) {
    worst = Math.max(worst, Math.abs(a[i]! - b[i]!));
    scale = Math.max(scale, Math.abs(b[i]!));
  }
  return worst / scale;
}
