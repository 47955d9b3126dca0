/**
 * The VIbCReg loss (Lee & Aune 2021; solo-learn's `vibcreg_loss_func`): VICReg with a
 * normalised (correlation) covariance term, with global-batch statistics.
 */
import { invalidValue } from '../core/errors.js';
import { tf, type Scalar } from '../core/tf.js';
import type { ProcessGroup } from '../core/process-group.js';
import { batchLayout } from './global-batch.js';
import { checkPair, diagonal, offDiagonalSumOfSquares } from './ops.js';
import { centredGrams } from './vicreg.js';

export interface VibcregOptions {
  /** Weight of the invariance (MSE) term. */
  simWeight: number;
  /** Weight of the variance term. */
  varWeight: number;
  /** Weight of the normalised covariance term. */
  covWeight: number;
}

/** solo-learn's defaults: 25, 25, 200. */
export const VIBCREG_DEFAULTS: Readonly<VibcregOptions> = Object.freeze({ simWeight: 25, varWeight: 25, covWeight: 200 });

/** Added to the variance before the square root (solo-learn's `variance_loss`). */
const VARIANCE_EPS = 1e-4;
/** Floor of a column norm (F.normalize's eps). */
const NORM_EPS = 1e-12;

/**
 * VIbCReg: `simWeight · MSE(z1, z2) + varWeight · (mean_j relu(1 − std1_j) + mean_j relu(1 − std2_j))
 * + covWeight · (Σ_{i≠j} R1_ij² + Σ_{i≠j} R2_ij²) / D²`, with `std = sqrt(var_unbiased + 1e-4)`
 * and R the correlation matrix of a view over the global batch: its centred columns divided by
 * their L2 norms (F.normalize over the batch), `R = ẑᵀ ẑ` `[D, D]`. As solo-learn, the two
 * views' variance terms are summed (VICReg in src/losses/vicreg.ts averages them) and the
 * covariance term is the mean over all D² entries of R with its diagonal set to 0.
 *
 * - `z1`, `z2`: `[B, D]` embeddings of the two views (after the projector, IterNorm included:
 *   IterNorm is a layer, not part of this loss). Returns a scalar `[]`. Needs N = W·B ≥ 2.
 * - Per rank: the invariance term is the mean over the local rows; the variance and covariance
 *   terms are global, from the all-reduced column sums and centred Gram matrices
 *   ({@link centredGrams}, differentiable), as VICReg's. So mean_r loss_r is the global loss
 *   (scale convention: src/distributed/collectives.ts). Two collectives forward, two backward.
 */
export function vibcregLoss(z1: tf.Tensor2D, z2: tf.Tensor2D, options: VibcregOptions = VIBCREG_DEFAULTS, group?: ProcessGroup): Scalar {
  checkPair('vibcregLoss', ['z1', 'z2'], z1, z2);
  for (const field of ['simWeight', 'varWeight', 'covWeight'] as const) {
    const value = options[field];
    if (!(Number.isFinite(value) && value >= 0)) throw invalidValue(field, value, 'a number >= 0');
  }
  const layout = batchLayout('vibcregLoss', z1.shape[0], group);
  if (layout.globalBatch < 2) throw invalidValue('batch size', layout.globalBatch, 'at least 2 samples for VIbCReg (unbiased variance)');
  return tf.tidy(() => {
    const d = z1.shape[1];
    const invariance = tf.mean(tf.squaredDifference(z1, z2));
    const terms = centredGrams([z1, z2], layout).map((gram) => {
      const sumSq = diagonal(gram); // [D]: Σ (z − mean)² per column
      const std = tf.sqrt(tf.add(tf.div(sumSq, layout.globalBatch - 1), VARIANCE_EPS));
      const norms = tf.maximum(tf.sqrt(sumSq), NORM_EPS) as tf.Tensor1D; // [D]
      const correlation = tf.div(gram, tf.outerProduct(norms, norms)) as tf.Tensor2D; // [D, D]
      return { variance: tf.mean(tf.relu(tf.sub(1, std))), covariance: tf.div(offDiagonalSumOfSquares(correlation), d * d) };
    });
    return tf.addN([
      tf.mul(options.simWeight, invariance),
      tf.mul(options.varWeight, tf.add(terms[0]!.variance, terms[1]!.variance)),
      tf.mul(options.covWeight, tf.add(terms[0]!.covariance, terms[1]!.covariance)),
    ]) as Scalar;
  });
}
