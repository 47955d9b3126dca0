/**
 * The LeJEPA loss (Balestriero & LeCun 2025, "LeJEPA: Provable and Scalable Self-Supervised
 * Learning Without the Heuristics"; the official `lejepa` package's `SlicingUnivariateTest`
 * with `EppsPulley`, and its MINIMAL.md): the prediction of every view to the mean of the
 * global views, plus SIGReg, an Epps-Pulley test of random 1-D projections of the embeddings
 * against N(0, 1), its empirical characteristic function over the global batch.
 */
import { invalidValue } from '../core/errors.js';
import { detach } from '../core/ops.js';
import type { ProcessGroup } from '../core/process-group.js';
import { tf, type Scalar } from '../core/tf.js';
import { batchLayout, sumOverRanks, type BatchLayout } from './global-batch.js';
import { checkPair, checkPositive } from './ops.js';

export interface LejepaOptions {
  /** λ in [0, 1]: `loss = (1 − λ) · prediction + λ · SIGReg` (MINIMAL.md's `lamb`: 0.02). */
  sigregWeight?: number;
  /** G, 1 ≤ G ≤ V: the first G views are the global ones, whose mean every view predicts; default all V. */
  globalViews?: number;
  /** Largest integration point t_max of the Epps-Pulley integral over [0, t_max] (the reference: 3). */
  tMax?: number;
  /** Integration points (trapezoid, odd; the reference's `knots` / `n_points`: 17). */
  knots?: number;
}

/** The loss and its two (unweighted) parts. */
export interface LejepaResult {
  /** `(1 − λ) · prediction + λ · sigreg`, scalar `[]`. */
  loss: Scalar;
  /** Mean over the views, this rank's rows and the K features of `(mean of the global views − view)²`, `[]`. */
  prediction: Scalar;
  /** The Epps-Pulley statistic of the global batch, averaged over the views and the S projections, `[]`. */
  sigreg: Scalar;
}

/** MINIMAL.md's λ, and the Epps-Pulley integration of the reference. */
export const LEJEPA_DEFAULTS = { sigregWeight: 0.02, tMax: 3, knots: 17 } as const;

/**
 * LeJEPA: `(1 − λ) · mean_v mean((c − z_v)²) + λ · mean_v mean_s EP(z_v a_s)` with
 * `c = mean_{g < G} z_g` (per sample) and, for the N values `x` of one projection over the
 * global batch, the Epps-Pulley statistic
 * `EP(x) = N · Σ_j w_j ((mean_n cos(t_j x_n) − φ(t_j))² + (mean_n sin(t_j x_n))²)`,
 * `t_j` evenly spaced on [0, t_max], `φ(t) = exp(−t²/2)` (the N(0, 1) characteristic function)
 * and `w_j` the trapezoid weights doubled (the integral over [−t_max, t_max] by symmetry) times φ.
 *
 * - `views`: V ≥ 2 tensors `[B, K]`, the embeddings (projector outputs) of the V views of the
 *   same B samples, the G global views first.
 * - `projections`: `[K, S]`, S unit-norm directions (columns), the same on every rank (the
 *   caller draws them from a generator seeded the same everywhere); constants (detached here).
 * - Returns the loss, the prediction term and the SIGReg term (scalars `[]`).
 *
 * `group` (W ranks, N = W·B): the prediction term is the mean over this rank's rows (mean_r is
 * the global one). SIGReg's sums of cos and sin `[V, 2, S, T]` are summed over ranks with the
 * differentiable {@link sumOverRanks} (one all-reduce forward, one backward), so every rank gets
 * the statistic of the global batch and, through the backward's sum, W × its gradient on its
 * rows (the scale convention of src/distributed/collectives.ts). An all-reduce without a
 * gradient (`torch.distributed.all_reduce`, lightly #1920) gives the right value but each rank
 * only its own share of the gradient, 1/W of it after DDP's averaging.
 */
