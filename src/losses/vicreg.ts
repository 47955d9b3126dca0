/**
 * The VICReg loss (Bardes et al. 2022), with the paper's conventions (variance term averaged
 * over the two views) and global-batch statistics (docs/design.md contract 4).
 */
import { invalidValue } from '../core/errors.js';
import { tf, type Scalar } from '../core/tf.js';
import type { ProcessGroup } from '../core/process-group.js';
import { batchLayout, sumOverRanks, type BatchLayout } from './global-batch.js';
import { checkPair, offDiagonalSumOfSquares } from './ops.js';

export interface VicregOptions {
  /** Weight of the invariance (MSE) term. */
  simWeight: number;
  /** Weight of the variance (hinge on the standard deviation) term. */
  varWeight: number;
  /** Weight of the covariance term. */
  covWeight: number;
  /** Target standard deviation γ; default 1. */
  gamma?: number;
  /** Added to the variance before the square root; default 1e-4. */
  eps?: number;
}

/** solo-learn's / the paper's defaults: 25, 25, 1, γ = 1, eps 1e-4. */
export const VICREG_DEFAULTS: Readonly<Required<VicregOptions>> = Object.freeze({
  simWeight: 25,
  varWeight: 25,
  covWeight: 1,
  gamma: 1,
  eps: 1e-4,
});

/** The loss and its three unweighted terms (for logging). All scalars `[]`. */
export interface VicregTerms {
  /** `simWeight * invariance + varWeight * variance + covWeight * covariance`. */
  loss: Scalar;
  /** MSE(z1, z2), mean over all elements. */
  invariance: Scalar;
  /** (mean_j relu(γ − std1_j) + mean_j relu(γ − std2_j)) / 2. */
  variance: Scalar;
  /** (Σ_{i≠j} C1_ij² + Σ_{i≠j} C2_ij²) / D. */
  covariance: Scalar;
}

/**
 * VICReg: `simWeight * MSE(z1, z2) + varWeight * (mean relu(γ − std1) + mean relu(γ − std2)) / 2
 * + covWeight * (Σ_{i≠j} C1_ij² + Σ_{i≠j} C2_ij²) / D`, with `std = sqrt(var_unbiased + eps)`
 * and `C = zcᵀ zc / (N − 1)` `[D, D]` over the global batch (N = W·B ≥ 2).
 *
 * - `z1`, `z2`: `[B, D]` embeddings of the two views. Returns a scalar `[]`.
 * - Per rank (W ranks): the invariance term is the mean over *local* rows (the mean over
 *   ranks is the global MSE); the variance and covariance terms are global, from the column
 *   sums and the centred cross-products `zcᵀ zc` passed through `sumOverRanks`
 *   (differentiable all-reduce SUM; var = diag(C)). So `mean_r loss_r` is the global loss and
 *   each rank's gradient on its rows is W × the global gradient's rows, which DDP's averaging
 *   divides back out (scale convention: src/distributed/collectives.ts).
 *   Two collectives forward, two backward.
 */
export function vicregLoss(z1: tf.Tensor2D, z2: tf.Tensor2D, options: VicregOptions = VICREG_DEFAULTS, group?: ProcessGroup): Scalar {
  const terms = vicregLossWithTerms(z1, z2, options, group);
  tf.dispose([terms.invariance, terms.variance, terms.covariance]);
  return terms.loss;
}

/** {@link vicregLoss} with its unweighted invariance, variance and covariance terms. */
export function vicregLossWithTerms(z1: tf.Tensor2D, z2: tf.Tensor2D, options: VicregOptions = VICREG_DEFAULTS, group?: ProcessGroup): VicregTerms {
  checkPair('vicregLoss', ['z1', 'z2'], z1, z2);
  const { simWeight, varWeight, covWeight } = options;
  const gamma = options.gamma ?? VICREG_DEFAULTS.gamma;
  const eps = options.eps ?? VICREG_DEFAULTS.eps;
  for (const [field, value] of [
    ['simWeight', simWeight],
    ['varWeight', varWeight],
    ['covWeight', covWeight],
    ['gamma', gamma],
    ['eps', eps],
  ] as const) {
    if (!(Number.isFinite(value) && value >= 0)) throw invalidValue(field, value, 'a number >= 0');
  }
  const layout = batchLayout('vicregLoss', z1.shape[0], group);
  if (layout.globalBatch < 2) {
    throw invalidValue('batch size', layout.globalBatch, 'at least 2 samples for VICReg (unbiased variance)');
  }
  return tf.tidy(() => {
    const d = z1.shape[1];
    const invariance = tf.mean(tf.squaredDifference(z1, z2)) as Scalar;
    const [s1, s2] = viewStatistics([z1, z2], gamma, eps, layout);
    const variance = tf.div(tf.add(s1.varianceHinge, s2.varianceHinge), 2) as Scalar;
    const covariance = tf.div(tf.add(s1.offDiagonal, s2.offDiagonal), d) as Scalar;
    const loss = tf.addN([tf.mul(simWeight, invariance), tf.mul(varWeight, variance), tf.mul(covWeight, covariance)]) as Scalar;
    return { loss, invariance, variance, covariance };
  });
}

/**
 * Each view's global statistics: `mean_j relu(γ − sqrt(C_jj + eps))` and `Σ_{i≠j} C_ij²`,
 * with `C = zcᵀ zc / (N − 1)` `[D, D]` over the global batch ({@link covarianceStatistics}).
 * `views`: V tensors `[B, D]`.
 */
