/**
 * Shared helpers of the loss tests: seeded inputs, finite-difference gradient probes, and
 * the paths of the reference cases.
 */
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { initEngine } from '../../src/core/engine.js';
import { Rng } from '../../src/core/random.js';
import { tf, type Scalar, type Tensor } from '../../src/core/tf.js';

/** The repository root (tests run from dist/tests/losses). */
export const REPO_ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../../..');
/** tests/fixtures/losses: the cases of scripts/gen_loss_cases.py and the example case. */
export const FIXTURE_DIR = join(REPO_ROOT, 'tests/fixtures/losses');
/** Every loss of the zoo, `ssl-loss-oracle/2` (scripts/gen_loss_cases.py, float64 PyTorch). */
export const CASES_FILE = join(FIXTURE_DIR, 'cases.json');
/**
 * The example case of the first format, `ssl-loss-oracle/1` (N = 6, D = 5, temperature 0.5:
 * SimCLR, Barlow Twins, BYOL, VICReg), made by another implementation than ours.
 */
export const EXAMPLE_CASE = join(FIXTURE_DIR, 'loss-case-example.json');

/** Selects the cpu engine. */
export async function useCpuEngine(): Promise<void> {
  await initEngine('cpu');
}

/** `[rows, cols]` of N(mean, std²) float32 draws from a seeded generator. */
export function randn(rng: Rng, rows: number, cols: number, std = 1, mean = 0): tf.Tensor2D {
  return tf.tensor2d(rng.normalArray(rows * cols, mean, std), [rows, cols]);
}

/** Plain nested arrays of a 2-D tensor, for reference computations in float64. */
export function rowsOf(t: tf.Tensor2D): number[][] {
  return t.arraySync();
}

export type LossFn = (...xs: tf.Tensor2D[]) => Scalar;

/** Finite-difference derivatives of f at `inputs`, along a few coordinates and one direction. */
export interface FdProbe {
  /** Per input: probed flat coordinates and their central differences. */
  coords: { index: number; fd: number }[][];
  /** Per input: a random unit direction v and the central difference along it. */
  directions: { v: Float32Array; fd: number }[];
}

function evalAt(f: LossFn, xs: tf.Tensor2D[], which: number, delta: Float32Array): number {
  return tf.tidy(() => {
    const moved = xs.map((x, i) => (i === which ? (tf.add(x, tf.tensor(delta, x.shape)) as tf.Tensor2D) : x));
    return f(...moved).dataSync()[0];
  });
}

/**
 * Central differences `(f(x + h·e) − f(x − h·e)) / 2h` of f for the inputs listed in `which`:
 * `nCoords` random coordinates plus the coordinate of the largest analytic |gradient|, and
 * one random direction. float32 arithmetic, so `h` is 1e-3-ish and the comparison relative.
 */
export function fdProbe(f: LossFn, xs: tf.Tensor2D[], analytic: Tensor[], which: number[], rng: Rng, { h = 2e-3, nCoords = 4 } = {}): FdProbe {
  const coords: FdProbe['coords'] = [];
  const directions: FdProbe['directions'] = [];
  for (const i of which) {
    const size = xs[i].size;
    const g = analytic[i].dataSync();
    let argmax = 0;
    for (let k = 1; k < size; k++) if (Math.abs(g[k]) > Math.abs(g[argmax])) argmax = k;
    const picks = [argmax];
    for (let k = 0; k < nCoords; k++) picks.push(rng.int(size));
    coords[i] = picks.map((index) => {
      const delta = new Float32Array(size);
      delta[index] = h;
      const plus = evalAt(f, xs, i, delta);
      delta[index] = -h;
      const minus = evalAt(f, xs, i, delta);
      return { index, fd: (plus - minus) / (2 * h) };
    });
    const v = rng.normalArray(size);
    let norm = 0;
    for (const x of v) norm += x * x;
    norm = Math.sqrt(norm);
    for (let k = 0; k < size; k++) v[k] /= norm;
    const plus = evalAt(
      f,
      xs,
      i,
      v.map((x) => x * h),
    );
    const minus = evalAt(
      f,
      xs,
      i,
      v.map((x) => -x * h),
    );
    directions[i] = { v, fd: (plus - minus) / (2 * h) };
  }
  return { coords, directions };
}

/**
 * Worst relative disagreement between a probe and analytic gradients (flat arrays per
 * input): each error is |fd − analytic| / max(|analytic|, 0.1·max|grad of that input|).
 */
export function probeError(probe: FdProbe, analytic: ArrayLike<number>[]): number {
  let worst = 0;
  probe.coords.forEach((list, i) => {
    if (!list) return;
    const g = analytic[i];
    let gMax = 0;
    for (let k = 0; k < g.length; k++) gMax = Math.max(gMax, Math.abs(g[k]));
    const floor = Math.max(0.1 * gMax, 1e-6);
    for (const { index, fd } of list) {
      worst = Math.max(worst, Math.abs(fd - g[index]) / Math.max(Math.abs(g[index]), floor));
    }
    const { v, fd } = probe.directions[i];
    let dot = 0;
    let gNorm = 0;
    for (let k = 0; k < g.length; k++) {
      dot += g[k] * v[k];
      gNorm += g[k] * g[k];
    }
    worst = Math.max(worst, Math.abs(fd - dot) / Math.max(Math.abs(dot), 0.1 * Math.sqrt(gNorm), 1e-6));
  });
  return worst;
}

/**
 * Gradient check of `f` at `xs` w.r.t. the inputs in `which` (default all): returns the worst
 * relative error of the true analytic gradient and of the analytic gradient halved (which a
 * meaningful check must reject).
 */
export function gradCheck(
  f: LossFn,
  xs: tf.Tensor2D[],
  rng: Rng,
  which: number[] = xs.map((_, i) => i),
  options: { h?: number; nCoords?: number } = {},
): { error: number; halvedError: number } {
  const { grads } = tf.valueAndGrads((...a: Tensor[]) => f(...(a as tf.Tensor2D[])))(xs);
  try {
    const probe = fdProbe(f, xs, grads, which, rng, options);
    const flat = grads.map((g) => g.dataSync());
    return {
      error: probeError(probe, flat),
      halvedError: probeError(
        probe,
        flat.map((g) => g.map((x) => x / 2)),
      ),
    };
  } finally {
    tf.dispose(grads);
  }
}

export { Rng };