export function lejepaLoss(views: tf.Tensor2D[], projections: tf.Tensor2D, options: LejepaOptions = {}, group?: ProcessGroup): LejepaResult {
  if (!Array.isArray(views) || views.length < 2)
    throw new Error(`lejepaLoss: needs at least 2 views, got ${Array.isArray(views) ? views.length : typeof views}`);
  views.forEach((v, i) => checkPair('lejepaLoss', ['views[0]', `views[${i}]`], views[0]!, v));
  const [b, k] = views[0]!.shape;
  if (projections?.rank !== 2 || projections.shape[0] !== k || projections.dtype !== 'float32') {
    throw new Error(`lejepaLoss: projections must be float32 [${k}, S], got ${projections?.dtype} [${projections?.shape.join(', ')}]`);
  }
  const { sigregWeight: lambda, tMax, knots } = { ...LEJEPA_DEFAULTS, ...options };
  const g = options.globalViews ?? views.length;
  if (!(Number.isFinite(lambda) && lambda >= 0 && lambda <= 1)) throw invalidValue('sigregWeight', lambda, 'a number in [0, 1]');
  if (!(Number.isInteger(g) && g >= 1 && g <= views.length)) throw invalidValue('globalViews', g, `an integer in [1, ${views.length}] (the views given)`);
  checkPositive('tMax', tMax);
  if (!(Number.isInteger(knots) && knots >= 3 && knots % 2 === 1)) throw invalidValue('knots', knots, 'an odd integer >= 3');
  const layout = batchLayout('lejepaLoss', b, group);
  return tf.tidy(() => {
    const centre = tf.div(tf.addN(views.slice(0, g)), g); // [B, K]
    const prediction = tf.mean(tf.stack(views.map((z) => tf.mean(tf.square(tf.sub(centre, z)))))) as Scalar;
    const sigreg = eppsPulley(views, detach(projections), tMax, knots, layout);
    const loss = tf.add(tf.mul(prediction, 1 - lambda), tf.mul(sigreg, lambda)) as Scalar;
    return { loss, prediction, sigreg };
  });
}

/** The integration points `t` `[T]` on [0, t_max], φ(t) and the weights (trapezoid × 2 × φ), as the reference's `EppsPulley`. */
function eppsPulleyGrid(tMax: number, knots: number): { t: Float64Array; phi: Float64Array; weights: Float64Array } {
  const t = Float64Array.from({ length: knots }, (_, j) => (tMax * j) / (knots - 1));
  const phi = t.map((x) => Math.exp(-0.5 * x * x));
  const dt = tMax / (knots - 1);
  const weights = phi.map((p, j) => (j === 0 || j === knots - 1 ? dt : 2 * dt) * p);
  return { t, phi, weights };
}

/** Mean over the views and projections of the Epps-Pulley statistic of the global batch (see {@link lejepaLoss}): `[]`. */
function eppsPulley(views: tf.Tensor2D[], projections: tf.Tensor2D, tMax: number, knots: number, layout: BatchLayout): Scalar {
  const { t, phi, weights } = eppsPulleyGrid(tMax, knots);
  const n = layout.globalBatch;
  const points = tf.tensor1d(Float32Array.from(t));
  // Per view: Σ over this rank's rows of cos and sin of t·(z a_s), [2, S, T].
  const sums = tf.stack(
    views.map((z) => {
      const xt = tf.mul(tf.expandDims(tf.matMul(z, projections), 2), points); // [B, S, T]
      return tf.stack([tf.sum(tf.cos(xt), 0), tf.sum(tf.sin(xt), 0)]);
    }),
  ); // [V, 2, S, T]
  const [cosMean, sinMean] = tf.unstack(tf.div(sumOverRanks(sums, layout), n), 1); // [V, S, T] each
  const err = tf.add(tf.square(tf.sub(cosMean!, tf.tensor1d(Float32Array.from(phi)))), tf.square(sinMean!)); // [V, S, T]
  const statistic = tf.mul(tf.sum(tf.mul(err, tf.tensor1d(Float32Array.from(weights))), 2), n); // [V, S]
  return tf.mean(statistic) as Scalar;
}