export function viewStatistics(views: tf.Tensor2D[], gamma: number, eps: number, layout: BatchLayout): Array<{ varianceHinge: Scalar; offDiagonal: Scalar }> {
  const d = views[0]!.shape[1];
  const stats = covarianceStatistics(tf.stack(views) as tf.Tensor3D, layout); // [V, D + 1]
  return views.map((_, v) => {
    const std = tf.sqrt(tf.add(tf.slice(stats, [v, 0], [1, d]), eps)); // [1, D]
    return {
      varianceHinge: tf.mean(tf.relu(tf.sub(gamma, std))) as Scalar,
      offDiagonal: tf.reshape(tf.slice(stats, [v, d], [1, 1]), []) as Scalar,
    };
  });
}

/**
 * The variances and the off-diagonal sum of squares of K covariance matrices over the global
 * batch (N = W·B rows), keeping one copy of them, not the autodiff tape's several.
 *
 * - `sets`: `[K, B, C]`, this rank's rows of K sets of C variables (VICReg's views, VICRegL's
 *   matched locations).
 * - Returns `[K, C + 1]`: columns `0 .. C−1` the diagonal of `C_k = zc_kᵀ zc_k / (N − 1)`
 *   `[C, C]`, column C `Σ_{c≠d} C_k,cd²` (masked, not `Σ C² − Σ C_cc²`, to avoid cancellation),
 *   where `zc_k` is set k's rows (every rank's) less their column means.
 *
 * Collectives: the column sums `[K, C]` (its backward all-reduces their gradient) and the
 * cross-products `[K, C, C]` forward; backward, the incoming gradient `[K, C + 1]` is
 * all-reduced (the scale convention of src/distributed/collectives.ts: each rank's rows get
 * W × the global gradient) and, with `g` its variance part and `h` its off-diagonal part,
 * `∂/∂zc_k = 2 / (N − 1) · (2 h_k · zc_k C_k + zc_k ∘ (g_k − 2 h_k diag C_k))`, from the saved
 * covariances: no `[C, C]` gradient is formed. VICRegL's 192 matched locations of C = 512 peaked
 * at 8.6 GB of tensors through autodiff (about 36 copies), 1.4 GB this way (docs/methods.md).
 */
export function covarianceStatistics(sets: tf.Tensor3D, layout: BatchLayout): tf.Tensor2D {
  const [, , c] = sets.shape;
  const n = layout.globalBatch;
  const mean = tf.div(sumOverRanks(tf.sum(sets, 1, true), layout), n); // [K, 1, C]
  const statistics = tf.customGrad((...args: Array<tf.Tensor | tf.GradSaveFunc>) => {
    const centred = args[0] as tf.Tensor3D;
    const save = args[1] as tf.GradSaveFunc;
    const cov = tf.tidy(() => tf.div(sumOverRanks(tf.matMul(centred, centred, true, false), layout), n - 1)) as tf.Tensor3D; // [K, C, C]
    const variances = diagonals(cov); // [K, C]
    const offDiagonal = tf.tidy(() => tf.expandDims(offDiagonalSumOfSquares(cov), 1)) as tf.Tensor2D; // [K, 1]
    save([centred, cov, variances]);
    const gradFunc = (dy: tf.Tensor, saved: tf.Tensor[]): tf.Tensor => {
      const [zc, covariances, diag] = saved as [tf.Tensor3D, tf.Tensor3D, tf.Tensor2D];
      const [g, h] = tf.split(sumOverRanks(dy, layout), [c, 1], 1) as [tf.Tensor2D, tf.Tensor2D]; // [K, C], [K, 1]
      const h2 = tf.mul(h, 2); // [K, 1]
      const offPart = tf.mul(tf.matMul(zc, covariances), tf.expandDims(h2, 2)); // [K, B, C]
      const diagPart = tf.mul(zc, tf.expandDims(tf.sub(g, tf.mul(h2, diag)), 1)); // [K, B, C]
      return tf.mul(tf.add(offPart, diagPart), 2 / (n - 1));
    };
    return { value: tf.concat([variances, offDiagonal], 1), gradFunc };
  });
  return statistics(tf.sub(sets, mean)) as tf.Tensor2D;
}

/** The diagonals of K square matrices: `[K, C, C] -> [K, C]` (a gather: no `[K, C, C]` mask). */
function diagonals(m: tf.Tensor3D): tf.Tensor2D {
  const [k, c] = m.shape;
  return tf.tidy(() => tf.gather(tf.reshape(m, [k, c * c]), tf.range(0, c * c, c + 1, 'int32'), 1)) as tf.Tensor2D;
}

/**
 * Each view's centred Gram matrix over the global batch, `zcᵀ zc` `[D, D]` with
 * `zc = z − mean` (column means over all N = W·B rows), from all-reduced sums: the views
 * share each differentiable collective, the column sums `[V·D]`, then the local
 * cross-products `[V, D, D]`. `views`: V tensors `[B, D]`.
 */
export function centredGrams(views: tf.Tensor2D[], layout: BatchLayout): tf.Tensor2D[] {
  const all = tf.concat(views, 1); // [B, V·D]
  const mean = tf.div(sumOverRanks(tf.sum(all, 0), layout), layout.globalBatch); // [V·D]
  const centred = tf.split(tf.sub(all, mean), views.length, 1) as tf.Tensor2D[]; // [B, D] each
  const local = tf.stack(centred.map((c) => tf.matMul(c, c, true, false))); // [V, D, D]
  return tf.unstack(sumOverRanks(local, layout)) as tf.Tensor2D[];
}
